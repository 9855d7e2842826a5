// CUDA KDA candidates (kda_cuda.h): three kernels, and the device memory registration. Device
// memory, inputs, outputs and the timed launch are cuda_rt.h's, shared by every CUDA candidate.
//
// Numerics: compiled with --fmad=false and -ffp-contract=off like the CPU code, so every fused
// multiply-add below is an explicit fmaf; expf/log1pf are the accurate CUDA versions (no fast math).
//
// Emulation: with DG_CUDA_EMULATE this file compiles as host C++ against candidates/cuda/emu/
// cuda_emu.h (kernels as fibers, device memory on the host), so tests run its kernels and host code
// on machines without a GPU; DG_LAUNCH (cuda_rt.h) is the one spelling of a launch for both.
#include "candidates/cuda/kda_cuda.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "candidates/cpu/kda_cpu.h"
#include "candidates/cuda/cuda_rt.h"
#include "candidates/cuda/device.h"
#include "harness/ops/kda.h"
#include "harness/cases/registry.h"
#include "reference/kda_params.h"

namespace dg {
namespace {
using namespace cu;
using cu::round_bf16;   // the device one (dtype.h has a host one of the same name in dg)

// --- inputs --------------------------------------------------------------------------------------
// A_log [HV] and dt_bias [HV*K] of the in-op gate modes (null when the case's gate does not read
// them; dt_bias is optional).
void gate_inputs(const KdaParams& p, const TensorMap& in, const char* op, const float*& A_log, const float*& dt_bias) {
  A_log = dt_bias = nullptr;
  if (p.gate == KdaGate::pregated) return;
  if (p.use_A_log) A_log = f32_input(in, "A_log", op, p.HV);
  if (in.count("dt_bias")) dt_bias = f32_input(in, "dt_bias", op, p.HV * p.K);
}

// --- shared device code ----------------------------------------------------------------------------
constexpr int kMaxKPerLane = 8;   // K <= 256

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
// The decay exp(g) of a decode step, rounded to f32 from CUDA's double exp (within 1 ulp of double):
// within half an f32 ulp, as the host's expf the CPU decode kernels use. CUDA's own expf (ex2.approx on a
// reduced argument, within 2 ulp) errs to one side for the small |g| of long memory (g ~ -5e-5,
// decay 1 - 5e-5); the state carries that error from step to step, and on an H200 the decode
// kernels' ht lost 2 bits against the CPU over 64 long_memory steps (19.7 against 21.7 bits). One
// double exp per channel per step costs nothing next to the state's read and write.
__device__ __forceinline__ float decay_of(float g) { return static_cast<float>(exp(static_cast<double>(g))); }

struct GateArgs {
  int gate;        // KdaGate
  int beta_mode;   // KdaBeta
  int use_A_log, l2norm;
  float scale, lb;
};
GateArgs gate_args(const KdaParams& p) {
  return {static_cast<int>(p.gate), static_cast<int>(p.beta), p.use_A_log ? 1 : 0, p.qk_l2norm ? 1 : 0,
          static_cast<float>(p.scale_value()), static_cast<float>(p.lower_bound)};
}

// The log-space gate of channel d from the stored f (or g), as kda_cpu::TokenReader computes it.
__device__ __forceinline__ float gate_value(const GateArgs& a, float f, float a_exp, const float* dt_bias, int d) {
  if (a.gate == static_cast<int>(KdaGate::pregated)) return f;
  const float x = f + (dt_bias ? dt_bias[d] : 0.0f);
  if (a.gate == static_cast<int>(KdaGate::softplus)) return -a_exp * softplusf_(x);
  return a.lb * sigmoidf_(a.use_A_log ? a_exp * x : x);
}
__device__ __forceinline__ float beta_value(const GateArgs& a, float b) {
  if (a.beta_mode == static_cast<int>(KdaBeta::sigmoid)) return sigmoidf_(b);
  if (a.beta_mode == static_cast<int>(KdaBeta::sigmoid2)) return 2.0f * sigmoidf_(b);
  return b;
}

// q, k (K floats in shared memory, raw) -> l2-normalised, q times scale; block-wide.
__device__ void prepare_qk(float* q, float* k, int K, const GateArgs& a, float* red) {
  if (a.l2norm) {
    float sq = 0, sk = 0;
    for (int d = threadIdx.x; d < K; d += blockDim.x) {
      sq = fmaf(q[d], q[d], sq);
      sk = fmaf(k[d], k[d], sk);
    }
    const float rq = 1.0f / sqrtf(block_sum(sq, red) + static_cast<float>(KdaParams::kL2NormEps));
    const float rk = 1.0f / sqrtf(block_sum(sk, red + 32) + static_cast<float>(KdaParams::kL2NormEps));
    __syncthreads();
    for (int d = threadIdx.x; d < K; d += blockDim.x) {
      q[d] *= rq;
      k[d] *= rk;
    }
  }
  for (int d = threadIdx.x; d < K; d += blockDim.x) q[d] *= a.scale;
  __syncthreads();
}

// V-first state ([V,K] per head: a column contiguous). NC state columns of one head, held by a
// warp: lane holds d = lane + 32 i of each, so each access of the warp is 128 contiguous bytes.
// col[c]: column c's first element, or null to skip it (warp-uniform). The state is read and
// written once per step, so it bypasses the caches' keep policy (__ldcs/__stcs: streaming).
template <int KPL, int NC>
__device__ __forceinline__ void load_columns(float (&s)[NC][KPL], float* const (&col)[NC], int K) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int c = 0; c < NC; ++c)
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int d = lane + kWarp * i;
      s[c][i] = col[c] && d < K ? __ldcs(col[c] + d) : 0.0f;
    }
}

