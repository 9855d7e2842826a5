// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11). Element i of tensor "q" of a case
// is a pure function of (seed, case string, tensor name, i): the same for any thread count, any
// order of generation and any machine, so inputs never need to be stored to be reproduced.
#pragma once

#include <array>
#include <span>
#include <cstdint>
#include <string_view>

namespace dg {

// One Philox4x32-10 block: 10 rounds of the 4x32 bijection keyed by `key`.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The stream of one tensor of one case.
class TensorRng {
 public:
  TensorRng(uint64_t seed, std::string_view case_str, std::string_view tensor_name);
  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t i) const;
  // Uniform in [lo, hi).
  double uniform(uint64_t i, double lo, double hi) const { return lo + (hi - lo) * uniform(i); }
  // Standard normal (Box-Muller on the two 53-bit uniforms of element i's block).
  double normal(uint64_t i) const;
  // 64 random bits of element i.
  uint64_t bits(uint64_t i) const;
  // Elements i0 .. i0 + out.size() - 1 at once, bitwise the same as the one-element calls (the
  // lanes are independent, so the loops vectorize: generators fill tensors of 10^8 elements).
  void uniform(uint64_t i0, std::span<double> out) const;
  void normal(uint64_t i0, std::span<double> out) const;

 private:
  std::array<uint32_t, 2> key_;
};

}  // namespace dg
