// CUDA candidate of mla_decode (mla_decode.h): absorbed MLA decode, dense and sparse, split-KV in
// plain f32 arithmetic, the GPU twin of mla_decode_cpu_packed_f32 (candidates/cpu/mla_decode.cpp),
// launched as one timed call of up to three kernels.
//
// Kernel 0, keys_kernel (sparse only, topk > 0): one thread per sequence b compacts its index row
// into the key list: the entries x of indices[b] with 0 <= x < L in order (-1 and positions past
// the length dropped, a duplicate kept each time), and their count n_b (mla_decode_keys). Dense
// sequences' keys are their tokens 0 .. L-1 (n_b = L) and need no list.
//
// Kernel 1, split_kernel: one block of 128 threads per (sequence b, split s, group of up to 8 q
// heads; 4 at d_c = 1024). Split s covers the keys [s span, (s+1) span) of the key list, cut at
// n_b, span = attention_decode_pages_per_split(ceil(n_b / page), split) * page (the CPU packed
// candidate's rule: dense, pages; sparse, runs of `page` entries of the compacted index list).
// The block holds its heads' joined queries [q~ | q_pe] in shared memory (f32) and walks its keys
// in blocks of 64 (the CPU packed candidate's blocks, so the max and the rescale fall in the same
// places). Per block of keys:
//   1. each key's pool slot through the page table (page_table[b][x / page] page + x % page);
//   2. S = Q K^T: the block's latent rows read into a shared tile as stored (bf16, f16, f32 or
//      e4m3 bytes; 20 KiB, so 4 to 64 rows at a time), one thread per (head, key): s =
//      fl32(q . (kv_scale k)) * scale, the dot over d_c + rope summed in f32 in increasing channel
//      order (no contraction: --fmad=false);
//   3. one thread per head: the block max mb, m_new = max(m, mb), alpha = exp(m - m_new) (0 on the
//      first block, m = -inf), P = exp(S - m_new), l = l alpha + (the block's P summed in
//      increasing key order);
//   4. one thread per (head, channel): acc = acc alpha, then acc + p_t (kv_scale c_kv,t) in
//      increasing t, the latent rows re-read as the values (their first d_c channels: MLA's V is
//      the key's prefix; a block of keys that fits one tile is read once).
// At the end o_p = acc / l and lse_p = m + ln l (f32, natural log); a split with no keys writes
// o_p = 0 and lse_p = -inf (the -inf guard: its m - m would be NaN).
//
// Kernel 2, merge_kernel: one block per (b, h): attention_decode_cuda_splitkv_f32's merge, the
// CPU candidates' attention_cpu::merge: M = max_p lse_p; M = -inf gives o = 0 and lse = -inf;
// otherwise w_p = exp(lse_p - M), o = (sum_p w_p o_p) / sum_p w_p, lse = M + ln sum_p w_p, sums
// in increasing p.
//
// Numerics: every operation and its order are mla_decode_cpu_packed_f32's; they differ only in
// expf/logf (CUDA's within 2 ulp; the host's under the emulator, where the bits are the CPU's).
// Shared memory is static, under 48 KiB (18 KiB queries, 20 KiB tile, 2.5 KiB scores and state).
//
// Compiled by nvcc into dg_cuda, and against the CUDA emulator (emu/mla_decode_emu.cpp) for the
// tests.
#include "candidates/cuda/mla_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "candidates/cuda/cuda_rt.h"
#include "candidates/cuda/decode_common.cuh"
#include "harness/ops/attention_decode.h"
#include "harness/ops/mla_decode.h"

