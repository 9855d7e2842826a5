// The harness's thread budget (--threads) and a static-partition parallel loop.
//
// The budget binds candidates too (harness/timing/timing_worker.h): a timing worker granted N threads
// is pinned to N cores (cpus_for_budget), plugins read it as "threads" in params_json
// (candidate_abi.h), exec programs as DRIFTGATE_THREADS, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS
// and MKL_NUM_THREADS (budget_environment), and a candidate whose CPU time per second of its timed
// calls exceeds the budget is INVALID (rule cpu_budget).
#pragma once

#include <sys/types.h>

#include <string>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace dg {

// Worker threads for references, generators and candidates; default: all cores.
int num_threads();
void set_num_threads(int n);   // n <= 0 restores the default

// The CPUs this process may run on (sched_getaffinity), ascending; every online CPU when unknown.
std::vector<int> allowed_cpus();
// The first `threads` of allowed_cpus(); all of them when threads <= 0 or more than there are.
std::vector<int> cpus_for_budget(int threads);
// Pins the thread or process `tid` (0: the calling thread) to `cpus`; false when the kernel refused.
bool pin_to_cpus(pid_t tid, const std::vector<int>& cpus);
// "0,1,4" and back; parse_cpu_list throws std::invalid_argument on anything else.
std::string cpu_list_text(const std::vector<int>& cpus);
std::vector<int> parse_cpu_list(const std::string& text);
// "DRIFTGATE_THREADS=n", "OMP_NUM_THREADS=n", "OPENBLAS_NUM_THREADS=n", "MKL_NUM_THREADS=n".
std::vector<std::string> budget_environment(int threads);

// Runs fn(begin, end) over [0, n) split into contiguous blocks, one per thread; the first exception
// thrown by any block is rethrown after all threads have joined.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads = 0);

}  // namespace dg
