// `driftgate worker`: one candidate, N runs under the rules, outputs and a report (worker_main.h).
#include "harness/isolation/worker_main.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/isolation/guard.h"
#include "harness/cases/registry.h"
#include "harness/report/report.h"
#include "harness/core/safetensors.h"
#include "harness/isolation/worker.h"

namespace dg {
namespace {

void on_allocation_failure() {
  static const std::string line = std::string(kAllocationFailedMarker) + "\n";
  if (::write(2, line.data(), line.size()) < 0) {
    // nothing more to do: stderr is gone
  }
  std::set_new_handler(nullptr);   // the retry in operator new now throws std::bad_alloc
}

// Lowers a limit of this process (never raises the hard limit, which would fail).
void set_limit(int resource, rlim_t soft, rlim_t hard, const char* what) {
  rlimit cur{};
  if (getrlimit(resource, &cur) != 0) throw std::runtime_error(fmt::format("getrlimit({}): {}", what, std::strerror(errno)));
  rlimit r{std::min(soft, cur.rlim_max), std::min(hard, cur.rlim_max)};
  if (setrlimit(resource, &r) != 0) throw std::runtime_error(fmt::format("setrlimit({}): {}", what, std::strerror(errno)));
}

// Returns whether the memory limit was applied: not for CUDA candidates, whose driver reserves
// far more address space than any limit we would set (an RLIMIT_AS makes context creation fail).
bool apply_limits(const WorkerArgs& a, const CandidateInfo& info) {
  set_limit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
  bool memory = a.mem_limit > 0 && info.backend != "cuda";
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DG_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(DG_ASAN)
  // AddressSanitizer builds (scripts/sanitize.sh; GCC says so with __SANITIZE_ADDRESS__, clang with
  // __has_feature) reserve terabytes of shadow address space, so an RLIMIT_AS would fail every
  // allocation: they run without the memory limit.
  memory = false;
#endif
  if (memory) {
    const auto b = static_cast<rlim_t>(a.mem_limit);
    set_limit(RLIMIT_AS, b, b, "RLIMIT_AS");
  }
  if (a.cpu_limit > 0) {
    const auto s = static_cast<rlim_t>(std::ceil(a.cpu_limit));
    set_limit(RLIMIT_CPU, s, s + 5, "RLIMIT_CPU");   // SIGXCPU at s, SIGKILL 5 s later
  }
  std::set_new_handler(on_allocation_failure);
  return memory;
}

// The op's input tensors of a stored file (other tensors in it are ignored, as in `driftgate run`).
TensorMap input_tensors(const OpSpec& op, SafetensorsFile&& f) {
  TensorMap in;
  for (const TensorSpec& t : op.tensors)
    if (t.role == TensorRole::input && f.tensors.count(t.name)) in[t.name] = std::move(f.tensors.at(t.name));
  return in;
}

// One rule's verdict over all runs: the first violation is kept.
struct Check {
  std::string state = "not_run";
  std::string detail;
  void pass() {
    if (state == "not_run") state = "ok";
  }
  void fail(int run, const std::string& what) {
    if (state == "violated") return;
    state = "violated";
    detail = fmt::format("run {}: {}", run + 1, what);
  }
  void judge(int run, const std::string& problem) {
    if (problem.empty())
      pass();
    else
      fail(run, problem);
  }
  nlohmann::json json() const { return {{"state", state}, {"detail", detail}}; }
};

using Guarded = std::map<std::string, GuardedTensor>;

std::string check_guards(const Guarded& outs) {
  std::string msg;
  for (const auto& [name, g] : outs) {
    std::string d = g.check_guards();
    if (!d.empty()) msg += fmt::format("{}{}: {}", msg.empty() ? "" : "; ", name, d);
  }
  return msg;
}

// The output map must still view the storage the harness allocated, and no output may overlap an
// input or another output.
std::string check_alias(const Guarded& outs, const TensorMap& out, const TensorMap& in) {
  auto owner = [&](const Tensor& t) -> std::string {
    for (const auto& [n, x] : in)
      if (storage_overlaps(t, x)) return "input " + n;
    for (const auto& [n, g] : outs)
      if (storage_overlaps(t, g.tensor())) return "output " + n;
    return "storage the harness did not allocate";
  };
  for (const auto& [name, g] : outs) {
    auto it = out.find(name);
    if (it == out.end()) return fmt::format("{}: removed from the outputs", name);
    const Tensor& t = it->second;
    if (t.bytes() != g.data() || t.dtype() != g.tensor().dtype() || t.shape() != g.tensor().shape())
      return fmt::format("{}: replaced by a tensor in {}", name, owner(t));
  }
  for (auto a = out.begin(); a != out.end(); ++a) {
    for (const auto& [n, x] : in)
      if (storage_overlaps(a->second, x)) return fmt::format("{}: overlaps input {}", a->first, n);
    for (auto b = std::next(a); b != out.end(); ++b)
      if (storage_overlaps(a->second, b->second)) return fmt::format("{}: overlaps output {}", a->first, b->first);
  }
  return {};
}

uint64_t element_bits(const std::byte* p, size_t width) {
  uint64_t v = 0;
  std::memcpy(&v, p, width);
  return v;
}

std::string compare_outputs(const Guarded& first, const Guarded& now) {
  for (const auto& [name, g] : now) {
    const GuardedTensor& f = first.at(name);
    if (std::memcmp(f.data(), g.data(), g.nbytes()) == 0) continue;
    const auto width = static_cast<size_t>(info(g.tensor().dtype()).storage_bytes);
    size_t differ = 0, first_at = 0;
    for (size_t i = 0, n = g.nbytes() / width; i < n; ++i) {
      if (std::memcmp(f.data() + i * width, g.data() + i * width, width) == 0) continue;
      if (differ++ == 0) first_at = i;
    }
    return fmt::format("{}: {} of {} elements differ from run 1 (first at flat index {}: {:#x} vs {:#x})", name,
                       differ, g.nbytes() / width, first_at, element_bits(f.data() + first_at * width, width),
                       element_bits(g.data() + first_at * width, width));
  }
  return {};
}

}  // namespace

int worker_main(const WorkerArgs& args) {
  exit_with_parent();
  WorkerArgs a = args;
  if (a.in_fd >= 0) a.in = fmt::format("/proc/self/fd/{}", a.in_fd);
  if (a.in.empty()) throw InputError("worker: --in-fd or --in is required");
  if (a.runs < 1) throw InputError(fmt::format("worker: --runs must be >= 1, got {}", a.runs));
  const Candidate* cand = find_candidate(a.candidate);
  if (!cand) throw InputError(fmt::format("worker: unknown candidate '{}'", a.candidate));
  const bool memory_limited = apply_limits(a, cand->info());
  std::setvbuf(stdout, nullptr, _IOLBF, 0);   // a candidate's prints survive its crash

  SafetensorsFile file = read_safetensors(a.in);
  auto meta = file.metadata.find("case");
  if (meta == file.metadata.end()) throw InputError(fmt::format("{}: no 'case' in __metadata__", a.in));
  const Case c = parse_case(meta->second);
  if (cand->info().op != c.op())
    throw InputError(fmt::format("candidate {} implements {}, but the case is {}", cand->name(), cand->info().op, c.op()));
  const OpSpec& op = *find_op(c.op());
  TensorMap first_in = input_tensors(op, std::move(file));
  op.check_inputs(c, first_in);

  std::string status = "ok", message;
  Check guard, input_mutation, alias, nondeterministic;
  std::vector<double> seconds;
  std::optional<Guarded> first_out;
  std::optional<TensorMap> previous_in;
  for (int run = 0; run < a.runs && status == "ok"; ++run) {
    std::string phase = "reading inputs";
    try {
      // Fresh inputs for every run: new addresses (the previous run's are freed only after these
      // are allocated) and contents no earlier run could have touched.
      TensorMap in = run == 0 ? std::move(first_in) : input_tensors(op, read_safetensors(a.in));
      previous_in.reset();
      phase = "allocating outputs";
      Guarded outs;
      TensorMap out;
      for (const auto& [name, shape] : op.output_shapes(c)) {
        auto it = outs.emplace(std::piecewise_construct, std::forward_as_tuple(name),
                               std::forward_as_tuple(output_dtype(name, cand->info()), shape, poison_for_run(run)));
        out[name] = it.first->second.tensor();
      }
      const InputSnapshot before = snapshot_inputs(in);

      phase = "running the candidate";
      const auto t0 = std::chrono::steady_clock::now();
      if (op.drive)
        op.drive(*cand, c, in, out);
      else
        cand->run(c, in, out);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

      phase = "checking";
      guard.judge(run, check_guards(outs));
      input_mutation.judge(run, compare_inputs(before, in));
      alias.judge(run, check_alias(outs, out, in));
      if (run == 0)
        first_out = std::move(outs);
      else
        nondeterministic.judge(run, compare_outputs(*first_out, outs));
      previous_in = std::move(in);
    } catch (const NotSupported& e) {
      status = "not_supported";
      message = e.what();
    } catch (const std::bad_alloc& e) {
      status = "out_of_memory";
      message = fmt::format("run {}, {}: {}{}", run + 1, phase, e.what(),
                            memory_limited ? fmt::format(" (memory limit {} bytes)", a.mem_limit) : "");
    } catch (const std::exception& e) {
      status = "threw";
      message = fmt::format("run {}, {}: {}", run + 1, phase, e.what());
    } catch (...) {
      status = "threw";
      message = fmt::format("run {}, {}: an exception not derived from std::exception", run + 1, phase);
    }
  }

  if (status == "ok") {
    TensorMap outputs;
    for (const auto& [name, g] : *first_out) outputs[name] = g.tensor();
    write_safetensors(a.out, outputs, {{"case", c.str()}, {"candidate", cand->name()}});
  }
  nlohmann::json poisons = nlohmann::json::array();
  for (int run = 0; run < a.runs; ++run) poisons.push_back(poison_name(poison_for_run(run)));
  nlohmann::json report = {
      {"status", status},
      {"message", message},
      {"candidate", cand->name()},
      {"case", c.str()},
      {"runs", a.runs},
      {"memory_limit", memory_limited ? a.mem_limit : 0},
      {"poisons", poisons},
      {"seconds", seconds},
      {"checks",
       {{"guard", guard.json()},
        {"input_mutation", input_mutation.json()},
        {"alias", alias.json()},
        {"nondeterministic", nondeterministic.json()}}}};
  write_file_atomic(a.report, report.dump(2) + "\n");
  return 0;
}

}  // namespace dg
