// Mpfr<Bits>: a fixed-precision MPFR value for the mpfr127 / mpfr256 reference tiers, over the raw
// MPFR C API. Every operation is one MPFR call rounding to nearest (MPFR_RNDN) at Bits bits: a
// product and a sum are two roundings (mul then add, never mpfr_fma), there are no expression
// templates (each operator returns a value), and `auto` always holds a value.
//
// The significand lives inside the object (MPFR's custom interface), so a temporary costs no heap
// allocation and a value can be used freely across threads. Use precisions below 128 bits for the
// fast two-limb paths (127, not 128; notes/precision-arithmetic.md).
//
// Threads: MPFR keeps per-thread caches (constants such as log 2 used by exp/log); a worker thread
// must free them when it ends: run the thread's body through MpfrThreadCacheGuard or mpfr_thread().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include <mpfr.h>

namespace dg {

template <int Bits>
class Mpfr {
  static_assert(Bits >= MPFR_PREC_MIN && Bits <= 4096);

 public:
  static constexpr int kBits = Bits;

  Mpfr() { init(); mpfr_set_zero(v_, 1); }
  Mpfr(double x) { init(); mpfr_set_d(v_, x, MPFR_RNDN); }  // NOLINT: implicit, exact for Bits >= 53
  Mpfr(const Mpfr& o) { init(); mpfr_set(v_, o.v_, MPFR_RNDN); }
  Mpfr& operator=(const Mpfr& o) { mpfr_set(v_, o.v_, MPFR_RNDN); return *this; }
  Mpfr& operator=(double x) { mpfr_set_d(v_, x, MPFR_RNDN); return *this; }
  ~Mpfr() = default;  // nothing to free: the significand is a member

  // Rounds an arbitrary MPFR value to Bits bits (nearest).
  static Mpfr from(mpfr_srcptr x) { Mpfr r; mpfr_set(r.v_, x, MPFR_RNDN); return r; }

  mpfr_ptr get() { return v_; }
  mpfr_srcptr get() const { return v_; }

  Mpfr& operator+=(const Mpfr& b) { mpfr_add(v_, v_, b.v_, MPFR_RNDN); return *this; }
  Mpfr& operator-=(const Mpfr& b) { mpfr_sub(v_, v_, b.v_, MPFR_RNDN); return *this; }
  Mpfr& operator*=(const Mpfr& b) { mpfr_mul(v_, v_, b.v_, MPFR_RNDN); return *this; }
  Mpfr& operator/=(const Mpfr& b) { mpfr_div(v_, v_, b.v_, MPFR_RNDN); return *this; }
  Mpfr& operator+=(double b) { mpfr_add_d(v_, v_, b, MPFR_RNDN); return *this; }
  Mpfr& operator-=(double b) { mpfr_sub_d(v_, v_, b, MPFR_RNDN); return *this; }
  Mpfr& operator*=(double b) { mpfr_mul_d(v_, v_, b, MPFR_RNDN); return *this; }
  Mpfr& operator/=(double b) { mpfr_div_d(v_, v_, b, MPFR_RNDN); return *this; }

  friend Mpfr operator-(const Mpfr& a) { Mpfr r; mpfr_neg(r.v_, a.v_, MPFR_RNDN); return r; }
  friend Mpfr operator+(const Mpfr& a, const Mpfr& b) { Mpfr r; mpfr_add(r.v_, a.v_, b.v_, MPFR_RNDN); return r; }
  friend Mpfr operator-(const Mpfr& a, const Mpfr& b) { Mpfr r; mpfr_sub(r.v_, a.v_, b.v_, MPFR_RNDN); return r; }
  friend Mpfr operator*(const Mpfr& a, const Mpfr& b) { Mpfr r; mpfr_mul(r.v_, a.v_, b.v_, MPFR_RNDN); return r; }
  friend Mpfr operator/(const Mpfr& a, const Mpfr& b) { Mpfr r; mpfr_div(r.v_, a.v_, b.v_, MPFR_RNDN); return r; }
  friend Mpfr operator+(const Mpfr& a, double b) { Mpfr r; mpfr_add_d(r.v_, a.v_, b, MPFR_RNDN); return r; }
  friend Mpfr operator+(double a, const Mpfr& b) { Mpfr r; mpfr_add_d(r.v_, b.v_, a, MPFR_RNDN); return r; }
  friend Mpfr operator-(const Mpfr& a, double b) { Mpfr r; mpfr_sub_d(r.v_, a.v_, b, MPFR_RNDN); return r; }
  friend Mpfr operator-(double a, const Mpfr& b) { Mpfr r; mpfr_d_sub(r.v_, a, b.v_, MPFR_RNDN); return r; }
  friend Mpfr operator*(const Mpfr& a, double b) { Mpfr r; mpfr_mul_d(r.v_, a.v_, b, MPFR_RNDN); return r; }
  friend Mpfr operator*(double a, const Mpfr& b) { Mpfr r; mpfr_mul_d(r.v_, b.v_, a, MPFR_RNDN); return r; }
  friend Mpfr operator/(const Mpfr& a, double b) { Mpfr r; mpfr_div_d(r.v_, a.v_, b, MPFR_RNDN); return r; }
  friend Mpfr operator/(double a, const Mpfr& b) { Mpfr r; mpfr_d_div(r.v_, a, b.v_, MPFR_RNDN); return r; }