// The step of the columns load_columns() read, per column:
//   s *= exp(g); r = (v - s.k) beta; s += k r; o = s.q; the column stored back.
template <int KPL, int NC>
__device__ __forceinline__ void step_columns(float (&s)[NC][KPL], float* const (&col)[NC], int K,
                                             const float* q, const float* k, const float* decay, const float (&v)[NC],
                                             float beta, float (&o)[NC]) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    o[c] = 0.0f;
    if (!col[c]) continue;
    float dot = 0;
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int d = lane + kWarp * i;
      if (d < K) {
        s[c][i] *= decay[d];
        dot = fmaf(k[d], s[c][i], dot);
      }
    }
    const float r = (v[c] - warp_sum(dot)) * beta;
    float oc = 0;
#pragma unroll
    for (int i = 0; i < KPL; ++i) {
      const int d = lane + kWarp * i;
      if (d < K) {
        s[c][i] = fmaf(k[d], r, s[c][i]);
        oc = fmaf(q[d], s[c][i], oc);
        __stcs(col[c] + d, s[c][i]);
      }
    }
    o[c] = warp_sum(oc);
  }
}

// K-first state ([K,V] per head: a column is strided, a row contiguous), a tile of 32 columns at a
// time: lane l holds column j0 + l (col: its first element, null past V), warp w of NW the rows
// d = w + NW i, so every load and store of a warp is one contiguous row segment.
template <int R, int NW>
__device__ __forceinline__ void load_tile(float (&s)[R], const float* col, int K, int V) {
  const int w = threadIdx.x / kWarp;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int d = w + NW * i;
    s[i] = col && d < K ? __ldcs(col + int64_t(d) * V) : 0.0f;
  }
}

// The step of the tile load_tile() read; returns o of the lane's column to every warp. Each thread
// forms its partial k.s and q.s over its rows; the warps' partials are added in warp order through
// `part` (shared, [2][NW][32]). Every thread of the block calls it (it holds two barriers).
template <int R, int NW>
__device__ __forceinline__ float step_tile(float (&s)[R], float* col, int K, int V, const float* q, const float* k,
                                           const float* decay, float v, float beta, float (*part)[NW][kWarp]) {
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float dot = 0;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int d = w + NW * i;
    if (d < K) {
      s[i] *= decay[d];
      dot = fmaf(k[d], s[i], dot);
    }
  }
  part[0][w][lane] = dot;
  __syncthreads();
  float ks = 0;
  for (int x = 0; x < NW; ++x) ks += part[0][x][lane];
  const float r = (v - ks) * beta;
  float oc = 0;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int d = w + NW * i;
    if (d < K) {
      s[i] = fmaf(k[d], r, s[i]);
      oc = fmaf(q[d], s[i], oc);
      if (col) __stcs(col + int64_t(d) * V, s[i]);
    }
  }
  part[1][w][lane] = oc;
  __syncthreads();
  float o = 0;
  for (int x = 0; x < NW; ++x) o += part[1][x][lane];
  return o;
}

// --- kda_decode ------------------------------------------------------------------------------------
struct DecodeArgs {
  const __nv_bfloat16 *q, *k, *v, *g, *beta;   // [B,H,K] [B,H,K] [B,HV,V] [B,HV,K] [B,HV]
  const float *A_log, *dt_bias;                // [HV], [HV*K]; null when unused
  const int64_t* slots;                        // [B]; < 0: padding
  float* state;                                // [N,HV,V,K] V-first (kda_decode_kernel), or [N,HV,K,V]
  float* o;                                    // [B,HV,V]
  int B, H, HV, K, V;
  GateArgs a;
};

constexpr int kDecodeWarps = 4, kDecodeColsPerWarp = 4, kDecodeCols = kDecodeWarps * kDecodeColsPerWarp;
constexpr int kDecodeColsKFirst = kWarp;

// The per-(sequence, value head) prologue of a decode block, into shared memory: q and k of the
// head (normalised, q scaled) and the decay exp(g) of every channel; returns beta.
__device__ float decode_prologue(const DecodeArgs& A, int b, int hv, float* q, float* k, float* decay, float* red) {
  const int h = hv / (A.HV / A.H), K = A.K;
  const float a_exp = A.A_log ? expf(A.A_log[hv]) : 1.0f;
  for (int d = threadIdx.x; d < K; d += blockDim.x) {
    q[d] = bf(A.q, (int64_t(b) * A.H + h) * K + d);
    k[d] = bf(A.k, (int64_t(b) * A.H + h) * K + d);
    decay[d] = decay_of(gate_value(A.a, bf(A.g, (int64_t(b) * A.HV + hv) * K + d), a_exp,
                                   A.dt_bias ? A.dt_bias + int64_t(hv) * K : nullptr, d));
  }
  __syncthreads();
  prepare_qk(q, k, K, A.a, red);
  return beta_value(A.a, bf(A.beta, int64_t(b) * A.HV + hv));
}

