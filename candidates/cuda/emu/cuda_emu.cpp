// The CUDA emulator's scheduler and runtime (cuda_emu.h describes the model).
#include "candidates/cuda/emu/cuda_emu.h"

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "candidates/cuda/device.h"

__thread uint3 threadIdx, blockIdx;
__thread dim3 blockDim, gridDim;

namespace {
constexpr double kClockGHz = 1.98;   // nominal SM clock of clock64()

long long steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::atomic<double> g_clock_scale{1.0};
}  // namespace

long long clock64() { return static_cast<long long>(static_cast<double>(steady_ns()) * kClockGHz * g_clock_scale); }
unsigned long long globaltimer_ns() { return static_cast<unsigned long long>(steady_ns()); }

namespace dg {

CudaStatus cuda_status() { return {true, "", "driftgate CUDA emulator (host fibers)"}; }

namespace cuda_emu {
namespace {
namespace bc = boost::context;

std::atomic<bool> g_reverse{false};

// Fiber stacks of one OS thread, reused by every block and launch (a fresh mmap per fiber would
// cost more than the kernels). Guard pages turn a stack overflow into a fault, not corruption.
class Stacks {
 public:
  bc::stack_context allocate() {
    if (free_.empty()) return alloc_.allocate();
    bc::stack_context s = free_.back();
    free_.pop_back();
    return s;
  }
  void deallocate(bc::stack_context& s) noexcept {
#if defined(__SANITIZE_ADDRESS__)
    // A fiber unwound mid-call (a failed block) leaves its frames' red zones poisoned; the next
    // fiber on this stack must start clean.
    ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(s.sp) - s.size, s.size);
#endif
    free_.push_back(s);
  }
  ~Stacks() {
    for (bc::stack_context& s : free_) alloc_.deallocate(s);
  }

