// The harness's thread budget (--threads) and a static-partition parallel loop.
#pragma once

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

// Runs fn(begin, end) over [0, n) split into contiguous blocks, one per thread; the first exception
// thrown by any block is rethrown after all threads have joined.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int threads = 0);

}  // namespace dg