namespace dg {
namespace {
using namespace cu;
using namespace decode_cu;

constexpr int kThreads = 128;
constexpr int kMaxHeads = 8;                      // q heads per block
constexpr int kBlock = 64;                        // keys per softmax block (the CPU packed candidate's)
constexpr int kQFloats = 4608;                    // the block's queries: heads * (d_c + rope) <= 4608
constexpr int kAccFloats = 4096;                  // the block's accumulators: heads * d_c <= 4096
constexpr int kTileFloats = 5120;                 // the latent tile: 20 KiB of stored rows
constexpr int kPairs = kAccFloats / kThreads;     // (head, channel) accumulators per thread

struct KeysArgs {
  const int *indices, *lens;   // [B, topk], [B]
  int *keys, *n_keys;          // [B, topk] (the first n_b of row b used), [B]
  int64_t topk;
};

struct SplitArgs {
  const float *q, *q_pe;              // [B, n_h, d_c], [B, n_h, rope]
  const void* latent;                 // [n_pages, page, d_c + rope], elements of the kernel's T
  const int *table, *lens;            // [B, max_pages], [B]
  const int *keys, *n_keys;           // sparse: keys_kernel's lists; dense: null
  float *o_part, *lse_part;           // [B, n_h, split, d_c], [B, n_h, split]
  int64_t n_h, d_c, rope, page, max_pages, split, heads, topk;
  int64_t stride, rows;               // the tile's row stride (elements) and rows
  float scale, kv_scale;
};

__global__ void keys_kernel(KeysArgs a) {
  const int64_t b = blockIdx.x, L = a.lens[b];
  const int* idx = a.indices + b * a.topk;
  int* keys = a.keys + b * a.topk;
  int n = 0;
  for (int64_t t = 0; t < a.topk; ++t)
    if (idx[t] >= 0 && idx[t] < L) keys[n++] = idx[t];
  a.n_keys[b] = n;
}

// The block's shared state; `tile` holds stored latent rows (T elements, a.stride apart).
struct Shared {
  float *q, *p, *m, *l, *alpha, *tile;
  int64_t* slot;
};

// Step 1: the pool slots of keys [t0, t0 + nb) of sequence b.
__device__ void load_slots(const SplitArgs& a, int64_t b, int64_t t0, int nb, int64_t* slot) {
  for (int j = threadIdx.x; j < nb; j += blockDim.x) {
    const int64_t x = a.keys ? int64_t{a.keys[b * a.topk + t0 + j]} : t0 + j;
    slot[j] = int64_t{a.table[b * a.max_pages + x / a.page]} * a.page + x % a.page;
  }
}

// Latent rows slot[0, n) into the tile as stored: `width` leading channels of each.
template <class T>
__device__ void load_rows(const SplitArgs& a, const int64_t* slot, int n, int width, T* tile) {
  const T* latent = static_cast<const T*>(a.latent);
  const int64_t D = a.d_c + a.rope;
  for (int x = threadIdx.x; x < n * width; x += blockDim.x) {
    const int j = x / width, i = x % width;
    tile[j * a.stride + i] = latent[slot[j] * D + i];
  }
}

// Step 2: the scores of the block's nb keys for nh heads into sh.p [head][key] (scaled).
template <class T>
__device__ void scores(const SplitArgs& a, const Shared& sh, int nh, int nb) {
  T* tile = reinterpret_cast<T*>(sh.tile);
  const int D = static_cast<int>(a.d_c + a.rope);
  for (int u0 = 0; u0 < nb; u0 += static_cast<int>(a.rows)) {
    const int nu = static_cast<int>(lmin(a.rows, nb - u0));
    load_rows<T>(a, sh.slot + u0, nu, D, tile);
    __syncthreads();
    for (int x = threadIdx.x; x < nh * nu; x += blockDim.x) {
      const int h = x / nu, j = x % nu;
      const float* qh = sh.q + h * D;
      const T* kj = tile + j * a.stride;
      float dot = 0.0f;
      for (int i = 0; i < D; ++i) dot = dot + qh[i] * (kv_value(kj, i) * a.kv_scale);
      sh.p[h * kBlock + u0 + j] = dot * a.scale;
    }
    __syncthreads();
  }
}

// Step 3 for one head: its nb scores p become exp(s - m_new); m, l and the rescale alpha updated.
__device__ void softmax_step(float* p, int nb, float& m, float& l, float& alpha) {
  float mb = -INFINITY;
  for (int t = 0; t < nb; ++t) mb = fmaxf(mb, p[t]);
  const float m_new = fmaxf(m, mb);
  alpha = expf(m - m_new);
  float sum = 0.0f;
  for (int t = 0; t < nb; ++t) {
    p[t] = expf(p[t] - m_new);
    sum = sum + p[t];
  }
  l = l * alpha + sum;
  m = m_new;
}

// Step 4: acc = acc alpha + sum_t p_t v_t over the block's nb keys, by tiles of rows; the tile
// scores() left holds the block's last rows, reused when the block is one tile.
template <class T>
__device__ void accumulate(const SplitArgs& a, const Shared& sh, int nh, int nb, float (&acc)[kPairs]) {
  T* tile = reinterpret_cast<T*>(sh.tile);
  const int dc = static_cast<int>(a.d_c), pairs = nh * dc;
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int x = threadIdx.x + k * kThreads;
    if (x < pairs) acc[k] = acc[k] * sh.alpha[x / dc];
  }
  for (int u0 = 0; u0 < nb; u0 += static_cast<int>(a.rows)) {
    const int nu = static_cast<int>(lmin(a.rows, nb - u0));
    if (nb > a.rows) {
      if (u0 > 0) __syncthreads();   // every thread done with the previous tile (scores() synced before u0 = 0)
      load_rows<T>(a, sh.slot + u0, nu, dc, tile);
      __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const int x = threadIdx.x + k * kThreads, h = x / dc, c = x % dc;
      if (x >= pairs) continue;
      float u = acc[k];
      for (int j = 0; j < nu; ++j) u = u + sh.p[h * kBlock + u0 + j] * (kv_value(tile + j * a.stride, c) * a.kv_scale);
      acc[k] = u;
    }
  }
  // No barrier here: the next block's first barrier (after its slots) comes before its tile and P
  // are written, and no thread reads the slots once the last tile is loaded.
}

// The block's heads' joined queries [q~ | q_pe] into q_s, their m = -inf and l = 0.
__device__ void load_queries(const SplitArgs& a, int64_t b, int64_t h0, int nh, const Shared& sh) {
  const int64_t D = a.d_c + a.rope;
  for (int64_t x = threadIdx.x; x < nh * D; x += blockDim.x) {
    const int64_t r = b * a.n_h + h0 + x / D, i = x % D;
    sh.q[x] = i < a.d_c ? a.q[r * a.d_c + i] : a.q_pe[r * a.rope + i - a.d_c];
  }
  if (static_cast<int>(threadIdx.x) < nh) sh.m[threadIdx.x] = -INFINITY, sh.l[threadIdx.x] = 0.0f;
}

template <class T>
__global__ void __launch_bounds__(kThreads) split_kernel(SplitArgs a) {
  __shared__ float q_s[kQFloats], p_s[kMaxHeads * kBlock], tile_s[kTileFloats];
  __shared__ float m_s[kMaxHeads], l_s[kMaxHeads], alpha_s[kMaxHeads];
  __shared__ int64_t slot_s[kBlock];
  const Shared sh{q_s, p_s, m_s, l_s, alpha_s, tile_s, slot_s};
  const int64_t b = blockIdx.x / a.split, s = blockIdx.x % a.split, h0 = blockIdx.y * a.heads;
  const int nh = static_cast<int>(lmin(a.heads, a.n_h - h0)), dc = static_cast<int>(a.d_c), tid = threadIdx.x;
  const int64_t n = a.keys ? int64_t{a.n_keys[b]} : int64_t{a.lens[b]}, pages = (n + a.page - 1) / a.page;
  const int64_t span = (pages == 0 ? 1 : (pages + a.split - 1) / a.split) * a.page;
  const int64_t j0 = lmin(n, s * span), j1 = lmin(n, (s + 1) * span);
  load_queries(a, b, h0, nh, sh);
  float acc[kPairs];
#pragma unroll
  for (int k = 0; k < kPairs; ++k) acc[k] = 0.0f;
  __syncthreads();
  for (int64_t t0 = j0; t0 < j1; t0 += kBlock) {
    const int nb = static_cast<int>(lmin(kBlock, j1 - t0));
    load_slots(a, b, t0, nb, slot_s);
    __syncthreads();
    scores<T>(a, sh, nh, nb);
    if (tid < nh) softmax_step(p_s + tid * kBlock, nb, m_s[tid], l_s[tid], alpha_s[tid]);
    __syncthreads();
    accumulate<T>(a, sh, nh, nb, acc);
  }
  const bool empty = j1 <= j0;
#pragma unroll
  for (int k = 0; k < kPairs; ++k) {
    const int x = tid + k * kThreads, h = x / dc, c = x % dc;
    if (x < nh * dc) a.o_part[((b * a.n_h + h0 + h) * a.split + s) * a.d_c + c] = empty ? 0.0f : acc[k] / l_s[h];
  }
  if (tid < nh) a.lse_part[(b * a.n_h + h0 + tid) * a.split + s] = empty ? -INFINITY : m_s[tid] + logf(l_s[tid]);
}

template <class T>
void launch_all(SplitArgs A, const KeysArgs& K, const MergeArgs& M, int64_t B, cudaStream_t s) {
  A.stride = A.d_c + A.rope + static_cast<int64_t>(4 / sizeof(T));   // a word of padding: rows in other banks
  A.rows = std::min<int64_t>(kBlock, static_cast<int64_t>(kTileFloats * sizeof(float) / sizeof(T)) / A.stride);
  if (A.topk > 0) {
    DG_LAUNCH(keys_kernel, static_cast<unsigned>(B), 1, s, K);
    DG_LAUNCHED("keys_kernel");
  }
  const dim3 grid(static_cast<unsigned>(B * A.split), static_cast<unsigned>((A.n_h + A.heads - 1) / A.heads));
  DG_LAUNCH(split_kernel<T>, grid, kThreads, s, A);
  DG_LAUNCHED("split_kernel");
  DG_LAUNCH(merge_kernel, static_cast<unsigned>(B * A.n_h), kMergeThreads, s, M);
  DG_LAUNCHED("merge_kernel");
}

// The inputs of the case on the device (q and q_pe as f32, the latent as device_dtype).
DType upload(const MlaDecodeParams& p, const TensorMap& in, SplitArgs& A, KeysArgs& K) {
  const char* op = "mla_decode";
  const int64_t rows = p.B * p.n_h;
  A.q = static_cast<const float*>(device_input(need(in, "q", op, rows * p.d_c), DType::f32, "q"));
  A.q_pe = p.rope > 0 ? static_cast<const float*>(device_input(need(in, "q_pe", op, rows * p.rope), DType::f32, "q_pe")) : nullptr;
  const Tensor& lt = need(in, "latent", op, p.n_pages * p.page * p.width());
  const DType kv = device_dtype(lt.dtype(), "mla_decode: latent pages");
  A.table = static_cast<const int*>(device_input(need(in, "page_table", op, p.B * p.max_pages), DType::i32, "page_table"));
  A.lens = static_cast<const int*>(device_input(need(in, "seqlens", op, p.B), DType::i32, "seqlens"));
  if (p.topk > 0) {
    K.indices = static_cast<const int*>(device_input(need(in, "indices", op, p.B * p.topk), DType::i32, "indices"));
    K.lens = A.lens, K.topk = p.topk;
    K.keys = static_cast<int*>(scratch().get("keys", static_cast<size_t>(p.B * p.topk) * 4));
    K.n_keys = static_cast<int*>(scratch().get("n_keys", static_cast<size_t>(p.B) * 4));
    A.keys = K.keys, A.n_keys = K.n_keys;
  }
  A.latent = device_input(lt, kv, "latent");
  return kv;
}

}  // namespace