// V-first state. Block (b, hv) x a tile of kDecodeCols state columns; each warp takes
// kDecodeColsPerWarp columns. The step is bound by the state's read and write, so each warp issues
// its columns' loads first (NC * KPL loads in flight per lane) and forms q, k and the decay while
// they arrive.
template <int KPL>
__global__ void __launch_bounds__(kDecodeWarps* kWarp) kda_decode_kernel(DecodeArgs A) {
  constexpr int NC = kDecodeColsPerWarp;
  __shared__ float q[kMaxKPerLane * kWarp], k[kMaxKPerLane * kWarp], decay[kMaxKPerLane * kWarp], red[64];
  const int b = blockIdx.x / A.HV, hv = blockIdx.x % A.HV, K = A.K, V = A.V;
  const int j0 = blockIdx.y * kDecodeCols;
  const int64_t slot = A.slots[b];
  if (slot < 0) {
    for (int j = j0 + threadIdx.x; j < min(V, j0 + kDecodeCols); j += blockDim.x) A.o[(int64_t(b) * A.HV + hv) * V + j] = 0.0f;
    return;
  }
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float* S = A.state + (slot * A.HV + hv) * int64_t(K) * V;
  float* cols[NC];
  float v[NC], o[NC], st[NC][KPL];
  for (int c = 0; c < NC; ++c) {
    const int j = j0 + w * NC + c;
    cols[c] = j < V ? S + int64_t(j) * K : nullptr;
    v[c] = j < V ? bf(A.v, (int64_t(b) * A.HV + hv) * V + j) : 0.0f;
  }
  load_columns<KPL, NC>(st, cols, K);
  const float beta = decode_prologue(A, b, hv, q, k, decay, red);
  step_columns<KPL, NC>(st, cols, K, q, k, decay, v, beta, o);
  if (lane == 0)
    for (int c = 0; c < NC; ++c) {
      const int j = j0 + w * NC + c;
      if (j < V) A.o[(int64_t(b) * A.HV + hv) * V + j] = o[c];
    }
}

// K-first state. Block (b, hv) x a tile of 32 columns (load_tile, step_tile over 4 warps).
template <int KPL>
__global__ void __launch_bounds__(kDecodeWarps* kWarp) kda_decode_kfirst_kernel(DecodeArgs A) {
  constexpr int R = KPL * kWarp / kDecodeWarps;   // rows per thread: kDecodeWarps R >= K
  __shared__ float q[kMaxKPerLane * kWarp], k[kMaxKPerLane * kWarp], decay[kMaxKPerLane * kWarp], red[64];
  __shared__ float part[2][kDecodeWarps][kWarp];
  const int b = blockIdx.x / A.HV, hv = blockIdx.x % A.HV, K = A.K, V = A.V;
  const int j = blockIdx.y * kDecodeColsKFirst + threadIdx.x % kWarp;
  const int64_t slot = A.slots[b];
  const int64_t oi = (int64_t(b) * A.HV + hv) * V + j;
  const bool writer = threadIdx.x < kWarp && j < V;
  if (slot < 0) {
    if (writer) A.o[oi] = 0.0f;
    return;
  }
  float* col = j < V ? A.state + (slot * A.HV + hv) * int64_t(K) * V + j : nullptr;
  float st[R];
  load_tile<R, kDecodeWarps>(st, col, K, V);
  const float vj = j < V ? bf(A.v, oi) : 0.0f;
  const float beta = decode_prologue(A, b, hv, q, k, decay, red);
  const float o = step_tile<R, kDecodeWarps>(st, col, K, V, q, k, decay, vj, beta, part);
  if (writer) A.o[oi] = o;
}

template <class Kernel4, class Args>
void launch_by_k(int K, dim3 grid, dim3 block, cudaStream_t s, const Args& a, Kernel4 pick) {
  const int kpl = (K + kWarp - 1) / kWarp;
  auto kernel = pick(kpl <= 1 ? 1 : kpl <= 2 ? 2 : kpl <= 4 ? 4 : 8);
  DG_LAUNCH(kernel, grid, block, s, a);
}

void check_decode_shapes(const KdaParams& p, const char* op) {
  if (p.T != 1 || !p.cu_seqlens.empty())
    throw std::invalid_argument(std::string(op) + ": a step takes one token per sequence (T=1, no cu_seqlens)");
  if (p.K > kMaxKPerLane * kWarp) throw NotSupported(std::string(op) + ": K > 256");
}

// The state pool out["state"] of a decode step, whole [HV,K,V] slots, at least one, and its slot
// count. (kda_cpu's decode checks its pool the same way, inline.)
struct StatePool {
  Tensor& t;
  int64_t slots;
};
StatePool state_pool(TensorMap& out, const KdaParams& p, const char* op) {
  auto it = out.find("state");
  if (it == out.end()) throw std::invalid_argument(std::string(op) + ": tensor 'state' is missing");
  const int64_t per_slot = p.HV * p.K * p.V;
  if (it->second.numel() == 0 || it->second.numel() % per_slot != 0)
    throw std::invalid_argument(std::string(op) + ": state pool shape " + it->second.shape_str() + " is not [N,HV,K,V]");
  return {it->second, it->second.numel() / per_slot};
}

