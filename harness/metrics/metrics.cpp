// Precision metrics: compare() and drift_curve(). The formulas and conventions are in metrics.h.
//
// compare() is one fused pass over the elements, in index order, templated on the output format so
// that the per-element ULP work is a handful of inline bit operations instead of calls to encode():
//   f64   RN_F(r) = r; integer distance from the sign-magnitude bit patterns.
//   f32   RN_F(r) = (float)r (a correctly rounded RNE conversion, overflow to Inf); bit patterns.
//   other RN_F(r) from the quantum u = ulp_F(r): |RN_F(r)| = nearbyint(|r| / u) * u, which is one
//         RNE rounding because |r| / u is exact (u is a power of two); the integer distance from
//         the ordinal of |x| among F's non-negative values, (E - emin) * 2^(p-1) + |x| / ulp_F(x),
//         E = max(floor(log2 |x|), emin), which is F's own bit pattern for every format here.
// These equal dg::round_to / encode / ulp_distance / ulp (metrics_test checks them against each other).
#include "harness/metrics/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace dg {
namespace {

inline uint64_t bits_of(double x) { return std::bit_cast<uint64_t>(x); }

// 2^k, exactly, for -1074 <= k <= 1023.
inline double pow2(int k) {
  if (k >= -1022) return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52);
  return std::bit_cast<double>(uint64_t{1} << (k + 1074));
}

// floor(log2 |x|) for a finite normal double; -1023 for zeros and subnormal doubles, which lie below
// the smallest normal of every format, so max(exponent_of(x), emin) is the quantum's exponent.
inline int exponent_of(double x) { return static_cast<int>((bits_of(x) >> 52) & 0x7ff) - 1023; }

inline uint64_t abs_diff(int64_t a, int64_t b) {
  // modular arithmetic gives the exact difference whenever it is below 2^64
  return a >= b ? static_cast<uint64_t>(a) - static_cast<uint64_t>(b)
                : static_cast<uint64_t>(b) - static_cast<uint64_t>(a);
}

// Neumaier's compensated sum: the rounding error of each addition is kept in `comp`.
struct Neumaier {
  double sum = 0, comp = 0;
  void add(double x) {
    const double t = sum + x;
    comp += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  }
  double value() const { return std::isfinite(sum) ? sum + comp : sum; }
};

// A nonfinite pair (at least one of r, c is NaN or Inf) matches when both are NaN or both are the
// same Inf (then r == c).
inline bool nonfinite_match(double r, double c) { return (std::isnan(r) && std::isnan(c)) || r == c; }

struct Ulps {
  double error;        // |c - r| / ulp_F(r)
  uint64_t distance;   // representable steps from c to RN_F(r)
};

struct F64Ulps {
  static int64_t ordinal(double x) {
    const uint64_t b = bits_of(x);
    const auto m = static_cast<int64_t>(b & 0x7fff'ffff'ffff'ffffu);
    return (b >> 63) ? -m : m;
  }
  Ulps operator()(double r, double c, double ad) const {
    // 1/ulp is not a double below 2^-1023 (2^1074), so divide
    const double u = pow2(std::max(exponent_of(r), -1022) - 52);
    return {ad / u, abs_diff(ordinal(c), ordinal(r))};
  }
};

struct F32Ulps {
  static int64_t ordinal(float x) {
    const uint32_t b = std::bit_cast<uint32_t>(x);
    const auto m = static_cast<int64_t>(b & 0x7fff'ffffu);
    return (b >> 31) ? -m : m;
  }
  Ulps operator()(double r, double c, double ad) const {
    const double inv_u = pow2(23 - std::max(exponent_of(r), -126));
    return {ad * inv_u, abs_diff(ordinal(static_cast<float>(c)), ordinal(static_cast<float>(r)))};
  }
};

// bf16, f16, tf32, e4m3, e5m2 (any format with p <= 53 and emin >= -1022 whose bit patterns order
// like its values).
struct NarrowUlps {
  int p = 0, emin = 0;
  int64_t max_ordinal = 0;   // ordinal of max_finite
  bool saturate = false;     // e4m3: overflow clamps to max_finite; otherwise it rounds to Inf

