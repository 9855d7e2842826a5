// Tests for harness/rng: Philox4x32-10 known answers, the documented key derivation, determinism
// under any thread partition, stream separation, and distribution sanity.
#include "harness/core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dg {
namespace {

using Block = std::array<uint32_t, 4>;

// Known-answer vectors from Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(Philox, KnownAnswerZero) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
}

TEST(Philox, KnownAnswerAllOnes) {
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(Philox, KnownAnswerPi) {
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// An independent transcription of the key derivation documented in harness/core/rng.cpp.
uint64_t fnv1a(uint64_t h, const std::string& bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}
std::array<uint32_t, 2> documented_key(uint64_t seed, const std::string& c, const std::string& n) {
  const std::string msg = le64(seed) + le64(c.size()) + c + le64(n.size()) + n;
  uint64_t z = fnv1a(0xcbf29ce484222325ull, msg);
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return {static_cast<uint32_t>(z), static_cast<uint32_t>(z >> 32)};
}

TEST(TensorRng, Fnv1aReferenceVectors) {
  // Published FNV-1a 64 test vectors, to make sure the transcription above is FNV-1a.
  EXPECT_EQ(fnv1a(0xcbf29ce484222325ull, ""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a(0xcbf29ce484222325ull, "a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a(0xcbf29ce484222325ull, "foobar"), 0x85944171f73967e8ull);
}

TEST(TensorRng, MatchesDocumentedDerivation) {
  const std::string c = "kda(T=64,H=2,K=32,V=32,regime=long_memory,dtype=bf16,seed=3)";
  const TensorRng rng(3, c, "q");
  const auto key = documented_key(3, c, "q");
  for (uint64_t i : {0ull, 1ull, 2ull, 0xffffffffull, 0x100000000ull, 0x123456789abcdefull}) {
    const Block w = philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0}, key);
    const uint64_t b = static_cast<uint64_t>(w[1]) << 32 | w[0];
    EXPECT_EQ(rng.bits(i), b) << "i=" << i;
    EXPECT_EQ(rng.uniform(i), static_cast<double>(b >> 11) * 0x1p-53) << "i=" << i;
    // normal(i) is Box-Muller on the block's two uniforms, with our own log and cos: it agrees with
    // the libm formula to a few ulps.
    const double u0 = static_cast<double>(b >> 11) * 0x1p-53;
    const double u1 = static_cast<double>((static_cast<uint64_t>(w[3]) << 32 | w[2]) >> 11) * 0x1p-53;
    const double expect = std::sqrt(-2.0 * std::log(1.0 - u0)) * std::cos(2.0 * std::numbers::pi * u1);
    EXPECT_NEAR(rng.normal(i), expect, 1e-14 * (1.0 + std::fabs(expect))) << "i=" << i;
  }
}

// Our log and cos (built from basic operations, so bitwise portable) against libm's on 2^18 blocks:
// the difference is a rounding-level one, relative to the Box-Muller radius.
TEST(TensorRng, NormalAgreesWithLibmBoxMuller) {
  const TensorRng rng(11, "normal_vs_libm", "x");
  const auto key = documented_key(11, "normal_vs_libm", "x");
  double worst = 0;
  for (uint64_t i = 0; i < (1u << 18); ++i) {
    const Block w = philox4x32_10({static_cast<uint32_t>(i), 0, 0, 0}, key);
    const double u0 = static_cast<double>((static_cast<uint64_t>(w[1]) << 32 | w[0]) >> 11) * 0x1p-53;
    const double u1 = static_cast<double>((static_cast<uint64_t>(w[3]) << 32 | w[2]) >> 11) * 0x1p-53;
    const double radius = std::sqrt(-2.0 * std::log(1.0 - u0));
    const double expect = radius * std::cos(2.0 * std::numbers::pi * u1);
    worst = std::max(worst, std::fabs(rng.normal(i) - expect) / std::max(radius, 0x1p-30));
  }
  EXPECT_LT(worst, 8 * 0x1p-52);
}

// Frozen values: the stream is part of every stored baseline, so any change to the key derivation,
// the counter layout or the conversions (including our log and cos) must show up here.
TEST(TensorRng, FrozenStream) {
  const TensorRng rng(0, "kda(T=64,H=2,K=32,V=32,regime=long_memory,dtype=bf16,seed=0)", "q");
  EXPECT_EQ(rng.bits(0), 0xc30832c16307dd8dull);
  EXPECT_EQ(rng.bits(1), 0x3c633d50443a67c0ull);
  EXPECT_EQ(rng.bits(2), 0xa1006e57e979e597ull);
  EXPECT_EQ(rng.uniform(0), 0x1.86106582c60fbp-1);
  EXPECT_EQ(rng.uniform(1), 0x1.e319ea8221d3p-3);
  EXPECT_EQ(rng.normal(0), 0x1.7fbd9ed304477p+0);
  EXPECT_EQ(rng.normal(1), 0x1.6dfaca576c081p-1);
  EXPECT_EQ(rng.normal(2), 0x1.617236f3a7a4p+0);
}

TEST(TensorRng, SeparatorsMakeFieldsUnambiguous) {
  EXPECT_NE(TensorRng(0, "ab", "c").bits(0), TensorRng(0, "a", "bc").bits(0));
  EXPECT_NE(TensorRng(0, "", "abc").bits(0), TensorRng(0, "abc", "").bits(0));
  using namespace std::string_view_literals;
  EXPECT_NE(TensorRng(0, "a\0b"sv, "c").bits(0), TensorRng(0, "a"sv, "\0bc"sv).bits(0));
  EXPECT_NE(TensorRng(0, "a\0"sv, "b").bits(0), TensorRng(0, "a"sv, "\0b"sv).bits(0));
}

TEST(TensorRng, DifferentInputsGiveDifferentStreams) {
  const std::string c = "kda(T=64)";
  const std::vector<TensorRng> rngs = {
      TensorRng(0, c, "q"), TensorRng(0, c, "k"), TensorRng(1, c, "q"),
      TensorRng(0, "kda(T=65)", "q"), TensorRng(1ull << 32, c, "q")};
  constexpr uint64_t n = 256;
  std::set<uint64_t> seen;
  for (const TensorRng& r : rngs)
    for (uint64_t i = 0; i < n; ++i) seen.insert(r.bits(i));
  // 1280 64-bit draws: a single collision would be a one-in-10^13 event.
  EXPECT_EQ(seen.size(), rngs.size() * n);
}

TEST(TensorRng, TwoObjectsAgree) {
  const TensorRng a(7, "kda(T=128)", "v"), b(7, "kda(T=128)", "v");
  for (uint64_t i = 0; i < 10000; ++i) {
    ASSERT_EQ(a.bits(i), b.bits(i));
    ASSERT_EQ(std::bit_cast<uint64_t>(a.normal(i)), std::bit_cast<uint64_t>(b.normal(i)));
  }
}

// The batched paths are the one-element calls, bit for bit: at any start (aligned or not with the
// 8-lane groups), with a tail, across the 2^32 boundary of the counter's low word, and at the
// extremes of the uniform that feed the logarithm (u0 near 0 and near 1).
TEST(TensorRng, BatchesEqualSingleElements) {
  const TensorRng rng(9, "kda(T=77)", "q");
  for (uint64_t i0 : {uint64_t{0}, uint64_t{3}, uint64_t{1000}, (uint64_t{1} << 32) - 5, uint64_t{1} << 40}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1003}}) {
      std::vector<double> u(n), z(n);
      rng.uniform(i0, u);
      rng.normal(i0, z);
      for (size_t j = 0; j < n; ++j) {
        ASSERT_EQ(std::bit_cast<uint64_t>(u[j]), std::bit_cast<uint64_t>(rng.uniform(i0 + j))) << i0 << "+" << j;
        ASSERT_EQ(std::bit_cast<uint64_t>(z[j]), std::bit_cast<uint64_t>(rng.normal(i0 + j))) << i0 << "+" << j;
      }
    }
  }
  // A long run: every lane position and the whole range of both uniforms get exercised.
  constexpr size_t n = 1 << 18;
  std::vector<double> z(n);
  rng.normal(12345, z);
  for (size_t j = 0; j < n; ++j)
    ASSERT_EQ(std::bit_cast<uint64_t>(z[j]), std::bit_cast<uint64_t>(rng.normal(12345 + j))) << j;
}

