// The reference tiers: the scalar type a reference op is instantiated with.
//   f64      double, compensated reductions (FABsum, Dot2)       everything, full 1M-token runs
//   dd       our own double-double (FMA error-free transforms)   default oracle for f32 candidates
//   mpfr127  MPFR, 127-bit significand (MPFR's fast two-limb path) certification, escalation
//   mpfr256  MPFR, 256-bit significand                           certification of mpfr127
//   f128     __float128 (optional cross-check)
#pragma once

#include <optional>
#include <string_view>

namespace dg {

enum class Tier : uint8_t { f64, dd, mpfr127, mpfr256, f128 };

std::string_view tier_name(Tier t);
std::optional<Tier> parse_tier(std::string_view s);
// Significand bits of the tier's scalar (53, 106, 127, 256, 113).
int tier_precision(Tier t);
// The next tier up, used by --certify (f64 -> dd -> mpfr127 -> mpfr256; mpfr256 certifies against
// mpfr256 at a second, higher working precision is not available: nullopt).
std::optional<Tier> next_tier(Tier t);

}  // namespace dg
