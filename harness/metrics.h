// Precision metrics of one candidate output tensor against its reference.
//
// NaN/Inf position mismatches are counted first (a NaN where the reference is finite can never be
// hidden by a good average); every other metric is over the elements where both are finite.
//   max_abs   = max |c - r|
//   max_rel   = max |c - r| / max(|r|, rel_floor)      rel_floor: the format's smallest normal, or given
//   rms_ratio = ||c - r||_2 / ||r||_2                  (0 when both are 0; inf when only r is 0)
//   bits      = -log2(rms_ratio)                        (capped at 64 when rms_ratio == 0)
//   cosine    = <c, r> / (||c|| ||r||)
//   ULP       = real ULP error |c - r| / ulp_F(r) in the candidate's output format F (max, p99, mean),
//               and the integer ULP distance to RN_F(r), the correctly rounded reference (max)
// All sums are computed in double with compensated (Neumaier) accumulation in index order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "harness/dtype.h"

namespace dg {

struct TensorMetrics {
  int64_t count = 0;               // elements compared (both finite)
  int64_t nonfinite_mismatch = 0;  // positions where NaN/Inf-ness (or the Inf's sign) differ
  int64_t first_mismatch = -1;     // flat index of the first such position, -1 if none
  double max_abs = 0, max_rel = 0, rms_ratio = 0, bits = 0, cosine = 1;
  double ulp_max = 0, ulp_p99 = 0, ulp_mean = 0;
  int64_t ulp_dist_max = 0;
  int64_t argmax_abs = -1;
};

// reference: values rounded to odd into double by the tier (so RN_F(reference) is correctly rounded);
// candidate: the candidate's output decoded exactly into double; format: the candidate's output dtype.
TensorMetrics compare(std::span<const double> reference, std::span<const double> candidate,
                      DType format, double rel_floor = 0.0);

// The drift curve of a sequence output: rms_ratio per log-spaced bucket of positions, and the fitted
// growth exponent of error against position.
struct DriftBucket {
  int64_t begin = 0, end = 0;   // positions [begin, end)
  double rms_ratio = 0;
};
struct DriftCurve {
  std::vector<DriftBucket> buckets;
  double growth_exponent = 0;   // slope of log(rms error) vs log(position) (least squares over buckets)
};
// position_of(i) for element i is (i / inner) % positions when the tensor is [outer, positions, inner].
// Buckets: [0,1), [1,2), [2,4), [4,8), ... up to `positions` (last bucket clipped).
DriftCurve drift_curve(std::span<const double> reference, std::span<const double> candidate,
                       int64_t outer, int64_t positions, int64_t inner);

}  // namespace dg