 private:
  bc::protected_fixedsize_stack alloc_{256 * 1024};
  std::vector<bc::stack_context> free_;
};
thread_local Stacks t_stacks;
struct CachedStack {   // Boost.Context's StackAllocator concept over t_stacks
  bc::stack_context allocate() { return t_stacks.allocate(); }
  void deallocate(bc::stack_context& s) noexcept { t_stacks.deallocate(s); }
};

struct Barrier {
  int expected = 0, arrived = 0;   // expected: the members that have not exited
  unsigned gen = 0;                // completed phases
  std::vector<int> waiting;
};

struct Access {
  uintptr_t addr;
  unsigned bytes;
};

struct Thread {
  bc::fiber f;      // resumes this thread; empty once it has returned
  bc::fiber sink;   // inside the thread: resumes the scheduler
  uint3 tid{};
  int warp = 0, lane = 0;
  bool ready = true;
  std::vector<Access> loads, stores;   // streaming accesses, in order (when tracing)
};

// One block's threads and barriers: sync (__syncthreads) and one per warp (shuffles).
struct Block {
  std::vector<Thread> th;
  Barrier sync;
  std::vector<Barrier> warps;
  std::vector<std::array<float, 32>> shfl[2];   // by the warp barrier's phase parity
  int cur = -1;
  std::string error;
};
thread_local Block* t_block = nullptr;
thread_local StreamingTrace t_trace;

thread_local cudaError_t t_last = cudaSuccess;
thread_local std::string t_detail;   // the message of the last launch failure

cudaError_t fail_call(cudaError_t e, std::string detail = "") {
  t_last = e;
  if (!detail.empty()) t_detail = std::move(detail);
  return e;
}

Block& current_block() {
  if (!t_block) std::abort();   // a device function called outside a launch: a bug in the emulator's user
  return *t_block;
}

void yield(Block& b) {
  Thread& me = b.th[static_cast<size_t>(b.cur)];
  me.sink = std::move(me.sink).resume();
}

void release(Block& b, Barrier& bar) {
  for (int i : bar.waiting) b.th[static_cast<size_t>(i)].ready = true;
  bar.waiting.clear();
  bar.arrived = 0;
  ++bar.gen;
}

void arrive(Block& b, Barrier& bar) {
  b.th[static_cast<size_t>(b.cur)].ready = false;
  bar.waiting.push_back(b.cur);
  if (++bar.arrived == bar.expected) release(b, bar);
  yield(b);
}

// Stops the block with `msg`: this thread never runs again (its fiber is unwound with the block).
[[noreturn]] void fail(Block& b, const std::string& msg) {
  b.error = msg;
  b.th[static_cast<size_t>(b.cur)].ready = false;
  yield(b);
  std::abort();   // unreachable: the scheduler never resumes a failed block
}

std::string where(const Thread& t) {
  return "thread (" + std::to_string(t.tid.x) + "," + std::to_string(t.tid.y) + "," + std::to_string(t.tid.z) + ")";
}

void thread_exit(Block& b, int i) {
  Thread& t = b.th[static_cast<size_t>(i)];
  Barrier& w = b.warps[static_cast<size_t>(t.warp)];
  --w.expected;
  if (w.arrived > 0 && b.error.empty())
    b.error = where(t) + " exited while lanes of its warp wait at __shfl_xor_sync";
  if (--b.sync.expected > 0 && b.sync.arrived == b.sync.expected) release(b, b.sync);
}

// Adds the streaming accesses of one warp's lanes [first, last) to `t`: the n-th access of every
// lane that has one is a request.
void count_requests(const Block& b, size_t first, size_t last, std::vector<Access> Thread::*list, Traffic& t) {
  size_t most = 0;
  for (size_t i = first; i < last; ++i) {
    const size_t n = (b.th[i].*list).size();
    if (n != (b.th[first].*list).size()) t_trace.uniform = false;
    most = std::max(most, n);
  }
  std::vector<uintptr_t> sectors;
  for (size_t k = 0; k < most; ++k) {
    sectors.clear();
    for (size_t i = first; i < last; ++i) {
      const std::vector<Access>& a = b.th[i].*list;
      if (k >= a.size()) continue;
      for (uintptr_t s = a[k].addr / 32; s <= (a[k].addr + a[k].bytes - 1) / 32; ++s) sectors.push_back(s);
      t.bytes += a[k].bytes;
    }
    std::sort(sectors.begin(), sectors.end());
    t.sectors += static_cast<uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
    ++t.requests;
  }
}

void run_block(Block& b, unsigned n, const std::function<void()>& body, bool reverse) {
  const unsigned nwarps = (n + 31) / 32;
  b.th.clear();
  b.th.resize(n);
  b.sync = Barrier{};
  b.sync.expected = static_cast<int>(n);
  b.warps.assign(nwarps, Barrier{});
  for (unsigned w = 0; w < nwarps; ++w) b.warps[w].expected = static_cast<int>(std::min(32u, n - 32 * w));
  for (auto& s : b.shfl) s.assign(nwarps, {});
  b.error.clear();
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.th[i];
    t.tid = {i % blockDim.x, (i / blockDim.x) % blockDim.y, i / (blockDim.x * blockDim.y)};
    t.warp = static_cast<int>(i / 32);
    t.lane = static_cast<int>(i % 32);
    t.f = bc::fiber(std::allocator_arg, CachedStack{}, [&b, i, &body](bc::fiber&& sink) {
      b.th[i].sink = std::move(sink);
      body();
      thread_exit(b, static_cast<int>(i));
      return std::move(b.th[i].sink);
    });
  }
  unsigned live = n;
  while (live > 0 && b.error.empty()) {
    bool ran = false;
    for (unsigned k = 0; k < n && b.error.empty(); ++k) {
      const unsigned i = reverse ? n - 1 - k : k;
      Thread& t = b.th[i];
      if (!t.f || !t.ready) continue;
      b.cur = static_cast<int>(i);
      threadIdx = t.tid;
      t.f = std::move(t.f).resume();
      ran = true;
      if (!t.f) --live;
    }
    if (!ran && live > 0 && b.error.empty()) {
      size_t at_shfl = 0;
      for (const Barrier& w : b.warps) at_shfl += w.waiting.size();
      b.error = "deadlock: " + std::to_string(b.sync.waiting.size()) + " threads wait at __syncthreads and " +
                std::to_string(at_shfl) + " at __shfl_xor_sync, and no thread can run (a barrier in divergent code)";
    }
  }
  if (t_tracing && b.error.empty())
    for (size_t first = 0; first < n; first += 32) {
      const size_t last = std::min<size_t>(first + 32, n);
      count_requests(b, first, last, &Thread::loads, t_trace.load);
      count_requests(b, first, last, &Thread::stores, t_trace.store);
    }
  b.th.clear();   // unwinds the fibers of a failed block
}

}  // namespace

void set_thread_order(bool reverse) { g_reverse = reverse; }
void set_clock_scale(double scale) { g_clock_scale = scale; }

