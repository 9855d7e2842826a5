// rope, written once over Real (rope.h has the definition and the angles' precision per tier).
#include "reference/rope.h"

#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "reference/op_inputs.h"
#include "reference/real/dd_trig.h"
#include "reference/real/real_ops.h"

namespace dg {
namespace {

// The type a tier forms its angles in: its own, except double-double for the f64 tier (rope.h).
template <class Real> struct AngleOf { using type = Real; };
template <> struct AngleOf<double> { using type = DD; };

// theta^(-2i/d_rope) = exp(-(2i/d_rope) ln theta) in the angle type.
template <class A> A inv_freq(int64_t i, const RopeParams& p) {
  const A e = A(static_cast<double>(2 * i)) / static_cast<double>(p.d_rope);
  return r_exp(-(e * r_log(A(p.theta))));
}

// sin and cos of phi in the tier. f64: phi (double-double) reduced mod pi/2 in double-double, then
// sin and cos of the reduced angle r = hi + lo in double, with lo's first-order term.
template <class Real> void angle_sin_cos(const typename AngleOf<Real>::type& phi, Real& s, Real& c) {
  if constexpr (std::is_same_v<Real, double>) {
    int64_t k = 0;
    const DD r = dd_reduce_pio2(phi, k);
    const double sh = std::sin(r.hi), ch = std::cos(r.hi);
    quadrant_sin_cos(k, std::fma(ch, r.lo, sh), std::fma(-sh, r.lo, ch), s, c);
  } else {
    r_sin_cos(phi, s, c);
  }
}

template <class Real>
RopeReferenceResult rope(const RopeParams& p, const std::vector<double>& x, const std::vector<double>& pos, bool tails) {
  using A = typename AngleOf<Real>::type;
  const int64_t half = p.d_rope / 2, H = p.H, D = p.D;
  std::vector<A> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[static_cast<size_t>(i)] = inv_freq<A>(i, p);
  std::vector<Real> cs(inv.size()), sn(inv.size());
  RopeReferenceResult r;
  r.y.resize(static_cast<size_t>(p.T * H * D));
  if (tails) r.y_tail.assign(2 * r.y.size(), 0.0);
  std::vector<double>* tail = tails ? &r.y_tail : nullptr;
  for (int64_t t = 0; t < p.T; ++t) {
    for (size_t i = 0; i < inv.size(); ++i) {
      const A phi = inv[i] * pos[static_cast<size_t>(t)];
      angle_sin_cos<Real>(phi, sn[i], cs[i]);
    }
    for (int64_t h = 0; h < H; ++h) {
      const size_t base = static_cast<size_t>((t * H + h) * D);
      for (int64_t i = 0; i < half; ++i) {
        int64_t a = 0, b = 0;
        rope_pair_dims(p.style, i, p.d_rope, a, b);
        const Real xa(x[base + static_cast<size_t>(a)]), xb(x[base + static_cast<size_t>(b)]);
        const Real c = cs[static_cast<size_t>(i)], s = sn[static_cast<size_t>(i)];
        const Real ya = xa * c - xb * s;
        const Real yb = xb * c + xa * s;
        put_odd(ya, r.y, tail, base + static_cast<size_t>(a));
        put_odd(yb, r.y, tail, base + static_cast<size_t>(b));
      }
      for (int64_t d = p.d_rope; d < D; ++d) r.y[base + static_cast<size_t>(d)] = x[base + static_cast<size_t>(d)];
    }
  }
  return r;
}

// The positions as doubles (exact: integers below 2^53), each an integer in [0, kRopeMaxPosition].
std::vector<double> read_positions(const Tensor& positions) {
  std::vector<double> v(static_cast<size_t>(positions.numel()));
  positions.read(0, v);
  for (size_t t = 0; t < v.size(); ++t)
    if (!(v[t] >= 0 && v[t] <= static_cast<double>(kRopeMaxPosition) && v[t] == std::floor(v[t])))
      throw InputError(fmt::format("rope reference: positions[{}] = {} is not an integer in [0, {}]", t, v[t],
                                   kRopeMaxPosition));
  return v;
}

}  // namespace

RopeReferenceResult rope_reference(Tier tier, const RopeParams& p, const Tensor& x, const Tensor& positions, bool tails) {
  if (p.T < 0 || p.H < 1 || p.d_rope < 2 || p.d_rope % 2 != 0 || p.d_rope > p.D || !(p.theta > 1) ||
      !std::isfinite(p.theta))
    throw InputError(fmt::format("rope reference: bad parameters (T={}, H={}, D={}, d_rope={}, theta={})", p.T, p.H, p.D,
                                 p.d_rope, p.theta));
  expect_numel(x, "x", p.T * p.H * p.D, "[T,H,D]");
  expect_numel(positions, "positions", p.T, "[T]");
  const std::vector<double> xs = read_finite(x, "x");
  const std::vector<double> pos = read_positions(positions);
  return with_tier(tier, [&](auto real) { return rope<decltype(real)>(p, xs, pos, tails); });
}

}  // namespace dg