  explicit NarrowUlps(const FormatInfo& f)
      : p(f.precision), emin(f.emin), saturate(f.overflow == Overflow::saturate) {
    max_ordinal = ordinal(f.max_finite);
  }
  // Ordinal of |x| for an x representable in the format.
  int64_t ordinal(double ax) const {
    const int e = std::max(exponent_of(ax), emin);
    return (static_cast<int64_t>(e - emin) << (p - 1)) + static_cast<int64_t>(ax * pow2(p - 1 - e));
  }
  Ulps operator()(double r, double c, double ad) const {
    const double ar = std::fabs(r);
    const int e = std::max(exponent_of(ar), emin);
    const double inv_u = pow2(p - 1 - e);
    // RN_F(|r|) as an ordinal; nearbyint(|r| / u) == 2^p is the next binade's first value, which the
    // same formula numbers correctly
    int64_t t = (static_cast<int64_t>(e - emin) << (p - 1)) + static_cast<int64_t>(std::nearbyint(ar * inv_u));
    if (t > max_ordinal) t = saturate ? max_ordinal : max_ordinal + 1;   // Inf follows max_finite
    const int64_t oc = ordinal(std::fabs(c));
    return {ad * inv_u, abs_diff(std::signbit(c) ? -oc : oc, std::signbit(r) ? -t : t)};
  }
};

// Where the per-element ULP errors go for the p99.
struct ExactP99 {
  std::vector<double> errors;
  explicit ExactP99(size_t n) { errors.reserve(n); }
  void add(double e) { errors.push_back(e); }
  // the (k+1)-th smallest error, 0-based k
  double order_statistic(int64_t k) {
    std::nth_element(errors.begin(), errors.begin() + k, errors.end());
    return errors[static_cast<size_t>(k)];
  }
};

struct HistogramP99 {
  static constexpr int kSubBits = 8;   // significand bits per bin: 256 bins per octave
  std::vector<int64_t> count;
  std::vector<double> max;             // largest error seen in each bin
  HistogramP99() : count(size_t{1} << (11 + kSubBits)), max(size_t{1} << (11 + kSubBits)) {}
  void add(double e) {   // e >= 0 (or +inf): the bit pattern orders like the value
    const size_t b = bits_of(e) >> (52 - kSubBits);
    ++count[b];
    if (e > max[b]) max[b] = e;
  }
  // The largest error in the bin holding the (k+1)-th smallest error: never below it, and above it
  // by less than one bin width (a relative 2^-8).
  double order_statistic(int64_t k) const {
    int64_t seen = 0;
    for (size_t b = 0; b < count.size(); ++b) {
      seen += count[b];
      if (seen > k) return max[b];
    }
    return 0;
  }
};

struct Accum {
  int64_t count = 0, mismatch = 0, first_mismatch = -1, argmax_abs = -1;
  double max_abs = 0, max_rel = 0, max_mag = 0, ref_max_abs = 0, ulp_max = 0;
  uint64_t ulp_dist_max = 0;
  Neumaier dd, rr, cc, cr, ulp_sum;
};

template <class UlpFn, class Sink>
void scan(std::span<const double> reference, std::span<const double> candidate, const UlpFn& ulps,
          double rel_floor, Sink& sink, Accum& a) {
  const double* ref = reference.data();
  const double* cand = candidate.data();
  const auto n = static_cast<int64_t>(reference.size());
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i], c = cand[i];
    if (!std::isfinite(r) || !std::isfinite(c)) [[unlikely]] {
      if (!nonfinite_match(r, c) && a.mismatch++ == 0) a.first_mismatch = i;
      continue;
    }
    ++a.count;
    const double d = c - r, ad = std::fabs(d), ar = std::fabs(r);
    if (ad > a.max_abs || a.argmax_abs < 0) {
      a.max_abs = ad;
      a.argmax_abs = i;
    }
    a.max_rel = std::max(a.max_rel, ad / std::max(ar, rel_floor));
    a.max_mag = std::max(a.max_mag, std::max(ar, std::fabs(c)));
    a.ref_max_abs = std::max(a.ref_max_abs, ar);
    a.dd.add(d * d);
    a.rr.add(r * r);
    a.cc.add(c * c);
    a.cr.add(c * r);
    const Ulps u = ulps(r, c, ad);
    a.ulp_max = std::max(a.ulp_max, u.error);
    a.ulp_sum.add(u.error);
    a.ulp_dist_max = std::max(a.ulp_dist_max, u.distance);
    sink.add(u.error);
  }
}

// Squares of values beyond 2^440 may overflow a sum of up to 2^128 terms; squares of values below
// 2^-440 lose bits to underflow (or vanish, which would make a tiny wrong output look exact).
bool needs_scaling(double max_mag) { return max_mag > 0x1p440 || (max_mag > 0 && max_mag < 0x1p-440); }

// An exact power of two that brings max_mag near 1.
double scale_for(double max_mag) { return pow2(std::clamp(-std::ilogb(max_mag), -1022, 1023)); }