thread_local bool t_tracing = false;
void trace_streaming(bool on) {
  t_tracing = on;
  if (on) t_trace = {};
}
StreamingTrace streaming_trace() { return t_trace; }
void record_streaming(const void* p, unsigned bytes, bool store) {
  Block& b = current_block();
  Thread& me = b.th[static_cast<size_t>(b.cur)];
  (store ? me.stores : me.loads).push_back({reinterpret_cast<uintptr_t>(p), bytes});
}

void syncthreads() {
  Block& b = current_block();
  arrive(b, b.sync);
}

float shfl_xor(unsigned mask, float v, int lane_mask) {
  Block& b = current_block();
  const Thread& me = b.th[static_cast<size_t>(b.cur)];
  if (mask != 0xffffffffu) fail(b, where(me) + ": __shfl_xor_sync with a partial mask (the emulator runs full warps only)");
  Barrier& bar = b.warps[static_cast<size_t>(me.warp)];
  if (bar.expected != 32)
    fail(b, where(me) + ": __shfl_xor_sync in a warp of " + std::to_string(bar.expected) + " live lanes (exited or partial)");
  auto& slots = b.shfl[bar.gen & 1][static_cast<size_t>(me.warp)];
  slots[static_cast<size_t>(me.lane)] = v;
  arrive(b, bar);
  return slots[static_cast<size_t>((me.lane ^ lane_mask) & 31)];
}

void run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
  const uint64_t n = uint64_t{block.x} * block.y * block.z;
  if (n == 0 || n > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu ||
      grid.y > 65535 || grid.z > 65535) {
    fail_call(cudaErrorInvalidConfiguration);
    return;
  }
  if (t_block) std::abort();   // kernels here do not launch kernels
  Block b;
  t_block = &b;
  gridDim = grid;
  blockDim = block;
  const bool reverse = g_reverse;
  for (unsigned z = 0; z < grid.z && b.error.empty(); ++z)
    for (unsigned y = 0; y < grid.y && b.error.empty(); ++y)
      for (unsigned x = 0; x < grid.x && b.error.empty(); ++x) {
        blockIdx = {x, y, z};
        run_block(b, static_cast<unsigned>(n), body, reverse);
        if (!b.error.empty())
          fail_call(cudaErrorLaunchFailure, "block (" + std::to_string(x) + "," + std::to_string(y) + "," +
                                                std::to_string(z) + "): " + b.error);
      }
  t_block = nullptr;
}

}  // namespace cuda_emu
}  // namespace dg

// --- runtime API ------------------------------------------------------------------------------------
using dg::cuda_emu::fail_call;

struct CUstream_st {};
struct CUevent_st {
  std::chrono::steady_clock::time_point t{};
  bool recorded = false;
};

// 256-byte aligned as cudaMalloc's, so the streaming trace counts the sectors a device would. The
// rounding's tail is poisoned for AddressSanitizer: an access past the bytes asked for is caught.
cudaError_t cudaMalloc(void** p, size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256 + (bytes == 0) * 256;
  *p = std::aligned_alloc(256, rounded);
  if (!*p) return fail_call(cudaErrorMemoryAllocation);
#if defined(__SANITIZE_ADDRESS__)
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(*p) + bytes, rounded - bytes);
#endif
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (!p && bytes) return fail_call(cudaErrorInvalidValue);
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if ((!dst || !src) && bytes) return fail_call(cudaErrorInvalidValue);
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }   // launches are synchronous
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (!e) return fail_call(cudaErrorInvalidValue);
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : fail_call(cudaErrorInvalidValue); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  if (!start || !stop || !start->recorded || !stop->recorded) return fail_call(cudaErrorInvalidValue);
  *ms = std::chrono::duration<float, std::milli>(stop->t - start->t).count();
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaCtxResetPersistingL2Cache() { return cudaSuccess; }
cudaError_t cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
// Nominal figures: an H200's memory clock and bus (4.9 TB/s), and a 1 MiB L2 and 4 SMs, so the L2
// flush before each timed launch (a read kernel of 2 blocks per SM) stays cheap on the host.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrL2CacheSize: *value = 1 << 20; break;
    case cudaDevAttrMemoryClockRate: *value = 3200000; break;   // kHz
    case cudaDevAttrGlobalMemoryBusWidth: *value = 6144; break;
    case cudaDevAttrMultiProcessorCount: *value = 4; break;
  }
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = dg::cuda_emu::t_last;
  dg::cuda_emu::t_last = cudaSuccess;
  return e;
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return dg::cuda_emu::t_detail.c_str();
  }
  return "unknown error";
}
