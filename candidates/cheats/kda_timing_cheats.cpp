// Cheats aimed at the timer rather than the precision check: correct whenever they are verified,
// wrong (or absent) work when they are timed. The gate's throughput rules catch them.
//   kda_cheat_cache   remembers its outputs by the address of input q and replays them when the same
//                     address comes back: stale results (timed outputs differ from an untimed re-run)
//   kda_cheat_skip    computes its first calls honestly, then returns at once without doing the work
//                     (faster than the machine's physical limit; identical outputs for different inputs)
#include <atomic>
#include <map>
#include <mutex>

#include "candidates/cheats/kda_cheat.h"

namespace dg {
namespace {

using cheats::cheat_info;
using cheats::honest;

void cache(const Case& c, const TensorMap& in, TensorMap& out) {
  static std::mutex mu;
  static std::map<const std::byte*, TensorMap> memo;
  const std::byte* key = in.at("q").bytes();
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(key);
  if (it != memo.end()) {
    for (auto& [name, t] : out) std::copy(it->second.at(name).bytes(), it->second.at(name).bytes() + t.nbytes(), t.bytes());
    return;
  }
  honest().run(c, in, out);
  TensorMap keep;
  for (const auto& [name, t] : out) keep[name] = t.clone();
  memo[key] = std::move(keep);
}

void skip(const Case& c, const TensorMap& in, TensorMap& out) {
  static std::atomic<int> calls{0};
  // A worker process verifies with two runs; the timer calls many more times.
  if (calls.fetch_add(1) < 3) honest().run(c, in, out);
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_cheat_cache, cheat_info("kda_cheat_cache", "replays outputs cached by input address (rule timed_outputs)"), cache);
DG_REGISTER_CANDIDATE(kda_cheat_skip, cheat_info("kda_cheat_skip", "skips the work after its first calls (rules physical_bound, timed_outputs)"), skip);

}  // namespace dg
