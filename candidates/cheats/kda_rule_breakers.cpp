// Candidates that return (nearly) right answers while breaking a harness rule. Each comment names
// the worker rule that catches it (harness/isolation/worker_main.h).
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "candidates/cheats/kda_cheat.h"

namespace dg::cheats {
namespace {

// Right outputs, then zeroes the first half of k through a const_cast, so a reference run after it
// would see other inputs. Caught by rule input_mutation (k's hash changes).
void mutate_input(const Case& c, const TensorMap& in, TensorMap& out) {
  honest().run(c, in, out);
  const Tensor& k = in.at("k");
  std::memset(const_cast<std::byte*>(k.bytes()), 0, k.nbytes() / 2);
}

// Right outputs, then one more element written past the end of o. Caught by rule guard.
void guard_write(const Case& c, const TensorMap& in, TensorMap& out) {
  honest().run(c, in, out);
  Tensor& o = out.at("o");
  const auto width = static_cast<size_t>(info(o.dtype()).storage_bytes);
  std::memcpy(o.bytes() + o.nbytes(), o.bytes(), width);
}

// Right outputs everywhere but the last token's row of o, which it never writes: that row keeps
// whatever the buffer held. Caught by rule nondeterministic (the two runs' poisons differ there).
void uninit(const Case& c, const TensorMap& in, TensorMap& out) {
  TensorMap mine = fresh_like(out);
  honest().run(c, in, mine);
  for (auto& [name, t] : out) {
    const Tensor& src = mine.at(name);
    size_t n = t.nbytes();
    if (name == "o") n -= t.nbytes() / static_cast<size_t>(t.dim(0) * t.dim(1));   // one token of [B,T,HV,V]
    std::memcpy(t.bytes(), src.bytes(), n);
  }
}

// Result replay: the first call of a case computes and keeps a deep copy of its outputs; every later
// call of the same case computes nothing and hands the kept tensors back by replacing the tensors
// in `out`. Caught in run 2 by rule alias (the outputs are no longer the storage the harness
// allocated) and by rule nondeterministic (that storage still holds run 2's poison). A replay that
// copied the kept bits into `out` would give the right answer for the same inputs: that one only
// pays off in timed calls, and the bench's fresh inputs with checked outputs catch it.
void stale(const Case& c, const TensorMap& in, TensorMap& out) {
  static std::mutex mu;
  static std::map<std::string, TensorMap> kept;
  std::lock_guard<std::mutex> lock(mu);
  auto it = kept.find(c.str());
  if (it != kept.end()) {
    for (auto& [name, t] : out) t = it->second.at(name);
    return;
  }
  honest().run(c, in, out);
  TensorMap copy;
  for (const auto& [name, t] : out) copy[name] = t.clone();
  kept.emplace(c.str(), std::move(copy));
}

// Right outputs computed into the harness's buffers, then o is handed back as the input v itself
// (the copy-input null kernel, without the copy) when dtype and shape allow, else as the output ht.
// Caught by rule alias.
void alias(const Case& c, const TensorMap& in, TensorMap& out) {
  honest().run(c, in, out);
  const Tensor& v = in.at("v");
  Tensor& o = out.at("o");
  o = (v.dtype() == o.dtype() && v.shape() == o.shape()) ? v : out.at("ht");
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_mutate_input, cheat_info("kda_cheat_mutate_input", "zeroes half of input k after computing (rule input_mutation)"), mutate_input);
DG_REGISTER_CANDIDATE(kda_cheat_guard_write, cheat_info("kda_cheat_guard_write", "writes one element past the end of o (rule guard)"), guard_write);
DG_REGISTER_CANDIDATE(kda_cheat_uninit, cheat_info("kda_cheat_uninit", "never writes the last token of o (rule nondeterministic)"), uninit);
DG_REGISTER_CANDIDATE(kda_cheat_stale, cheat_info("kda_cheat_stale", "replays its first outputs on later calls (rules alias, nondeterministic)"), stale);
DG_REGISTER_CANDIDATE(kda_cheat_alias, cheat_info("kda_cheat_alias", "returns input v as its output o (rule alias)"), alias);

}  // namespace dg::cheats