// The pool slot of each sequence, checked by the CPU decode's own rules (kda_cpu::state_slots);
// state_indices may live on the device.
std::vector<int64_t> host_slots(const TensorMap& in, int64_t B, int64_t pool_slots, const char* op) {
  const Tensor& t = need(in, "state_indices", op);
  if (t.device() == Device::host) return kda_cpu::state_slots(in, B, pool_slots);
  return kda_cpu::state_slots(TensorMap{{"state_indices", t.to(Device::host)}}, B, pool_slots);
}
const int64_t* device_slots(const std::vector<int64_t>& s) {
  void* d = scratch().get("slots", s.size() * sizeof(int64_t));
  device_copy(d, Device::cuda, s.data(), Device::host, s.size() * sizeof(int64_t));
  return static_cast<const int64_t*>(d);
}

// --- kda_decode_fused --------------------------------------------------------------------------------
struct FusedArgs {
  const __nv_bfloat16 *xq, *xk, *xv, *g, *beta, *ogate;   // [B,H,K] [B,H,K] [B,HV,V] [B,HV,K] [B,HV] [B,HV,V]
  const float *wq, *wk, *wv;                               // [H*K,W] [H*K,W] [HV*V,W]
  const float *A_log, *dt_bias, *nweight;                  // [HV] [HV*K] [V]
  float *cq, *ck, *cv;                                     // conv pools [N,H*K,W-1] [N,H*K,W-1] [N,HV*V,W-1]
  const int64_t* slots;
  float* state;
  float* o;
  int B, H, HV, K, V, W;   // the layout is kda_fused_kernel's VFIRST
  float eps;
  GateArgs a;
};

constexpr int kFusedWarps = 8, kFusedThreads = kFusedWarps * kWarp;

// Channel c of one sequence's conv: h = [pool row (W-1, oldest first), x]; returns silu(sum w h)
// (w order, fma, as causal_conv1d_cpu_direct_f32) and shifts the pool row by one.
__device__ __forceinline__ float conv_channel(float x, const float* w, float* pool_row, int W) {
  float h[8];
  for (int m = 0; m < W - 1; ++m) h[m] = pool_row[m];
  h[W - 1] = x;
  float z = 0;
  for (int m = 0; m < W; ++m) z = fmaf(w[m], h[m], z);
  for (int m = 0; m < W - 1; ++m) pool_row[m] = h[m + 1];
  return z / (1.0f + expf(-z));
}

// Block (b, h): the q/k head's conv and normalisation once, then each of its HV/H value heads: conv
// of v, the state step over every column, the gated norm of the head's output row.
template <int KPL, bool VFIRST>
__global__ void __launch_bounds__(kFusedThreads) kda_fused_kernel(FusedArgs A) {
  constexpr int NC = 4;
  __shared__ float q[kMaxKPerLane * kWarp], k[kMaxKPerLane * kWarp], decay[kMaxKPerLane * kWarp], v[256], o[256], red[64];
  __shared__ float part[2][kFusedWarps][kWarp];
  const int b = blockIdx.x / A.H, h = blockIdx.x % A.H, K = A.K, V = A.V, W = A.W, group = A.HV / A.H;
  const int64_t slot = A.slots[b];
  if (slot < 0) {
    for (int i = threadIdx.x; i < group * V; i += blockDim.x) A.o[(int64_t(b) * A.HV + h * group) * V + i] = 0.0f;
    return;
  }
  const int64_t Cq = int64_t(A.H) * K, Cv = int64_t(A.HV) * V;
  for (int d = threadIdx.x; d < K; d += blockDim.x) {
    const int64_t c = int64_t(h) * K + d;
    q[d] = conv_channel(bf(A.xq, int64_t(b) * Cq + c), A.wq + c * W, A.cq + (slot * Cq + c) * (W - 1), W);
    k[d] = conv_channel(bf(A.xk, int64_t(b) * Cq + c), A.wk + c * W, A.ck + (slot * Cq + c) * (W - 1), W);
  }
  __syncthreads();
  prepare_qk(q, k, K, A.a, red);
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int gi = 0; gi < group; ++gi) {
    const int hv = h * group + gi;
    const float a_exp = A.A_log ? expf(A.A_log[hv]) : 1.0f;
    for (int d = threadIdx.x; d < K; d += blockDim.x)
      decay[d] = decay_of(gate_value(A.a, bf(A.g, (int64_t(b) * A.HV + hv) * K + d), a_exp,
                                     A.dt_bias ? A.dt_bias + int64_t(hv) * K : nullptr, d));
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      const int64_t c = int64_t(hv) * V + j;
      v[j] = conv_channel(bf(A.xv, int64_t(b) * Cv + c), A.wv + c * W, A.cv + (slot * Cv + c) * (W - 1), W);
    }
    __syncthreads();
    const float beta = beta_value(A.a, bf(A.beta, int64_t(b) * A.HV + hv));
    float* S = A.state + (slot * A.HV + hv) * int64_t(K) * V;
    if (VFIRST) {
      for (int j0 = NC * w; j0 < V; j0 += NC * kFusedWarps) {   // NC columns per warp at a time
        float* cols[NC];
        float vj[NC], oj[NC], st[NC][KPL];
        for (int c = 0; c < NC; ++c) {
          const int j = j0 + c;
          cols[c] = j < V ? S + int64_t(j) * K : nullptr;
          vj[c] = j < V ? v[j] : 0.0f;
        }
        load_columns<KPL, NC>(st, cols, K);
        step_columns<KPL, NC>(st, cols, K, q, k, decay, vj, beta, oj);
        if (lane == 0)
          for (int c = 0; c < NC && j0 + c < V; ++c) o[j0 + c] = oj[c];
      }
    } else {
      for (int j0 = 0; j0 < V; j0 += kWarp) {   // a tile of 32 columns at a time, every thread
        constexpr int R = KPL * kWarp / kFusedWarps;
        const int j = j0 + lane;
        float* col = j < V ? S + j : nullptr;
        float st[R];
        load_tile<R, kFusedWarps>(st, col, K, V);
        const float oj = step_tile<R, kFusedWarps>(st, col, K, V, q, k, decay, j < V ? v[j] : 0.0f, beta, part);
        if (w == 0 && j < V) o[j] = oj;
      }
    }
    __syncthreads();
    // y = (o * rstd) * w * sigmoid(gate), rstd = 1 / sqrt(sum o^2 / V + eps)
    float ss = 0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) ss = fmaf(o[j], o[j], ss);
    const float rstd = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(V) + A.eps);
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      const int64_t i = (int64_t(b) * A.HV + hv) * V + j;
      A.o[i] = ((o[j] * rstd) * A.nweight[j]) * sigmoidf_(bf(A.ogate, i));
    }
    __syncthreads();
  }
}

