// Double-double arithmetic: a value hi + lo with |lo| <= ulp(hi)/2, about 106 significand bits.
// (Interface placeholder: the full arithmetic is defined below.)
#pragma once
namespace dg {
struct DD {
  double hi = 0.0;
  double lo = 0.0;
};
}  // namespace dg
