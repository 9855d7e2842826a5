// CUDA candidate of attention_decode (attention_decode.h): paged split-KV decode attention in two
// kernels, flash-decoding's form (vLLM PagedAttention v2, FlashAttention's num_splits, FlashInfer's
// merge_state), launched together as one timed call.
//
// Kernel 1, split_kernel: one block of 128 threads per (sequence b, split s, kv head g, tile of up to
// 16 of g's q heads; one tile for every config's group up to 16 at d <= 256). Split s covers the
// sequence's pages [s ceil(n/split), (s+1) ceil(n/split)), tokens past the length cut (the op's
// rule, attention_decode_pages_per_split). The block holds its heads' queries in shared memory (f32)
// and walks its tokens in tiles of T = min(32, 6144 / (d + 1 + dv)) tokens:
//   1. the tile's K and V rows, gathered through the page table, dequantized to f32 (k_scale * k,
//      v_scale * v, one rounding each; scales of 1 for non-FP8 pages change nothing) into shared
//      memory, each row read once from global memory for every q head of the block;
//   2. one thread per (head, token): s = fl32(q.k) * scale, the dot product summed in f32 in
//      increasing channel order (no contraction: --fmad=false);
//   3. one thread per head: the tile's max, m_new = max(m, tile max), alpha = exp(m - m_new) (0 on
//      the first tile, m = -inf), p_j = exp(s_j - m_new), a fresh f32 partial l_t = sum p_j in
//      increasing j, l = l alpha + l_t;
//   4. one thread per (head, channel): a fresh f32 partial acc_t = sum p_j v_j in increasing j,
//      acc = acc alpha + acc_t.
// At the end o_p = acc / l and lse_p = m + ln l (f32, natural log); a split with no keys writes
// o_p = 0 and lse_p = -inf (the -inf guard: its m - m would be NaN).
//
// Kernel 2, merge_kernel: one block per (b, h): M = max_p lse_p; M = -inf (an empty context) gives
// o = 0 and lse = -inf; otherwise w_p = exp(lse_p - M), o = (sum_p w_p o_p) / sum_p w_p and
// lse = M + ln sum_p w_p, every sum in increasing p: attention_decode_cpu_splitkv_f32's merge.
// With split = 1 the merge returns o_1 and lse_1 unchanged.
//
// Numerics differ from attention_decode_cpu_splitkv_f32 only in the tile (T tokens here, one KV page
// there: the same per-tile partials and rescale, at other boundaries), and in expf/logf, CUDA's
// accurate ones (within 2 ulp; the host's within 1 under the emulator). KV pages are read as stored
// (bf16, f16, f32, e4m3 decoded exactly); f64 pages and q are read as f32 (one rounding, as the CPU
// candidate reads them).
//
// Compiled by nvcc into dg_cuda, and against the CUDA emulator (emu/attention_decode_emu.cpp) for
// the tests.
#include "candidates/cuda/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "candidates/cuda/cuda_rt.h"
#include "candidates/cuda/decode_common.cuh"
#include "harness/ops/attention_decode.h"