// The instance of kda_fused_kernel for KPL = kpl (1, 2, 4, 8) and the layout: one path per instance,
// so neither layout's registers weigh on the other.
template <bool VFIRST>
auto fused_kernel(int kpl) {
  return kpl == 1   ? kda_fused_kernel<1, VFIRST>
         : kpl == 2 ? kda_fused_kernel<2, VFIRST>
         : kpl == 4 ? kda_fused_kernel<4, VFIRST>
                    : kda_fused_kernel<8, VFIRST>;
}

// --- kda (chunked prefill, bf16 storage) -------------------------------------------------------------
constexpr int kChunk = 64, kChunkThreads = 256;

struct ChunkArgs {
  const __nv_bfloat16 *q, *k, *v, *g, *beta;   // [B*T,H,K] [B*T,H,K] [B*T,HV,V] [B*T,HV,K] [B*T,HV]
  const float *A_log, *dt_bias, *h0;           // [HV] [HV*K] [N,HV,K,V] (or V-first)
  const int64_t* cu;                           // [N+1] token offsets (always given)
  float* o;                                    // [B*T,HV,V]
  float* ht;                                   // [N,HV,K,V] (or V-first)
  float* work;                                 // per block: chunk_work_floats(K, V)
  int H, HV, K, V, vfirst;
  GateArgs a;
};

__host__ __device__ inline int64_t chunk_work_floats(int64_t K, int64_t V) {
  return 8 * kChunk * K + 5 * kChunk * V + 3 * kChunk * kChunk + 2 * K * V + kChunk + K;
}

