// CPU KDA candidates: their entry points, and the per-token input preparation they share.
//
// Prefill (op "kda"): in q, k [B,T,H,K], v [B,T,HV,V], g [B,T,HV,K], beta [B,T,HV], optional A_log
// [HV], dt_bias [HV*K], h0 [N,HV,K,V] (V-first: [N,HV,V,K]); out o [B,T,HV,V], ht like h0.
//   kda_cpu_recurrent_f32  token loop, f32 state (FLA's fused-recurrent kernel, notes §2.3)
//   kda_cpu_chunk_f32      chunked WY/UT form, C = 64, f32 throughout (notes §2.1)
//   kda_cpu_chunk_bf16     the same, with the production GPU pipeline's bf16 storage (notes §2.2)
// Decode step (op "kda_decode"): in q, k [B,1,H,K], v [B,1,HV,V], g [B,1,HV,K], beta [B,1,HV],
// state_indices [B] (i64); out o [B,1,HV,V] and the in-out pool "state" [N,HV,K,V] (or V-first),
// updated in place in the candidate's state dtype. A negative index is a padding slot: its o rows
// are written as zeros and no state is touched.
//   kda_decode_cpu_f32       f32 state; the recurrent candidate's exact step (bitwise equal)
//   kda_decode_cpu_bf16state bf16 state: read, update in f32, round back once per step
//
// Every float input may be stored f32, bf16, f16 or f64; candidates read it one row at a time into
// f32 buffers (f64 rounds once), so memory stays O(state + one chunk) beyond the outputs. Outputs are
// written in whatever float dtype the harness allocated them in (one rounding from f32).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "harness/core/tensor.h"
#include "harness/core/threads.h"
#include "reference/kda_params.h"

