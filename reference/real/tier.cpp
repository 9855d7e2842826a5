// The reference tiers: names, precisions and the certification ladder (see tier.h).
#include "reference/real/tier.h"

#include <array>

namespace dg {

namespace {
struct TierInfo {
  Tier tier;
  std::string_view name;
  int precision;
};
constexpr std::array<TierInfo, 5> kTiers = {{
    {Tier::f64, "f64", 53},
    {Tier::dd, "dd", 106},
    {Tier::mpfr127, "mpfr127", 127},
    {Tier::mpfr256, "mpfr256", 256},
    {Tier::f128, "f128", 113},
}};
}  // namespace

std::string_view tier_name(Tier t) {
  for (const TierInfo& i : kTiers) {
    if (i.tier == t) return i.name;
  }
  return "?";
}

std::optional<Tier> parse_tier(std::string_view s) {
  for (const TierInfo& i : kTiers) {
    if (i.name == s) return i.tier;
  }
  return std::nullopt;
}

int tier_precision(Tier t) {
  for (const TierInfo& i : kTiers) {
    if (i.tier == t) return i.precision;
  }
  return 0;
}

std::optional<Tier> next_tier(Tier t) {
  switch (t) {
    case Tier::f64: return Tier::dd;
    case Tier::dd: return Tier::mpfr127;
    case Tier::f128: return Tier::mpfr127;
    case Tier::mpfr127: return Tier::mpfr256;
    case Tier::mpfr256: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace dg
