// Mpfr<Bits>: conversions out of MPFR and the per-thread cache guard (see mpfr_real.h).
#include "reference/real/mpfr_real.h"

#include <cmath>
#include <vector>

#include "harness/core/dtype.h"

namespace dg {

template <int Bits>
double to_double_odd(const Mpfr<Bits>& x) {
  return round_to_odd(x.get());
}

template <int Bits>
void tail_parts(const Mpfr<Bits>& x, double x0, double& t1, double& t2) {
  if (!mpfr_number_p(x.get()) || !std::isfinite(x0)) {
    t1 = 0.0;
    t2 = 0.0;
    return;
  }
  // x - x0 is exact at Bits bits: x0 is within an ulp (at 53 bits) of x, so the difference has no
  // bits above x's 53rd and none below x's last.
  mpfr_t d;
  mpfr_init2(d, Bits);
  mpfr_sub_d(d, x.get(), x0, MPFR_RNDN);
  t1 = mpfr_get_d(d, MPFR_RNDN);
  mpfr_sub_d(d, d, t1, MPFR_RNDN);
  t2 = mpfr_get_d(d, MPFR_RNDN);
  mpfr_clear(d);
}

template <int Bits>
std::string to_string(const Mpfr<Bits>& x, int digits) {
  if (digits < 1) digits = 1;
  std::vector<char> buf(static_cast<size_t>(digits) + 32);
  mpfr_snprintf(buf.data(), buf.size(), "%.*Rg", digits, x.get());
  return std::string(buf.data());
}

MpfrThreadCacheGuard::~MpfrThreadCacheGuard() { mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE); }

template class Mpfr<127>;
template class Mpfr<256>;
template double to_double_odd(const Mpfr<127>&);
template double to_double_odd(const Mpfr<256>&);
template void tail_parts(const Mpfr<127>&, double, double&, double&);
template void tail_parts(const Mpfr<256>&, double, double&, double&);
template std::string to_string(const Mpfr<127>&, int);
template std::string to_string(const Mpfr<256>&, int);

}  // namespace dg
