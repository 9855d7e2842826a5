#include "harness/threads.h"

#include <atomic>
#include <mutex>

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
