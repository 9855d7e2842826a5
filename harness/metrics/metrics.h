// Precision metrics of one candidate output tensor against its reference.
//
// NaN/Inf position mismatches are counted first (a NaN where the reference is finite can never be
// hidden by a good average); every other metric is over the elements where both are finite.
//   nonfinite_mismatch: positions where the two differ in NaN/Inf-ness or in an Inf's sign (NaN vs
//               number, Inf vs number, NaN vs Inf, +Inf vs -Inf). NaN vs NaN and an Inf vs the same
//               Inf match; they are neither counted here nor compared below.
//   max_abs   = max |c - r|                             (argmax_abs: its first flat index)
//   max_rel   = max |c - r| / max(|r|, rel_floor)      rel_floor: the format's smallest normal 2^emin,
//                                                        or given
//   rms_ratio = ||c - r||_2 / ||r||_2                  (0 when both are 0; +inf when only r is 0)
//   bits      = min(64, -log2(rms_ratio))              (64 when rms_ratio == 0; negative when the
//                                                        error is larger than the signal, -inf at inf)
//   cosine    = <c, r> / (||c|| ||r||)                 (1 when both are 0, 0 when only one is 0;
//                                                        clamped to [-1, 1])
//   ULP       = real ULP error |c - r| / ulp_F(r) in the candidate's output format F (max, p99, mean),
//               with ulp_F as dg::ulp, and the integer ULP distance from c to RN_F(r), the correctly
//               rounded reference (max). RN_F follows F's overflow policy: a reference that rounds
//               to Inf is one step beyond max_finite; e4m3 saturates to +-448. The distance
//               saturates at INT64_MAX (only f64 values of opposite sign near the top of the range).
//   ulp_rms_max = max |c - r| / ulp_F(rms(r)), rms(r) = ||r||_2 / sqrt(count): the largest error in
//               ULPs of F at the output's typical magnitude. Scale-aware: a reference value near
//               zero (whose own ULP is tiny) does not inflate it, where ulp_max reads 1e5-1e10 for
//               honest kernels. 0 when every reference value is 0. Tables show it; JSON keeps both.
//   ulp_p99   = the nearest-rank 99th percentile: the ceil(0.99 n)-th smallest ULP error. Exact (an
//               order statistic of all n errors) up to CompareOptions::exact_p99_max_count elements;
//               above that, to bound memory, it comes from a histogram whose bins are the double's
//               exponent and top 8 significand bits (256 bins per octave), and is the largest error
//               in the bin that holds the exact p99: exact <= ulp_p99 < exact * (1 + 2^-8).
// All sums are computed in double with compensated (Neumaier) accumulation in index order. When the
// largest finite magnitude is beyond 2^440 or below 2^-440, the norms are recomputed with an exact
// power-of-two scale, so that squares neither overflow nor underflow (the ratios are scale-invariant,
// and a tiny wrong output cannot pass as exact because its squares vanished).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "harness/core/dtype.h"

namespace dg {

struct TensorMetrics {
  int64_t count = 0;               // elements compared (both finite)
  int64_t nonfinite_mismatch = 0;  // positions where NaN/Inf-ness (or the Inf's sign) differ
  int64_t first_mismatch = -1;     // flat index of the first such position, -1 if none
  double max_abs = 0, max_rel = 0, rms_ratio = 0, bits = 64, cosine = 1;
  double ulp_max = 0, ulp_p99 = 0, ulp_mean = 0;
  double ulp_rms_max = 0;          // max |c - r| in ULPs of F at rms(r) (see the top)
  int64_t ulp_dist_max = 0;
  int64_t argmax_abs = -1;         // flat index of the first element with |c - r| == max_abs
  double ref_max_abs = 0;          // max |r| over the compared elements (scale of absolute floors)
};

// Above this many elements compare() takes ulp_p99 from a histogram instead of an exact order
// statistic, so a 1M-token output never needs a copy of all its ULP errors (2^24 doubles = 128 MiB).
inline constexpr int64_t kExactP99MaxCount = int64_t{1} << 24;

struct CompareOptions {
  double rel_floor = 0.0;                            // 0: the format's smallest normal 2^emin
  int64_t exact_p99_max_count = kExactP99MaxCount;   // tests lower it to exercise the histogram
};

// reference: values rounded to odd into double by the tier (so RN_F(reference) is correctly rounded);
// candidate: the candidate's output decoded exactly into double, so every finite value is
// representable in F; format: the candidate's output dtype (a float format).
// Throws std::invalid_argument when the sizes differ, the format is not a float format, or
// rel_floor is negative or NaN.
TensorMetrics compare(std::span<const double> reference, std::span<const double> candidate,
                      DType format, double rel_floor = 0.0);
TensorMetrics compare(std::span<const double> reference, std::span<const double> candidate,
                      DType format, const CompareOptions& options);

// The drift curve of a sequence output: error per log-spaced bucket of token positions, and the
// fitted growth exponent of error against position.
//
// Element i belongs to token i / inner; token_position[token] is that token's position within its
// own sequence (0-based), so varlen batches (packed sequences of different lengths) and [B, T, ...]
// layouts are both described by one position per token. Buckets are [0,1), [1,2), [2,4), [4,8), ...,
// the last one clipped at max position + 1; buckets that hold no token are omitted. Per bucket, over
// the elements where both are finite (nonfinite mismatches are counted, as in compare()):
//   rms_ratio = ||c - r|| / ||r||   (0 when both are 0; +inf when only r is 0)
//   rms_error = ||c - r|| / sqrt(count)
// growth_exponent: the least-squares slope of log2(rms_error) against log2(the bucket's
// geometric-mean position sqrt(max(begin, 1) * end)), over the buckets with nonzero (and finite)
// error and nonzero reference that begin at min_fit_position or later (all qualifying buckets when
// fewer than two of those do); 0 when fewer than two buckets qualify. Error that grows as
// position^a gives a; error that stays constant gives 0. The default min_fit_position, 64, is one
// chunk of a chunked kernel: the first chunk starts from the initial state and is typically more
// accurate than the rest, a ramp over the first tokens that is not growth with context length.
struct DriftBucket {
  int64_t begin = 0, end = 0;       // positions [begin, end)
  int64_t count = 0;                // elements compared (both finite)
  int64_t nonfinite_mismatch = 0;   // as in TensorMetrics
  double rms_ratio = 0;
  double rms_error = 0;
};
struct DriftCurve {
  std::vector<DriftBucket> buckets;   // by increasing position
  double growth_exponent = 0;
};
// Throws std::invalid_argument when the sizes differ, inner < 1, reference.size() !=
// token_position.size() * inner, or a position is negative.
DriftCurve drift_curve(std::span<const double> reference, std::span<const double> candidate,
                       std::span<const int64_t> token_position, int64_t inner,
                       int64_t min_fit_position = 64);

}  // namespace dg