// Recompute the norm sums of the finite pairs with values scaled by s (exact: a power of two).
void scaled_norms(std::span<const double> reference, std::span<const double> candidate, double s, Accum& a) {
  a.dd = a.rr = a.cc = a.cr = Neumaier{};
  for (size_t i = 0; i < reference.size(); ++i) {
    if (!std::isfinite(reference[i]) || !std::isfinite(candidate[i])) continue;
    const double r = reference[i] * s, c = candidate[i] * s, d = c - r;
    a.dd.add(d * d);
    a.rr.add(r * r);
    a.cc.add(c * c);
    a.cr.add(c * r);
  }
}

// ||d|| / ||r|| from the sums of squares, with the conventions of metrics.h.
double norm_ratio(double dd, double rr) {
  if (rr == 0) return dd == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(dd) / std::sqrt(rr);
}

int bucket_of(int64_t position) {   // [0,1) -> 0, [2^(b-1), 2^b) -> b
  return static_cast<int>(std::bit_width(static_cast<uint64_t>(position)));
}

}  // namespace

TensorMetrics compare(std::span<const double> reference, std::span<const double> candidate, DType format,
                      double rel_floor) {
  CompareOptions options;
  options.rel_floor = rel_floor;
  return compare(reference, candidate, format, options);
}