// One block per (sequence n, value head hv): chunks of 64 tokens in order, every intermediate in the
// block's slice of `work`; the steps and storage roundings of kda_cpu_chunk_bf16 (kda_chunk.cpp),
// with exp(G_i - G_j) formed per element (both arguments <= 0, as there).
__global__ void __launch_bounds__(kChunkThreads) kda_chunk_bf16_kernel(ChunkArgs A) {
  const int n = blockIdx.x / A.HV, hv = blockIdx.x % A.HV, h = hv / (A.HV / A.H), K = A.K, V = A.V;
  const int tid = threadIdx.x, nt = blockDim.x;
  float* base = A.work + int64_t(blockIdx.x) * chunk_work_floats(K, V);
  float *Q = base, *Kn = Q + kChunk * K, *G = Kn + kChunk * K, *Rs = G + kChunk * K, *Qg = Rs + kChunk * K;
  float *Yk = Qg + kChunk * K, *Kg = Yk + kChunk * K, *Wm = Kg + kChunk * K;
  float *Vb = Wm + kChunk * K, *Yv = Vb + kChunk * V, *U = Yv + kChunk * V, *Vn = U + kChunk * V, *Ob = Vn + kChunk * V;
  float *L = Ob + kChunk * V, *Ai = L + kChunk * kChunk, *Aqk = Ai + kChunk * kChunk;
  float *S = Aqk + kChunk * kChunk, *Sb = S + int64_t(K) * V, *beta = Sb + int64_t(K) * V, *eg = beta + kChunk;
  auto sidx = [&](int d, int j) { return A.vfirst ? int64_t(j) * K + d : int64_t(d) * V + j; };
  const int64_t per_head = int64_t(K) * V, st0 = (int64_t(n) * A.HV + hv) * per_head;
  for (int64_t x = tid; x < per_head; x += nt) {
    const int d = static_cast<int>(x / V), j = static_cast<int>(x % V);
    S[x] = A.h0 ? A.h0[st0 + sidx(d, j)] : 0.0f;
  }
  const float a_exp = A.A_log ? expf(A.A_log[hv]) : 1.0f;
  const float* dtb = A.dt_bias ? A.dt_bias + int64_t(hv) * K : nullptr;
  const int64_t end = A.cu[n + 1];
  for (int64_t t0 = A.cu[n]; t0 < end; t0 += kChunk) {
    const int c = end - t0 < kChunk ? static_cast<int>(end - t0) : kChunk;
    __syncthreads();
    // Rows in (bf16 as stored), then l2norm of q and k per row, rounded to bf16 again.
    for (int x = tid; x < c * K; x += nt) {
      const int i = x / K, d = x % K;
      const int64_t tok = t0 + i;
      Q[i * K + d] = bf(A.q, (tok * A.H + h) * K + d);
      Kn[i * K + d] = bf(A.k, (tok * A.H + h) * K + d);
      G[i * K + d] = bf(A.g, (tok * A.HV + hv) * K + d);
    }
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      Vb[i * V + j] = bf(A.v, ((t0 + i) * A.HV + hv) * V + j);
    }
    for (int i = tid; i < c; i += nt) beta[i] = beta_value(A.a, bf(A.beta, (t0 + i) * A.HV + hv));
    __syncthreads();
    if (A.a.l2norm)
      for (int r = tid; r < 2 * c; r += nt) {   // one thread per row of q or k
        float* row = r < c ? Q + r * K : Kn + (r - c) * K;
        float s = 0;
        for (int d = 0; d < K; ++d) s = fmaf(row[d], row[d], s);
        const float rs = 1.0f / sqrtf(s + static_cast<float>(KdaParams::kL2NormEps));
        for (int d = 0; d < K; ++d) row[d] = round_bf16(row[d] * rs);
      }
    // Gates (in f32 from the bf16 inputs).
    for (int x = tid; x < c * K; x += nt) G[x] = gate_value(A.a, G[x], a_exp, dtb, x % K);
    __syncthreads();
    // Per channel: suffix sums gamma - G_i by their own reverse scan, then the inclusive cumsum.
    for (int d = tid; d < K; d += nt) {
      Rs[(c - 1) * K + d] = 0.0f;
      for (int i = c - 2; i >= 0; --i) Rs[i * K + d] = Rs[(i + 1) * K + d] + G[(i + 1) * K + d];
      for (int i = 1; i < c; ++i) G[i * K + d] = G[i * K + d] + G[(i - 1) * K + d];
      eg[d] = expf(G[(c - 1) * K + d]);
    }
    __syncthreads();
    // Gated copies, stored bf16: q exp(G), (k beta) exp(G), k exp(gamma - G); v beta.
    for (int x = tid; x < c * K; x += nt) {
      const int i = x / K;
      const float e = expf(G[x]);
      Qg[x] = round_bf16(Q[x] * e);
      Yk[x] = round_bf16((Kn[x] * beta[i]) * e);
      Kg[x] = round_bf16(Kn[x] * expf(Rs[x]));
    }
    for (int x = tid; x < c * V; x += nt) Yv[x] = round_bf16(Vb[x] * beta[x / V]);
    // L = beta_i (k_i . k_j exp(G_i - G_j)) for j < i; Aqk = scale (q_i . k_j exp(G_i - G_j)), j <= i (bf16).
    for (int x = tid; x < kChunk * kChunk; x += nt) {
      const int i = x / kChunk, j = x % kChunk;
      float aq = 0, ak = 0;
      if (i < c && j <= i)
        for (int d = 0; d < K; ++d) {
          const float kj = Kn[j * K + d] * expf(G[i * K + d] - G[j * K + d]);
          aq = fmaf(Q[i * K + d], kj, aq);
          ak = fmaf(Kn[i * K + d], kj, ak);
        }
      Aqk[x] = (i < c && j <= i) ? round_bf16(aq * A.a.scale) : 0.0f;
      L[x] = (i < c && j < i) ? ak * beta[i] : 0.0f;
      Ai[x] = (i == j) ? 1.0f : 0.0f;
    }
    __syncthreads();
    // Ai = (I + L)^-1 by forward substitution, row by row: x_i = e_i - sum_{j<i} L_ij x_j.
    for (int i = 1; i < c; ++i) {
      for (int m = tid; m < i; m += nt) {
        float acc = 0;
        for (int j = m; j < i; ++j) acc = fmaf(-L[i * kChunk + j], Ai[j * kChunk + m], acc);
        Ai[i * kChunk + m] = acc;
      }
      __syncthreads();
    }
    for (int x = tid; x < c * kChunk; x += nt)
      if (x % kChunk < x / kChunk) Ai[x] = round_bf16(Ai[x]);
    __syncthreads();
    // W = Ai (k beta exp G), U = Ai (v beta), stored bf16; the state's bf16 copy.
    for (int x = tid; x < c * K; x += nt) {
      const int i = x / K, d = x % K;
      float acc = 0;
      for (int j = 0; j <= i; ++j) acc = fmaf(Ai[i * kChunk + j], Yk[j * K + d], acc);
      Wm[x] = round_bf16(acc);
    }
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      float acc = 0;
      for (int m = 0; m <= i; ++m) acc = fmaf(Ai[i * kChunk + m], Yv[m * V + j], acc);
      U[x] = round_bf16(acc);
    }
    for (int64_t x = tid; x < per_head; x += nt) Sb[x] = round_bf16(S[x]);
    __syncthreads();
    // V' = U - W Sb (bf16); O = scale (q exp G) Sb.
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      float ws = 0, qs = 0;
      for (int d = 0; d < K; ++d) {
        ws = fmaf(Wm[i * K + d], Sb[int64_t(d) * V + j], ws);
        qs = fmaf(Qg[i * K + d], Sb[int64_t(d) * V + j], qs);
      }
      Vn[x] = round_bf16(U[x] - ws);
      Ob[x] = qs * A.a.scale;
    }
    __syncthreads();
    // O += Aqk V', stored bf16; the state update S = exp(gamma) S + (k exp(gamma - G))^T V'.
    for (int x = tid; x < c * V; x += nt) {
      const int i = x / V, j = x % V;
      float acc = 0;
      for (int m = 0; m <= i; ++m) acc = fmaf(Aqk[i * kChunk + m], Vn[m * V + j], acc);
      A.o[((t0 + i) * A.HV + hv) * V + j] = round_bf16(Ob[x] + acc);
    }
    for (int64_t x = tid; x < per_head; x += nt) {
      const int d = static_cast<int>(x / V), j = static_cast<int>(x % V);
      float acc = 0;
      for (int i = 0; i < c; ++i) acc = fmaf(Kg[i * K + d], Vn[i * V + j], acc);
      S[x] = S[x] * eg[d] + acc;
    }
  }
  __syncthreads();
  for (int64_t x = tid; x < per_head; x += nt) {
    const int d = static_cast<int>(x / V), j = static_cast<int>(x % V);
    A.ht[st0 + sidx(d, j)] = S[x];
  }
}

}  // namespace