namespace dg {
namespace {
using namespace cu;
using namespace decode_cu;

constexpr int kThreads = 128;
constexpr int kMaxHeads = 16;                   // q heads of one kv head per block
constexpr int kQFloats = 4096;                  // the block's queries: heads * max(d, dv) <= 4096
constexpr int kKvFloats = 6144;                 // a tile's K (padded) and V: T (d + 1) + T dv <= 6144
constexpr int kMaxTile = 32;                    // tokens per tile
constexpr int kPairs = kQFloats / kThreads;     // (head, channel) accumulators per thread

struct SplitArgs {
  const float* q;           // [B, n_h, d]
  const void *k, *v;        // [n_pages, page, n_kv, d | dv], elements of the kernel's T
  const int *table, *lens;   // [B, max_pages], [B]
  float *o_part, *lse_part;  // [B, n_h, split, dv], [B, n_h, split]
  int64_t n_h, n_kv, d, dv, page, max_pages, split, group, heads, tile;
  float scale, k_scale, v_scale;
};

// Step 1: tokens [t0, t0 + n) of kv head g of sequence b into k_s [n, d + 1] and v_s [n, dv].
template <class T>
__device__ void load_tile(const SplitArgs& a, int64_t b, int64_t g, int64_t t0, int n, float* k_s, float* v_s) {
  const T *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v);
  const int d = static_cast<int>(a.d), dv = static_cast<int>(a.dv);   // tile indices: 32 bits
  for (int x = threadIdx.x; x < n * d; x += blockDim.x) {
    const int j = x / d, i = x % d;
    const int64_t t = t0 + j;
    const int64_t slot = int64_t{a.table[b * a.max_pages + t / a.page]} * a.page + t % a.page;
    k_s[j * (d + 1) + i] = kv_value(k, (slot * a.n_kv + g) * a.d + i) * a.k_scale;
  }
  for (int x = threadIdx.x; x < n * dv; x += blockDim.x) {
    const int j = x / dv, c = x % dv;
    const int64_t t = t0 + j;
    const int64_t slot = int64_t{a.table[b * a.max_pages + t / a.page]} * a.page + t % a.page;
    v_s[j * dv + c] = kv_value(v, (slot * a.n_kv + g) * a.dv + c) * a.v_scale;
  }
}

// Step 3 for head h: the tile's scores p_s[0, n) become their weights exp(s - m_new).
__device__ void softmax_step(float* p_s, int n, float& m, float& l, float& alpha) {
  float mt = -INFINITY;
  for (int j = 0; j < n; ++j) mt = fmaxf(mt, p_s[j]);
  const float m_new = fmaxf(m, mt);
  alpha = expf(m - m_new);
  float lt = 0.0f;   // the tile's fresh partial
  for (int j = 0; j < n; ++j) {
    const float e = expf(p_s[j] - m_new);
    p_s[j] = e;
    lt = lt + e;
  }
  m = m_new;
  l = l * alpha + lt;
}

template <class T>
__global__ void __launch_bounds__(kThreads) split_kernel(SplitArgs a) {
  __shared__ float q_s[kQFloats], kv_s[kKvFloats], p_s[kMaxHeads * kMaxTile];
  __shared__ float m_s[kMaxHeads], l_s[kMaxHeads], alpha_s[kMaxHeads];
  const int64_t b = blockIdx.x / a.split, s = blockIdx.x % a.split, tiles = (a.group + a.heads - 1) / a.heads;
  const int64_t g = blockIdx.y / tiles, h0 = g * a.group + (blockIdx.y % tiles) * a.heads;
  const int nh = static_cast<int>(lmin(a.heads, (g + 1) * a.group - h0)), dv = static_cast<int>(a.dv), pairs = nh * dv;
  const int tid = threadIdx.x;
  const int64_t L = a.lens[b], pages = (L + a.page - 1) / a.page;
  const int64_t span = (pages == 0 ? 1 : (pages + a.split - 1) / a.split) * a.page;
  const int64_t j0 = lmin(L, s * span), j1 = lmin(L, (s + 1) * span);
  for (int x = tid; x < nh * a.d; x += blockDim.x) q_s[x] = a.q[(b * a.n_h + h0) * a.d + x];
  if (tid < nh) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
  float acc[kPairs];
#pragma unroll
  for (int k = 0; k < kPairs; ++k) acc[k] = 0.0f;
  float *k_s = kv_s, *v_s = kv_s + a.tile * (a.d + 1);
  __syncthreads();
  for (int64_t t0 = j0; t0 < j1; t0 += a.tile) {
    const int n = static_cast<int>(lmin(a.tile, j1 - t0));
    load_tile<T>(a, b, g, t0, n, k_s, v_s);
    __syncthreads();
    for (int x = tid; x < nh * n; x += blockDim.x) {   // step 2
      const int h = x / n, j = x % n;
      const float *qh = q_s + h * a.d, *kj = k_s + j * (a.d + 1);
      float dot = 0.0f;
      for (int64_t i = 0; i < a.d; ++i) dot = dot + qh[i] * kj[i];
      p_s[h * kMaxTile + j] = dot * a.scale;
    }
    __syncthreads();
    if (tid < nh) softmax_step(p_s + tid * kMaxTile, n, m_s[tid], l_s[tid], alpha_s[tid]);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {   // step 4
      const int x = tid + k * kThreads, h = x / dv, c = x % dv;
      if (x >= pairs) continue;
      float u = 0.0f;   // the tile's fresh partial
      for (int j = 0; j < n; ++j) u = u + p_s[h * kMaxTile + j] * v_s[j * dv + c];
      acc[k] = acc[k] * alpha_s[h] + u;
    }
    __syncthreads();
  }
  const bool empty = j1 <= j0;
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int x = tid + k * kThreads, h = x / dv, c = x % dv;
    if (x < pairs) a.o_part[((b * a.n_h + h0 + h) * a.split + s) * a.dv + c] = empty ? 0.0f : acc[k] / l_s[h];
  }
  if (tid < nh) a.lse_part[(b * a.n_h + h0 + tid) * a.split + s] = empty ? -INFINITY : m_s[tid] + logf(l_s[tid]);
}