struct Streams {
  std::vector<uint64_t> bits;
  std::vector<double> uniform, normal;
};

// Fills element i of each stream from `threads` threads; `interleaved` hands thread t the indices
// t, t + threads, ...; otherwise thread t gets one contiguous slice. Threads run in any order.
Streams generate(const TensorRng& rng, size_t n, int threads, bool interleaved) {
  Streams s{std::vector<uint64_t>(n), std::vector<double>(n), std::vector<double>(n)};
  auto fill = [&](size_t i) {
    s.bits[i] = rng.bits(i);
    s.uniform[i] = rng.uniform(i);
    s.normal[i] = rng.normal(i);
  };
  std::vector<std::thread> pool;
  const size_t T = static_cast<size_t>(threads);
  for (size_t t = 0; t < T; ++t) {
    pool.emplace_back([&, t] {
      if (interleaved) {
        for (size_t i = t; i < n; i += T) fill(i);
      } else {
        const size_t lo = n * t / T, hi = n * (t + 1) / T;
        for (size_t i = hi; i-- > lo;) fill(i);   // backwards, to vary the order too
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return s;
}

TEST(TensorRng, BitwiseIdenticalAcrossThreadPartitions) {
  constexpr size_t n = 1 << 20;
  const TensorRng rng(42, "kda(T=1048576,H=1,K=1,V=1)", "k");
  const Streams ref = generate(rng, n, 1, false);
  for (int threads : {1, 2, 8}) {
    for (bool interleaved : {false, true}) {
      const Streams s = generate(rng, n, threads, interleaved);
      EXPECT_EQ(std::memcmp(s.bits.data(), ref.bits.data(), n * sizeof(uint64_t)), 0)
          << threads << " threads, interleaved=" << interleaved;
      EXPECT_EQ(std::memcmp(s.uniform.data(), ref.uniform.data(), n * sizeof(double)), 0)
          << threads << " threads, interleaved=" << interleaved;
      EXPECT_EQ(std::memcmp(s.normal.data(), ref.normal.data(), n * sizeof(double)), 0)
          << threads << " threads, interleaved=" << interleaved;
    }
  }
}

// Moments of n = 2^20 draws. The stream is fixed, so these are not flaky; the bounds are about
// five standard errors so that any correct generator passes and a biased conversion fails.
TEST(TensorRng, UniformMomentsAndRange) {
  constexpr uint64_t n = 1 << 20;
  const TensorRng rng(1, "uniform_check", "x");
  double sum = 0, sum2 = 0, lo = 1, hi = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double u = rng.uniform(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum2 += u * u;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 1.5e-3);           // se = sqrt(1/12/n) = 2.8e-4
  EXPECT_NEAR(var, 1.0 / 12.0, 4e-4);       // se = sqrt((1/80 - 1/144)/n) = 7.3e-5
  EXPECT_LT(lo, 1e-5);
  EXPECT_GT(hi, 1 - 1e-5);
  // The range helper maps onto [lo, hi).
  for (uint64_t i = 0; i < 1000; ++i) {
    const double x = rng.uniform(i, -2.0, 3.0);
    EXPECT_GE(x, -2.0);
    EXPECT_LT(x, 3.0);
  }
}

TEST(TensorRng, UniformExtremesOfTheConversion) {
  // uniform is (bits >> 11) * 2^-53: the largest value is 1 - 2^-53, never 1.
  const double largest = static_cast<double>(~0ull >> 11) * 0x1p-53;
  EXPECT_LT(largest, 1.0);
  EXPECT_EQ(largest, 1.0 - 0x1p-53);
}

TEST(TensorRng, NormalMoments) {
  constexpr uint64_t n = 1 << 20;
  const TensorRng rng(2, "normal_check", "x");
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  uint64_t beyond_196 = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double x = rng.normal(i);
    ASSERT_TRUE(std::isfinite(x));
    ASSERT_LE(std::fabs(x), 8.58);    // sqrt(-2 ln 2^-53): the largest radius there is
    s1 += x;
    s2 += x * x;
    s3 += x * x * x;
    s4 += x * x * x * x;
    beyond_196 += std::fabs(x) > 1.959963984540054;
  }
  const double mean = s1 / n, m2 = s2 / n, m3 = s3 / n, m4 = s4 / n;
  EXPECT_NEAR(mean, 0.0, 5e-3);       // se = 1/sqrt(n) = 9.8e-4
  EXPECT_NEAR(m2, 1.0, 7e-3);         // se = sqrt(2/n) = 1.4e-3
  EXPECT_NEAR(m3, 0.0, 1.2e-2);       // se = sqrt(15/n) = 3.8e-3
  EXPECT_NEAR(m4, 3.0, 5e-2);         // se = sqrt(96/n) = 9.6e-3
  EXPECT_NEAR(static_cast<double>(beyond_196) / n, 0.05, 1.1e-3);   // se = 2.1e-4
}

}  // namespace
}  // namespace dg