// --- entry points ----------------------------------------------------------------------------------
void register_cuda_device_ops() {
  DeviceOps ops;
  ops.alloc = device_alloc;
  ops.zero = device_zero;
  ops.free = device_free;
  ops.copy = device_copy;
  register_device_ops(Device::cuda, ops);
}

void kda_decode_cuda_f32state(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda_decode";
  require_device();
  const KdaParams p = kda_params(c);
  check_decode_shapes(p, op);
  const StatePool sp = state_pool(out, p, op);
  Tensor& pool = sp.t;
  Tensor& o = need(out, "o", op, p.B * p.HV * p.V);
  const std::vector<int64_t> slots = host_slots(in, p.B, sp.slots, op);
  DecodeArgs A{};
  A.q = bf16_input(in, "q", op, p.B * p.H * p.K);
  A.k = bf16_input(in, "k", op, p.B * p.H * p.K);
  A.v = bf16_input(in, "v", op, p.B * p.HV * p.V);
  A.g = bf16_input(in, "g", op, p.B * p.HV * p.K);
  A.beta = bf16_input(in, "beta", op, p.B * p.HV);
  gate_inputs(p, in, op, A.A_log, A.dt_bias);
  A.slots = device_slots(slots);
  InOut st = in_out(pool, "state", op);
  A.state = st.dev;
  A.o = static_cast<float*>(scratch().get("o", static_cast<size_t>(p.B * p.HV * p.V) * 4));
  A.B = static_cast<int>(p.B);
  A.H = static_cast<int>(p.H);
  A.HV = static_cast<int>(p.HV);
  A.K = static_cast<int>(p.K);
  A.V = static_cast<int>(p.V);
  A.a = gate_args(p);
  const int cols = p.state_v_first ? kDecodeCols : kDecodeColsKFirst;
  const dim3 grid(static_cast<unsigned>(p.B * p.HV), static_cast<unsigned>((p.V + cols - 1) / cols));
  run_launch(
      [&](cudaStream_t s) {
        if (p.state_v_first) {
          launch_by_k(A.K, grid, dim3(kDecodeWarps * kWarp), s, A, [](int kpl) {
            return kpl == 1 ? kda_decode_kernel<1> : kpl == 2 ? kda_decode_kernel<2> : kpl == 4 ? kda_decode_kernel<4> : kda_decode_kernel<8>;
          });
          DG_LAUNCHED("kda_decode_kernel");
        } else {
          launch_by_k(A.K, grid, dim3(kDecodeWarps * kWarp), s, A, [](int kpl) {
            return kpl == 1   ? kda_decode_kfirst_kernel<1>
                   : kpl == 2 ? kda_decode_kfirst_kernel<2>
                   : kpl == 4 ? kda_decode_kfirst_kernel<4>
                              : kda_decode_kfirst_kernel<8>;
          });
          DG_LAUNCHED("kda_decode_kfirst_kernel");
        }
      },
      {{A.state, pool.nbytes()}});
  store_output(A.o, o);
  st.write_back();
}