  // Comparisons (false when either side is NaN, as for double).
  friend bool operator==(const Mpfr& a, const Mpfr& b) { return mpfr_equal_p(a.v_, b.v_) != 0; }
  friend bool operator<(const Mpfr& a, const Mpfr& b) { return mpfr_less_p(a.v_, b.v_) != 0; }
  friend bool operator>(const Mpfr& a, const Mpfr& b) { return mpfr_greater_p(a.v_, b.v_) != 0; }
  friend bool operator<=(const Mpfr& a, const Mpfr& b) { return mpfr_lessequal_p(a.v_, b.v_) != 0; }
  friend bool operator>=(const Mpfr& a, const Mpfr& b) { return mpfr_greaterequal_p(a.v_, b.v_) != 0; }
  friend bool operator==(const Mpfr& a, double b) { return !mpfr_nan_p(a.v_) && b == b && mpfr_cmp_d(a.v_, b) == 0; }
  friend bool operator<(const Mpfr& a, double b) { return !mpfr_nan_p(a.v_) && b == b && mpfr_cmp_d(a.v_, b) < 0; }
  friend bool operator>(const Mpfr& a, double b) { return !mpfr_nan_p(a.v_) && b == b && mpfr_cmp_d(a.v_, b) > 0; }
  friend bool operator<=(const Mpfr& a, double b) { return !mpfr_nan_p(a.v_) && b == b && mpfr_cmp_d(a.v_, b) <= 0; }
  friend bool operator>=(const Mpfr& a, double b) { return !mpfr_nan_p(a.v_) && b == b && mpfr_cmp_d(a.v_, b) >= 0; }

  friend Mpfr sqrt(const Mpfr& a) { Mpfr r; mpfr_sqrt(r.v_, a.v_, MPFR_RNDN); return r; }
  friend Mpfr exp(const Mpfr& a) { Mpfr r; mpfr_exp(r.v_, a.v_, MPFR_RNDN); return r; }
  friend Mpfr expm1(const Mpfr& a) { Mpfr r; mpfr_expm1(r.v_, a.v_, MPFR_RNDN); return r; }
  friend Mpfr log(const Mpfr& a) { Mpfr r; mpfr_log(r.v_, a.v_, MPFR_RNDN); return r; }
  friend Mpfr log1p(const Mpfr& a) { Mpfr r; mpfr_log1p(r.v_, a.v_, MPFR_RNDN); return r; }
  // sin and cos together, each correctly rounded (MPFR reduces any argument exactly).
  friend void sin_cos(const Mpfr& a, Mpfr& s, Mpfr& c) { mpfr_sin_cos(s.v_, c.v_, a.v_, MPFR_RNDN); }
  friend Mpfr abs(const Mpfr& a) { Mpfr r; mpfr_abs(r.v_, a.v_, MPFR_RNDN); return r; }
  friend Mpfr fabs(const Mpfr& a) { return abs(a); }
  friend bool isfinite(const Mpfr& a) { return mpfr_number_p(a.v_) != 0; }
  friend double to_double(const Mpfr& a) { return mpfr_get_d(a.v_, MPFR_RNDN); }

 private:
  static constexpr size_t kLimbs = (static_cast<size_t>(Bits) + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS;
  void init() {
    mpfr_custom_init(limbs_, Bits);
    mpfr_custom_init_set(v_, MPFR_ZERO_KIND, 0, Bits, limbs_);
  }
  mpfr_t v_;
  mp_limb_t limbs_[kLimbs];
};

using Mpfr127 = Mpfr<127>;
using Mpfr256 = Mpfr<256>;

// Round-to-odd into double (the sticky bit kept for one later RNE into any narrower format).
template <int Bits>
double to_double_odd(const Mpfr<Bits>& x);

// x - x0 as two doubles t1 = RN(x - x0), t2 = RN(x - x0 - t1): with x0 within an ulp of x, x0 + t1
// + t2 carries x to about 159 bits (certification compares tiers below a double's precision).
template <int Bits>
void tail_parts(const Mpfr<Bits>& x, double x0, double& t1, double& t2);

// Decimal text with `digits` significant digits (for messages and test output).
template <int Bits>
std::string to_string(const Mpfr<Bits>& x, int digits = 40);

// Frees this thread's MPFR caches when it goes out of scope; put one at the top of a worker's body.
class MpfrThreadCacheGuard {
 public:
  MpfrThreadCacheGuard() = default;
  MpfrThreadCacheGuard(const MpfrThreadCacheGuard&) = delete;
  MpfrThreadCacheGuard& operator=(const MpfrThreadCacheGuard&) = delete;
  ~MpfrThreadCacheGuard();
};

// A std::thread running fn(args...) that frees its MPFR caches when fn returns or throws.
template <class Fn, class... Args>
std::thread mpfr_thread(Fn&& fn, Args&&... args) {
  return std::thread(
      [](std::decay_t<Fn> f, std::decay_t<Args>... a) {
        MpfrThreadCacheGuard guard;
        f(std::move(a)...);
      },
      std::forward<Fn>(fn), std::forward<Args>(args)...);
}

extern template class Mpfr<127>;
extern template class Mpfr<256>;

}  // namespace dg