namespace dg {

void kda_cpu_recurrent_f32(const KdaParams& p, const TensorMap& in, TensorMap& out);
// The policy's naive f32 KDA (kda_naive.cpp): the reference's generic loops run in float.
void kda_cpu_naive_f32(const KdaParams& p, const TensorMap& in, TensorMap& out);
// Its decode step ([naive] "kda_decode.f32"): the same loops for one token against the state pool.
void kda_decode_cpu_naive_f32(const KdaParams& p, const TensorMap& in, TensorMap& out);
void kda_cpu_chunk_f32(const KdaParams& p, const TensorMap& in, TensorMap& out);
void kda_cpu_chunk_bf16(const KdaParams& p, const TensorMap& in, TensorMap& out);

// The chunk-boundary bugs of the chunk form (candidates/mutants/kda.cpp registers each as a
// mutant of kda_cpu_chunk_f32; none is the honest kernel):
//   gamma_by_difference  gamma - G_i as the difference of two inclusive cumsums instead of its own
//                        reverse scan (the reverse-cumsum pitfall: loses |G| 2^-24 per channel,
//                        most for channels that decay fast)
//   ragged_gamma         the chunk's total decay gamma read from row C - 1 of the cumsum: right for
//                        a full chunk, stale rows for the ragged last one (T % 64 != 0)
//   no_boundary_decay    the state carried into the next chunk is not decayed by exp(gamma)
enum class ChunkBug { none, gamma_by_difference, ragged_gamma, no_boundary_decay };
void kda_cpu_chunk_mutant_f32(ChunkBug bug, const KdaParams& p, const TensorMap& in, TensorMap& out);
void kda_decode_cpu_f32(const KdaParams& p, const TensorMap& in, TensorMap& out);
void kda_decode_cpu_bf16state(const KdaParams& p, const TensorMap& in, TensorMap& out);

namespace kda_cpu {

// --- rows of a tensor in its own dtype --------------------------------------------------------
// dst[i] = t[offset + i] as f32 (exact for f32/bf16/f16, one rounding for f64).
void load_row(const Tensor& t, int64_t offset, int64_t n, float* dst);
// t[offset + i] = src[i], rounded once into t's dtype.
void store_row(Tensor& t, int64_t offset, int64_t n, const float* src);

// --- 64-byte aligned f32 scratch ----------------------------------------------------------------
struct AlignedFree {
  void operator()(float* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
using Buffer = std::unique_ptr<float[], AlignedFree>;
Buffer make_buffer(size_t n);   // zero-filled

inline int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// --- token preparation --------------------------------------------------------------------------
// Everything one (sequence, value head) pair reads per token, turned into what the recurrence uses:
//   q = l2norm(q) (if enabled), times scale when fold_scale; k = l2norm(k); v as stored;
//   g = log-space gate (pregated, or the in-op softplus / lower-bound gate from f, dt_bias, A_log);
//   beta = beta, sigmoid(b) or 2 sigmoid(b).
// All arithmetic in f32, in FLA's kernel order. With bf16_storage the stored q, k, v, g, beta are
// first rounded to bf16 (the dtype the production pipeline reads), and the l2-normalised q and k
// are rounded to bf16 again (FLA's l2norm kernel writes its result in the input dtype).
class TokenReader {
 public:
  TokenReader(const KdaParams& p, const TensorMap& in, int64_t hv, bool fold_scale, bool bf16_storage);
  // tok: index into the flattened [B*T] token axis. q, k, g: K floats; v: V floats. Returns beta.
  float load(int64_t tok, float* q, float* k, float* v, float* g) const;

 private:
  const KdaParams& p_;
  const Tensor &q_, &k_, &v_, &g_, &beta_;
  int64_t h_, hv_;
  bool fold_scale_, bf16_;
  float scale_, a_ = 1.0f, lb_;
  std::vector<float> dt_bias_;
};

// One token of the fused-recurrent algorithm on an f32 state S (K rows of V, row stride ldS):
//   S *= exp(g) (per row); r = v - S^T k; r *= beta; S += k r^T; o = S^T q.
// The decay and the residual share one sweep over S, the write and the read another; each element
// sees the same operations, and each reduction runs over d = 0..K-1 in order, as the unfused loops
// would. work: V floats.
void recurrent_step(float* S, int64_t ldS, int64_t K, int64_t V, const float* q, const float* k,
                    const float* v, const float* g, float beta, float* o, float* work);

// Columns [c0, c1) of the state of pair (slot, hv) of a [N,HV,K,V] (or [N,HV,V,K]) tensor <-> K rows
// of stride ldS (column c0 at S[d * ldS]); c1 < 0: through V.
void load_state(const Tensor& t, int64_t slot, int64_t hv, const KdaParams& p, float* S, int64_t ldS,
                int64_t c0 = 0, int64_t c1 = -1);
void store_state(Tensor& t, int64_t slot, int64_t hv, const KdaParams& p, const float* S, int64_t ldS,
                 int64_t c0 = 0, int64_t c1 = -1);

// Splitting one (sequence, head) pair over cores. Column v of the state only ever meets column v of
// v, r and o (q, k, g and beta are shared by all columns), so disjoint column ranges of a pair are
// independent computations, each giving exactly the bits the whole pair would. When a case has
// fewer pairs than threads (one long sequence of one head), each pair is split into `parts` ranges
// of whole 16-column blocks; each range repeats the per-token work shared by all columns (token
// preparation, and in the chunked form the intra-chunk products), so a split pays only for long
// sequences (kMinTokensToSplit).
struct ColumnRange {
  int64_t c0 = 0, c1 = 0;
  int64_t width() const { return c1 - c0; }
};
inline int64_t column_parts(int64_t pairs, int64_t V, int64_t tokens_per_pair) {
  constexpr int64_t kMinTokensToSplit = 1024;
  const int64_t hw = std::max(1, num_threads());
  if (pairs >= hw || tokens_per_pair < kMinTokensToSplit) return 1;
  return std::max<int64_t>(1, std::min(hw / pairs, (V + 15) / 16));
}
inline ColumnRange column_range(int64_t V, int64_t parts, int64_t part) {
  const int64_t blocks = (V + 15) / 16;
  return {16 * (blocks * part / parts), std::min(V, 16 * (blocks * (part + 1) / parts))};
}

// The pool slot of each of the B sequences of a decode step (in["state_indices"], i64 or i32; < 0:
// a padding slot), checked: inside a pool of `pool_slots`, no slot shared. Throws
// std::invalid_argument naming the problem.
std::vector<int64_t> state_slots(const TensorMap& in, int64_t B, int64_t pool_slots);

// What one decode step works on, checked: one token per sequence (T = 1, no cu_seqlens), the output
// o of B * HV * V elements, the in-out state pool out["state"] ([slots, HV, K, V] or V-first) and
// each sequence's slot (state_slots). Throws std::invalid_argument naming the problem.
struct DecodeStepIo {
  Tensor* o;
  Tensor* pool;
  std::vector<int64_t> slots;
};
DecodeStepIo decode_step_io(const KdaParams& p, const TensorMap& in, TensorMap& out);

// Output tensor `name` of `out`, checked to have `numel` elements.
Tensor& output(TensorMap& out, const char* name, int64_t numel);

// Runs body(item, scratch) for item in [0, n) on up to num_threads() std::threads (the harness's
// --threads budget; by default hardware_concurrency()), fewer when the work is small, handing out
// items one at a time (sequences of a varlen batch differ in length); each thread builds its
// scratch once with make_scratch(). The first exception thrown is rethrown after every thread has
// joined.
template <class MakeScratch, class Body>
void for_each_pair(int64_t n, double flops_per_item, MakeScratch make_scratch, Body body) {
  constexpr double kMinFlopsPerThread = 4e6;   // below this a thread costs more than it saves
  const int64_t hw = std::max(1, num_threads());
  int64_t by_work = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * flops_per_item / kMinFlopsPerThread));
  int64_t threads = std::min({hw, n, by_work});
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    try {
      auto scratch = make_scratch();
      for (int64_t i; (i = next.fetch_add(1)) < n;) body(i, scratch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace kda_cpu
}  // namespace dg