void kda_decode_cuda_f32state_fused(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda_decode_fused";
  require_device();
  const KdaParams p = kda_params(c);
  check_decode_shapes(p, op);
  if (p.V > 256) throw NotSupported("kda_decode_fused: V > 256");
  const int64_t W = c.integer("W");
  if (W < 1 || W > 8) throw NotSupported("kda_decode_fused: conv width W must be 1..8");
  const StatePool sp = state_pool(out, p, op);
  Tensor& pool = sp.t;
  Tensor& o = need(out, "o", op, p.B * p.HV * p.V);
  const int64_t N = sp.slots, Cq = p.H * p.K, Cv = p.HV * p.V;
  const std::vector<int64_t> slots = host_slots(in, p.B, N, op);
  FusedArgs A{};
  A.xq = bf16_input(in, "xq", op, p.B * Cq);
  A.xk = bf16_input(in, "xk", op, p.B * Cq);
  A.xv = bf16_input(in, "xv", op, p.B * Cv);
  A.g = bf16_input(in, "g", op, p.B * p.HV * p.K);
  A.beta = bf16_input(in, "beta", op, p.B * p.HV);
  A.ogate = bf16_input(in, "ogate", op, p.B * Cv);
  A.wq = f32_input(in, "wq", op, Cq * W);
  A.wk = f32_input(in, "wk", op, Cq * W);
  A.wv = f32_input(in, "wv", op, Cv * W);
  A.nweight = f32_input(in, "nweight", op, p.V);
  gate_inputs(p, in, op, A.A_log, A.dt_bias);
  A.slots = device_slots(slots);
  InOut st = in_out(pool, "state", op);
  // The conv pools have the state pool's slots: [N, channels, W-1].
  InOut cq = in_out(need(out, "conv_q", op, N * Cq * (W - 1)), "conv_q", op),
        ck = in_out(need(out, "conv_k", op, N * Cq * (W - 1)), "conv_k", op),
        cv = in_out(need(out, "conv_v", op, N * Cv * (W - 1)), "conv_v", op);
  A.state = st.dev;
  A.cq = cq.dev;
  A.ck = ck.dev;
  A.cv = cv.dev;
  A.o = static_cast<float*>(scratch().get("o", static_cast<size_t>(p.B * p.HV * p.V) * 4));
  A.B = static_cast<int>(p.B);
  A.H = static_cast<int>(p.H);
  A.HV = static_cast<int>(p.HV);
  A.K = static_cast<int>(p.K);
  A.V = static_cast<int>(p.V);
  A.W = static_cast<int>(W);
  A.eps = static_cast<float>(c.real("eps"));
  A.a = gate_args(p);
  const dim3 grid(static_cast<unsigned>(p.B * p.H));
  run_launch(
      [&](cudaStream_t s) {
        if (p.state_v_first)
          launch_by_k(A.K, grid, dim3(kFusedThreads), s, A, [](int kpl) { return fused_kernel<true>(kpl); });
        else
          launch_by_k(A.K, grid, dim3(kFusedThreads), s, A, [](int kpl) { return fused_kernel<false>(kpl); });
        DG_LAUNCHED("kda_fused_kernel");
      },
      {{A.state, pool.nbytes()}, {A.cq, cq.t->nbytes()}, {A.ck, ck.t->nbytes()}, {A.cv, cv.t->nbytes()}});
  store_output(A.o, o);
  for (const InOut* x : {&st, &cq, &ck, &cv}) x->write_back();
}

void kda_cuda_chunk_bf16(const Case& c, const TensorMap& in, TensorMap& out) {
  const char* op = "kda";
  require_device();
  const KdaParams p = kda_params(c);
  if (p.K > 256 || p.V > 256) throw NotSupported("kda_cuda_chunk_bf16: K and V must be <= 256");
  const int64_t N = p.num_seqs();
  std::vector<int64_t> cu(static_cast<size_t>(N + 1));
  for (int64_t n = 0; n <= N; ++n) cu[static_cast<size_t>(n)] = n < N ? p.seq_begin(n) : p.seq_end(N - 1);
  ChunkArgs A{};
  const int64_t tokens = cu.back();
  A.q = bf16_input(in, "q", op, tokens * p.H * p.K);
  A.k = bf16_input(in, "k", op, tokens * p.H * p.K);
  A.v = bf16_input(in, "v", op, tokens * p.HV * p.V);
  A.g = bf16_input(in, "g", op, tokens * p.HV * p.K);
  A.beta = bf16_input(in, "beta", op, tokens * p.HV);
  gate_inputs(p, in, op, A.A_log, A.dt_bias);
  if (p.has_h0) A.h0 = f32_input(in, "h0", op, N * p.HV * p.K * p.V);
  void* dcu = scratch().get("cu", cu.size() * sizeof(int64_t));
  device_copy(dcu, Device::cuda, cu.data(), Device::host, cu.size() * sizeof(int64_t));
  A.cu = static_cast<const int64_t*>(dcu);
  Tensor& o = need(out, "o", op, tokens * p.HV * p.V);
  Tensor& ht = need(out, "ht", op, N * p.HV * p.K * p.V);
  A.o = static_cast<float*>(scratch().get("o", static_cast<size_t>(o.numel()) * 4));
  A.ht = static_cast<float*>(scratch().get("ht", static_cast<size_t>(ht.numel()) * 4));
  const int64_t blocks = N * p.HV;
  A.work = static_cast<float*>(scratch().get("work", static_cast<size_t>(blocks * chunk_work_floats(p.K, p.V)) * 4));
  A.H = static_cast<int>(p.H);
  A.HV = static_cast<int>(p.HV);
  A.K = static_cast<int>(p.K);
  A.V = static_cast<int>(p.V);
  A.vfirst = p.state_v_first ? 1 : 0;
  A.a = gate_args(p);
  run_launch([&](cudaStream_t s) {
    DG_LAUNCH(kda_chunk_bf16_kernel, static_cast<unsigned>(blocks), kChunkThreads, s, A);
    DG_LAUNCHED("kda_chunk_bf16_kernel");
  });
  store_output(A.o, o);
  store_output(A.ht, ht);
}

}  // namespace dg
