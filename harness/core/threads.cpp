#include "harness/core/threads.h"

#include <sched.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

namespace dg {
namespace {
std::atomic<int> g_threads{0};
}

int num_threads() {
  int n = g_threads.load();
  if (n > 0) return n;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void set_num_threads(int n) { g_threads.store(std::max(0, n)); }

std::vector<int> allowed_cpus() {
  std::vector<int> v;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) v.push_back(i);
  if (v.empty())
    for (int i = 0; i < static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); ++i) v.push_back(i);
  return v;
}

std::vector<int> cpus_for_budget(int threads) {
  std::vector<int> all = allowed_cpus();
  if (threads > 0 && threads < static_cast<int>(all.size())) all.resize(static_cast<size_t>(threads));
  return all;
}

bool pin_to_cpus(pid_t tid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return ::sched_setaffinity(tid, sizeof set, &set) == 0;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string s;
  for (int c : cpus) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> v;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    if (item.empty() || item.size() > 5 || item.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("not a CPU list: '" + text + "'");
    v.push_back(std::stoi(item));
    start = end + 1;
  }
  return v;
}

std::vector<std::string> budget_environment(int threads) {
  const std::string n = std::to_string(std::max(1, threads));
  return {"DRIFTGATE_THREADS=" + n, "OMP_NUM_THREADS=" + n, "OPENBLAS_NUM_THREADS=" + n, "MKL_NUM_THREADS=" + n};
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads) {
  if (n <= 0) return;
  int t = static_cast<int>(std::min<int64_t>(threads > 0 ? threads : num_threads(), n));
  if (t <= 1) { fn(0, n); return; }
  std::exception_ptr error;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (int i = 0; i < t; ++i) {
    int64_t b = n * i / t, e = n * (i + 1) / t;
    pool.emplace_back([&, b, e] {
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace dg