TensorMetrics compare(std::span<const double> reference, std::span<const double> candidate, DType format,
                      const CompareOptions& options) {
  if (reference.size() != candidate.size())
    throw std::invalid_argument("compare: reference has " + std::to_string(reference.size()) +
                                " elements, candidate " + std::to_string(candidate.size()));
  const FormatInfo& fi = info(format);
  if (!fi.is_float)
    throw std::invalid_argument("compare: output format " + std::string(fi.name) + " is not a float format");
  if (!(options.rel_floor >= 0))
    throw std::invalid_argument("compare: rel_floor must be >= 0 (0 selects the format's smallest normal)");
  const double rel_floor = options.rel_floor > 0 ? options.rel_floor : pow2(fi.emin);

  Accum a;
  double p99 = 0;
  const auto n = static_cast<int64_t>(reference.size());
  const auto run = [&](const auto& ulps) {
    const auto finish = [&](auto& sink) {
      scan(reference, candidate, ulps, rel_floor, sink, a);
      if (a.count > 0) p99 = sink.order_statistic((99 * a.count + 99) / 100 - 1);   // ceil(0.99 n) - 1
    };
    if (n <= options.exact_p99_max_count) {
      ExactP99 sink(reference.size());
      finish(sink);
    } else {
      HistogramP99 sink;
      finish(sink);
    }
  };
  switch (format) {
    case DType::f64: run(F64Ulps{}); break;
    case DType::f32: run(F32Ulps{}); break;
    default: run(NarrowUlps(fi)); break;
  }
  if (needs_scaling(a.max_mag)) scaled_norms(reference, candidate, scale_for(a.max_mag), a);

  TensorMetrics m;
  m.count = a.count;
  m.nonfinite_mismatch = a.mismatch;
  m.first_mismatch = a.first_mismatch;
  m.argmax_abs = a.argmax_abs;
  m.max_abs = a.max_abs;
  m.ref_max_abs = a.ref_max_abs;
  m.max_rel = a.max_rel;
  const double dd = a.dd.value(), rr = a.rr.value(), cc = a.cc.value(), cr = a.cr.value();
  m.rms_ratio = norm_ratio(dd, rr);
  m.bits = m.rms_ratio == 0 ? 64.0 : std::min(64.0, -std::log2(m.rms_ratio));
  if (cc == 0 && rr == 0) m.cosine = 1;
  else if (cc == 0 || rr == 0) m.cosine = 0;
  else m.cosine = std::clamp(cr / (std::sqrt(cc) * std::sqrt(rr)), -1.0, 1.0);
  m.ulp_max = a.ulp_max;
  m.ulp_mean = a.count > 0 ? a.ulp_sum.value() / static_cast<double>(a.count) : 0.0;
  m.ulp_p99 = p99;
  // rms(r) from the norm sum already taken (scaled by an exact power of two when it was); a second
  // pass, each term scaled by the largest |r|, only when that sum underflowed to 0 (a reference far
  // below a huge candidate).
  if (a.count > 0 && a.ref_max_abs > 0 && std::isfinite(a.ref_max_abs)) {
    const double s = needs_scaling(a.max_mag) ? scale_for(a.max_mag) : 1.0;
    double rms = std::sqrt(rr / static_cast<double>(a.count)) / s;
    if (!(rms > 0)) {
      double sum = 0;
      for (size_t i = 0; i < reference.size(); ++i)
        if (std::isfinite(reference[i]) && std::isfinite(candidate[i])) {
          const double x = reference[i] / a.ref_max_abs;
          sum += x * x;
        }
      rms = a.ref_max_abs * std::sqrt(sum / static_cast<double>(a.count));
    }
    const double u = rms > 0 ? ulp(format, rms) : 0.0;
    m.ulp_rms_max = u > 0 ? a.max_abs / u : 0.0;
  }
  m.ulp_dist_max = static_cast<int64_t>(
      std::min<uint64_t>(a.ulp_dist_max, static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
  return m;
}

DriftCurve drift_curve(std::span<const double> reference, std::span<const double> candidate,
                       std::span<const int64_t> token_position, int64_t inner, int64_t min_fit_position) {
  if (reference.size() != candidate.size())
    throw std::invalid_argument("drift_curve: reference has " + std::to_string(reference.size()) +
                                " elements, candidate " + std::to_string(candidate.size()));
  if (inner < 1) throw std::invalid_argument("drift_curve: inner must be >= 1, got " + std::to_string(inner));
  const auto step = static_cast<size_t>(inner);
  if (reference.size() % step != 0 || reference.size() / step != token_position.size())
    throw std::invalid_argument("drift_curve: " + std::to_string(reference.size()) + " elements are not " +
                                std::to_string(token_position.size()) + " tokens of " + std::to_string(inner));
  int64_t max_position = -1;
  for (const int64_t p : token_position) {
    if (p < 0) throw std::invalid_argument("drift_curve: negative token position " + std::to_string(p));
    max_position = std::max(max_position, p);
  }
  DriftCurve curve;
  if (max_position < 0) return curve;

  struct Acc {
    int64_t tokens = 0, count = 0, mismatch = 0;
    Neumaier dd, rr;
  };
  const int nb = bucket_of(max_position) + 1;
  std::vector<Acc> acc;
  double max_mag = 0;
  const auto pass = [&](double s) {
    acc.assign(static_cast<size_t>(nb), Acc{});
    for (size_t t = 0; t < token_position.size(); ++t) {
      Acc& b = acc[static_cast<size_t>(bucket_of(token_position[t]))];
      ++b.tokens;
      for (size_t i = t * step; i < (t + 1) * step; ++i) {
        const double r = reference[i], c = candidate[i];
        if (!std::isfinite(r) || !std::isfinite(c)) {
          if (!nonfinite_match(r, c)) ++b.mismatch;
          continue;
        }
        ++b.count;
        max_mag = std::max(max_mag, std::max(std::fabs(r), std::fabs(c)));
        const double rs = r * s, d = c * s - rs;
        b.dd.add(d * d);
        b.rr.add(rs * rs);
      }
    }
  };
  pass(1.0);
  double s = 1.0;
  if (needs_scaling(max_mag)) pass(s = scale_for(max_mag));

  // least-squares fit of y = log2(rms_error) against x = log2(geometric-mean position), over the
  // buckets from min_fit_position on (all buckets when fewer than two of those qualify)
  std::vector<double> xs, ys, xs_all, ys_all;
  for (int b = 0; b < nb; ++b) {
    const Acc& a = acc[static_cast<size_t>(b)];
    if (a.tokens == 0) continue;
    DriftBucket out;
    out.begin = b == 0 ? 0 : int64_t{1} << (b - 1);
    out.end = b == 0 ? 1 : std::min(int64_t{1} << b, max_position + 1);
    out.count = a.count;
    out.nonfinite_mismatch = a.mismatch;
    const double dd = a.dd.value(), rr = a.rr.value();
    out.rms_ratio = norm_ratio(dd, rr);
    out.rms_error = a.count > 0 ? std::sqrt(dd) / std::sqrt(static_cast<double>(a.count)) / s : 0.0;
    curve.buckets.push_back(out);
    if (dd > 0 && rr > 0 && out.rms_error > 0 && std::isfinite(out.rms_error)) {
      const auto begin = static_cast<double>(std::max<int64_t>(out.begin, 1));
      const double x = 0.5 * (std::log2(begin) + std::log2(static_cast<double>(out.end)));
      xs_all.push_back(x);
      ys_all.push_back(std::log2(out.rms_error));
      if (out.begin >= min_fit_position) {
        xs.push_back(x);
        ys.push_back(std::log2(out.rms_error));
      }
    }
  }
  if (xs.size() < 2) {
    xs = std::move(xs_all);
    ys = std::move(ys_all);
  }
  if (xs.size() >= 2) {
    const auto k = static_cast<double>(xs.size());
    double mx = 0, my = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      mx += xs[i];
      my += ys[i];
    }
    mx /= k;
    my /= k;
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      sxy += (xs[i] - mx) * (ys[i] - my);
      sxx += (xs[i] - mx) * (xs[i] - mx);
    }
    curve.growth_exponent = sxy / sxx;
  }
  return curve;
}

}  // namespace dg
