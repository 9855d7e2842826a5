// What every reference of a small op does with its tensors: check a size, read the values as
// doubles (refusing NaN/Inf with the element's index), write an output rounded to odd with its
// two-double tail, and run a template over the tier's scalar type.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/tensor.h"
#include "reference/real/real_ops.h"
#include "reference/real/tier.h"

namespace dg {

inline void expect_numel(const Tensor& t, const char* name, int64_t n, const std::string& shape) {
  if (t.numel() != n)
    throw InputError(std::string("reference: input '") + name + "' has shape " + t.shape_str() + ", expected " + shape);
}

inline std::vector<double> read_finite(const Tensor& t, const char* name) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      throw InputError(std::string("reference: input '") + name + "' has a non-finite value at element " +
                       std::to_string(i) + " of shape " + t.shape_str());
  return v;
}

// out[i] = x rounded to odd into a double; tail (when given) gets the two-double rest at [2i, 2i+1].
template <class Real> void put_odd(const Real& x, std::vector<double>& out, std::vector<double>* tail, size_t i) {
  const double x0 = to_odd(x);
  out[i] = x0;
  if (tail) tail_of(x, x0, &(*tail)[2 * i]);
}

// f(Real{}) for the tier's scalar type.
template <class F> auto with_tier(Tier tier, F&& f) {
  switch (tier) {
    case Tier::f64: return f(double{});
    case Tier::dd: return f(DD{});
    case Tier::mpfr127: return f(Mpfr<127>{});
    case Tier::mpfr256: return f(Mpfr<256>{});
    case Tier::f128: return f(F128{});
  }
  return f(double{});
}

}  // namespace dg
