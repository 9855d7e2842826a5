// CUDA candidate of moe_router (moe_router.h): one block per token (a power of two of threads, 32 to
// 256, each thread a stride of the experts), the token's scores in shared memory.
//
//   1. s_e = 1 / (1 + expf(-z_e)) and sel_e = s_e + b_e in f32, each thread its experts
//   2. with groups (n_group > 1), one thread per group: its largest sel, then the largest of the
//      others (two argmax passes, the lower index on ties), the score their f32 sum; then topk_group
//      block-wide argmaxes over the group scores keep the groups, and the other groups' experts are
//      masked out
//   3. k block-wide argmaxes over the unmasked sel: slot j the expert of rank j
//   4. thread 0: the slots' s (sigmoid recomputed, the same f32 operations) summed in slot order,
//      w_j = s_j / (sum + 1e-20f) (renorm), times f32(rsf)
// A block-wide argmax: each thread the best of its experts in increasing index (a strictly larger
// score replaces, so the lower index keeps a tie), then a tree over the threads in shared memory with
// the key (score larger, then index lower). The result is the tie rule's, whatever the tree's order,
// so the sets are exactly those of moe_router_cpu_naive_f32 where sel agrees bit for bit.
//
// Numerics: moe_router_cpu_naive_f32's operations in its order (--fmad=false: no contraction). expf
// is CUDA's accurate one (within 2 ulp; the host's within 1), so on a GPU s may differ from the CPU
// candidate's by an ulp, which moves a decision only at a margin far below the op's tol (flips_wide
// judges that); under the emulator expf is the host's and the two agree bit for bit.
//
// Shared memory: sel [E <= 4096] f32, the group scores [<= 2048], a mask byte per expert and per
// group, the argmax tree: 32 KiB at the largest E, under the 48 KiB of static shared memory.
//
// Compiled by nvcc into dg_cuda, and against the CUDA emulator (emu/moe_router_emu.cpp) for the tests.
#include "candidates/cuda/moe_router.h"

#include <algorithm>

#include "candidates/cuda/cuda_rt.h"
#include "harness/ops/moe_router.h"

namespace dg {
namespace {
using namespace cu;

constexpr int kMaxRouterThreads = 256;
constexpr int kMaxExperts = 4096;       // moe_router_check_params' bound
constexpr int kMaxGroups = kMaxExperts / 2;

struct RouterArgs {
  const float* logits;   // [T, E]
  const float* bias;     // [E]
  int* ids;              // [T, k]
  float* w;              // [T, k]
  int E, k, n_group, topk_group;
  bool renorm;
  float rsf;
};

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// The index of the largest v[0..n) not masked (the lower index on ties), for every thread of the
// block; thread 0 masks it. rv, ri: blockDim.x entries of shared scratch.
__device__ int block_argmax(const float* v, unsigned char* masked, int n, float* rv, int* ri) {
  const int tid = threadIdx.x;
  int best = -1;
  float bv = 0.0f;
  for (int e = tid; e < n; e += blockDim.x)
    if (!masked[e] && (best < 0 || v[e] > bv)) best = e, bv = v[e];
  rv[tid] = bv;
  ri[tid] = best;
  __syncthreads();
  for (int st = blockDim.x / 2; st > 0; st /= 2) {
    if (tid < st) {
      const int j = tid + st;
      if (ri[j] >= 0 && (ri[tid] < 0 || rv[j] > rv[tid] || (rv[j] == rv[tid] && ri[j] < ri[tid]))) {
        rv[tid] = rv[j];
        ri[tid] = ri[j];
      }
    }
    __syncthreads();
  }
  const int r = ri[0];
  if (tid == 0) masked[r] = 1;
  __syncthreads();
  return r;
}

// Step 2 of the head comment: the kept groups; the experts of the others masked.
__device__ void keep_groups(const RouterArgs& a, const float* sel, unsigned char* masked, float* gscore,
                            unsigned char* gtaken, float* rv, int* ri) {
  const int G = a.E / a.n_group;
  for (int g = threadIdx.x; g < a.n_group; g += blockDim.x) {
    const int lo = g * G, hi = lo + G;
    int x = lo;
    for (int e = lo + 1; e < hi; ++e)
      if (sel[e] > sel[x]) x = e;
    int y = x == lo ? lo + 1 : lo;
    for (int e = y + 1; e < hi; ++e)
      if (e != x && sel[e] > sel[y]) y = e;
    gscore[g] = sel[x] + sel[y];
    gtaken[g] = 0;
  }
  __syncthreads();
  for (int j = 0; j < a.topk_group; ++j) block_argmax(gscore, gtaken, a.n_group, rv, ri);
  for (int e = threadIdx.x; e < a.E; e += blockDim.x) masked[e] = gtaken[e / G] ? 0 : 1;
  __syncthreads();
}

__global__ void __launch_bounds__(kMaxRouterThreads) moe_router_kernel(RouterArgs a) {
  __shared__ float sel[kMaxExperts], gscore[kMaxGroups], rv[kMaxRouterThreads];
  __shared__ int ri[kMaxRouterThreads];
  __shared__ unsigned char masked[kMaxExperts], gtaken[kMaxGroups];
  const int64_t t = blockIdx.x;
  const float* z = a.logits + t * a.E;
  for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
    sel[e] = sigmoid(z[e]) + a.bias[e];
    masked[e] = 0;
  }
  __syncthreads();
  if (a.n_group > 1) keep_groups(a, sel, masked, gscore, gtaken, rv, ri);
  int* ids = a.ids + t * a.k;
  for (int j = 0; j < a.k; ++j) {
    const int e = block_argmax(sel, masked, a.E, rv, ri);
    if (threadIdx.x == 0) ids[j] = e;
  }
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int j = 0; j < a.k; ++j) sum += sigmoid(z[ids[j]]);
  for (int j = 0; j < a.k; ++j) {
    float v = sigmoid(z[ids[j]]);
    if (a.renorm) v = v / (sum + 1e-20f);
    a.w[t * a.k + j] = v * a.rsf;
  }
}

}  // namespace

void moe_router_cuda_f32(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "moe_router";
  require_device();
  const MoeRouterParams p = moe_router_params(c);
  if (p.E > kMaxExperts) throw std::invalid_argument("moe_router: E above the kernel's 4096");
  RouterArgs A{};
  A.logits = f32_input(in, "logits", op, p.T * p.E);
  A.bias = f32_input(in, "bias", op, p.E);
  Tensor& ids = need(out, "topk_ids", op, p.T * p.k);
  Tensor& w = need(out, "topk_weights", op, p.T * p.k);
  A.ids = static_cast<int*>(scratch().get("topk_ids", static_cast<size_t>(p.T * p.k) * 4));
  A.w = static_cast<float*>(scratch().get("topk_weights", static_cast<size_t>(p.T * p.k) * 4));
  A.E = static_cast<int>(p.E);
  A.k = static_cast<int>(p.k);
  A.n_group = static_cast<int>(p.n_group);
  A.topk_group = static_cast<int>(p.topk_group);
  A.renorm = p.renorm;
  A.rsf = static_cast<float>(p.rsf);
  int threads = kWarp;
  while (threads < kMaxRouterThreads && threads < p.E) threads *= 2;
  run_launch([&](cudaStream_t s) {
    DG_LAUNCH(moe_router_kernel, static_cast<unsigned>(p.T), static_cast<unsigned>(threads), s, A);
    DG_LAUNCHED("moe_router_kernel");
  });
  store_output(A.ids, DType::i32, ids);
  store_output(A.w, DType::f32, w);
}

}  // namespace dg