void mla_decode_cuda_packed_f32(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "mla_decode";
  require_device();
  const MlaDecodeParams p = mla_decode_params(c);
  const int64_t split = c.integer("split"), rows = p.B * p.n_h;
  if (split < 1 || split > kMaxSplits) throw std::invalid_argument("mla_decode: split outside [1, 1024]");
  SplitArgs A{};
  KeysArgs K{};
  A.n_h = p.n_h, A.d_c = p.d_c, A.rope = p.rope, A.page = p.page, A.max_pages = p.max_pages, A.split = split, A.topk = p.topk;
  A.scale = p.scale, A.kv_scale = p.kv_scale;
  A.heads = std::min<int64_t>({p.n_h, kMaxHeads, kAccFloats / p.d_c, kQFloats / p.width()});
  if (A.heads < 1 || p.d_c < 1 || p.rope < 0)
    throw std::invalid_argument("mla_decode: d_c = " + std::to_string(p.d_c) + ", rope = " + std::to_string(p.rope) +
                                " outside the kernel's d_c <= 1024, d_c + rope <= 4608");
  if (p.B * split > (int64_t{1} << 31) - 1) throw NotSupported("mla_decode: the grid of this case exceeds CUDA's limits");
  const DType kv = upload(p, in, A, K);
  Tensor& o = need(out, "o", op, rows * p.d_c);
  Tensor& lse = need(out, "lse", op, rows);
  A.o_part = static_cast<float*>(scratch().get("o_part", static_cast<size_t>(rows * split * p.d_c) * 4));
  A.lse_part = static_cast<float*>(scratch().get("lse_part", static_cast<size_t>(rows * split) * 4));
  MergeArgs M{A.o_part, A.lse_part, static_cast<float*>(scratch().get("o", static_cast<size_t>(rows * p.d_c) * 4)),
              static_cast<float*>(scratch().get("lse", static_cast<size_t>(rows) * 4)), split, p.d_c};
  run_launch([&](cudaStream_t s) {
    if (kv == DType::bf16) launch_all<__nv_bfloat16>(A, K, M, p.B, s);
    else if (kv == DType::f16) launch_all<__half>(A, K, M, p.B, s);
    else if (kv == DType::e4m3) launch_all<uint8_t>(A, K, M, p.B, s);
    else launch_all<float>(A, K, M, p.B, s);
  });
  store_output(M.o, DType::f32, o);
  store_output(M.lse, DType::f32, lse);
}

}  // namespace dg