template <class T>
void launch_both(const SplitArgs& A, const MergeArgs& M, int64_t B, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(B * A.split), static_cast<unsigned>(A.n_kv * ((A.group + A.heads - 1) / A.heads)));
  DG_LAUNCH(split_kernel<T>, grid, kThreads, s, A);
  DG_LAUNCHED("split_kernel");
  DG_LAUNCH(merge_kernel, static_cast<unsigned>(B * A.n_h), kMergeThreads, s, M);
  DG_LAUNCHED("merge_kernel");
}

}  // namespace

void attention_decode_cuda_splitkv_f32(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "attention_decode";
  require_device();
  const AttentionDecodeParams p = attention_decode_params(c);
  const int64_t split = c.integer("split"), group = p.n_h / p.n_kv, rows = p.B * p.n_h;
  if (split < 1 || split > kMaxSplits) throw std::invalid_argument("attention_decode: split outside [1, 1024]");
  SplitArgs A{};
  A.n_h = p.n_h, A.n_kv = p.n_kv, A.d = p.d, A.dv = p.dv, A.page = p.page, A.max_pages = p.max_pages;
  A.split = split, A.group = group, A.scale = p.scale, A.k_scale = p.k_scale, A.v_scale = p.v_scale;
  A.heads = std::min<int64_t>({group, kMaxHeads, kQFloats / std::max(p.d, p.dv)});
  A.tile = std::min<int64_t>(kMaxTile, kKvFloats / (p.d + 1 + p.dv));
  if (A.heads < 1 || A.tile < 1) throw std::invalid_argument("attention_decode: d or dv above the kernel's 1024");
  if (p.n_kv * ((group + A.heads - 1) / A.heads) > 65535 || p.B * split > (int64_t{1} << 31) - 1)
    throw NotSupported("attention_decode: the grid of this case exceeds CUDA's limits");
  A.q = static_cast<const float*>(device_input(need(in, "q", op, rows * p.d), DType::f32, "q"));
  const Tensor& kt = need(in, "k_cache", op, p.n_pages * p.page * p.n_kv * p.d);
  const Tensor& vt = need(in, "v_cache", op, p.n_pages * p.page * p.n_kv * p.dv);
  const DType kv = device_dtype(kt.dtype(), "attention_decode: KV pages");
  if (device_dtype(vt.dtype(), "attention_decode: KV pages") != kv)
    throw std::invalid_argument("attention_decode: k_cache and v_cache differ in dtype");
  A.table = static_cast<const int*>(device_input(need(in, "page_table", op, p.B * p.max_pages), DType::i32, "page_table"));
  A.lens = static_cast<const int*>(device_input(need(in, "seqlens", op, p.B), DType::i32, "seqlens"));
  A.o_part = static_cast<float*>(scratch().get("o_part", static_cast<size_t>(rows * split * p.dv) * 4));
  A.lse_part = static_cast<float*>(scratch().get("lse_part", static_cast<size_t>(rows * split) * 4));
  Tensor& o = need(out, "o", op, rows * p.dv);
  Tensor& lse = need(out, "lse", op, rows);
  MergeArgs M{A.o_part, A.lse_part, static_cast<float*>(scratch().get("o", static_cast<size_t>(rows * p.dv) * 4)),
              static_cast<float*>(scratch().get("lse", static_cast<size_t>(rows) * 4)), split, p.dv};
  A.k = device_input(kt, kv, "k_cache");
  A.v = device_input(vt, kv, "v_cache");
  run_launch([&](cudaStream_t s) {
    if (kv == DType::bf16) launch_both<__nv_bfloat16>(A, M, p.B, s);
    else if (kv == DType::f16) launch_both<__half>(A, M, p.B, s);
    else if (kv == DType::e4m3) launch_both<uint8_t>(A, M, p.B, s);
    else launch_both<float>(A, M, p.B, s);
  });
  store_output(M.o, DType::f32, o);
  store_output(M.lse, DType::f32, lse);
}

}  // namespace dg
