// Guarded outputs, poisons, input fingerprints and XXH64 (harness/isolation/guard.h).
#include <cmath>
#include <cstring>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/isolation/guard.h"

namespace dg {
namespace {

using ::testing::HasSubstr;

TEST(Hash, MatchesPublishedXxh64Vectors) {
  EXPECT_EQ(hash_bytes("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(hash_bytes("abc", 3), 0x44BC2CF5AD770999ull);
  const char* s = "Nobody inspects the spammish repetition";   // >= 32 bytes: the 4-lane path
  EXPECT_EQ(hash_bytes(s, std::strlen(s)), 0xFBCEA83C8A378BF1ull);
  EXPECT_EQ(hash_bytes("xxhash", 6, 20141025), 0xB559B98D844E0635ull);
}

TEST(Hash, EveryByteAndTheHeaderMatter) {
  Tensor t(DType::f32, {3, 5});
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, 0.25 * static_cast<double>(i));
  const uint64_t h = hash_tensor(t);
  for (size_t byte = 0; byte < t.nbytes(); byte += 7) {
    Tensor u = t.clone();
    u.bytes()[byte] ^= std::byte{1};
    EXPECT_NE(hash_tensor(u), h) << "byte " << byte;
  }
  Tensor same_bytes_other_shape(DType::f32, {5, 3});
  std::memcpy(same_bytes_other_shape.bytes(), t.bytes(), t.nbytes());
  EXPECT_NE(hash_tensor(same_bytes_other_shape), h);
  EXPECT_EQ(hash_tensor(t.clone()), h);
}

TEST(Poison, BitsPerFormat) {
  EXPECT_EQ(poison_bits(DType::f32, Poison::quiet_nan), 0x7FC00000u);
  EXPECT_EQ(poison_bits(DType::f32, Poison::negative_max), 0xFF7FFFFFu);
  EXPECT_EQ(poison_bits(DType::bf16, Poison::quiet_nan), 0x7FC0u);
  EXPECT_EQ(poison_bits(DType::bf16, Poison::negative_max), 0xFF7Fu);
  EXPECT_EQ(poison_bits(DType::f16, Poison::quiet_nan), 0x7E00u);
  EXPECT_EQ(poison_bits(DType::f16, Poison::negative_max), 0xFBFFu);
  EXPECT_EQ(poison_bits(DType::f64, Poison::negative_max), 0xFFEFFFFFFFFFFFFFull);
  EXPECT_EQ(poison_bits(DType::e4m3, Poison::negative_max), 0xFEu);
  EXPECT_EQ(poison_bits(DType::e5m2, Poison::negative_max), 0xFBu);
  EXPECT_EQ(poison_bits(DType::i32, Poison::quiet_nan), 0x80000000u);
  for (DType t : kFloatDTypes) {
    EXPECT_TRUE(std::isnan(decode(t, poison_bits(t, Poison::quiet_nan)))) << name(t);
    EXPECT_EQ(decode(t, poison_bits(t, Poison::negative_max)), -info(t).max_finite) << name(t);
  }
  EXPECT_EQ(poison_for_run(0), Poison::quiet_nan);
  EXPECT_EQ(poison_for_run(1), Poison::negative_max);
  EXPECT_EQ(poison_for_run(2), Poison::quiet_nan);
}

TEST(GuardedTensor, ViewLiesBetweenIntactGuardsAndIsPoisoned) {
  for (DType t : {DType::f32, DType::bf16, DType::f64, DType::e4m3}) {
    GuardedTensor g(t, {2, 3, 5}, Poison::negative_max);
    const Tensor& v = g.tensor();
    EXPECT_EQ(v.dtype(), t);
    EXPECT_EQ(v.shape(), (std::vector<int64_t>{2, 3, 5}));
    EXPECT_EQ(v.bytes(), g.data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.bytes()) % 64, 0u);
    EXPECT_EQ(g.nbytes(), v.nbytes());
    for (int64_t i = 0; i < v.numel(); ++i) EXPECT_EQ(v.get(i), -info(t).max_finite);
    EXPECT_EQ(g.check_guards(), "");
  }
  GuardedTensor nan(DType::f32, {4}, Poison::quiet_nan);
  for (int64_t i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(nan.tensor().get(i)));
}

TEST(GuardedTensor, SeesWritesJustOutsideAndNotInside) {
  GuardedTensor g(DType::f32, {16}, Poison::quiet_nan);
  Tensor& v = g.tensor();
  for (int64_t i = 0; i < 16; ++i) v.set(i, 1.0);
  EXPECT_EQ(g.check_guards(), "");

  const float one = 1.0f;
  std::memcpy(v.bytes() + v.nbytes(), &one, 4);   // one element past the end
  EXPECT_THAT(g.check_guards(), HasSubstr("after the end (first at end+0)"));

  GuardedTensor h(DType::f32, {16}, Poison::quiet_nan);
  std::memset(h.tensor().bytes() - 8, 0, 1);        // one byte, 8 before the start
  EXPECT_THAT(h.check_guards(), HasSubstr("1 bytes overwritten before the start (nearest at start-8)"));

  GuardedTensor far(DType::f32, {16}, Poison::quiet_nan);
  std::memset(far.tensor().bytes() + far.nbytes() + GuardedTensor::kGuardBytes - 1, 0xAB, 1);
  EXPECT_THAT(far.check_guards(), HasSubstr("end+4095"));
}

TEST(GuardedTensor, PatternHasNoRunsOfEqualBytes) {
  for (size_t i = 0; i + 1 < GuardedTensor::kGuardBytes; ++i)
    ASSERT_NE(GuardedTensor::guard_byte(i), GuardedTensor::guard_byte(i + 1));
}

TEST(GuardedTensor, CopiesShareTheBlockAndKeepItAlive) {
  Tensor copy;
  const std::byte* data = nullptr;
  {
    GuardedTensor g(DType::f32, {8}, Poison::quiet_nan);
    copy = g.tensor();
    data = g.data();
  }
  EXPECT_EQ(copy.bytes(), data);
  copy.set(7, 3.0);   // still valid memory after the GuardedTensor is gone
  EXPECT_EQ(copy.get(7), 3.0);
}

TEST(InputSnapshot, SeesContentsReplacementAdditionAndRemoval) {
  TensorMap in;
  in["q"] = Tensor(DType::f32, {4, 4});
  in["k"] = Tensor(DType::bf16, {4, 4});
  const InputSnapshot s = snapshot_inputs(in);
  EXPECT_EQ(compare_inputs(s, in), "");

  TensorMap mutated = in;   // shares storage
  mutated["k"].set(3, 1.0);
  EXPECT_THAT(compare_inputs(s, mutated), HasSubstr("k: contents changed"));
  mutated["k"].set(3, 0.0);
  EXPECT_EQ(compare_inputs(s, mutated), "");

  TensorMap replaced = in;
  replaced["q"] = in.at("q").clone();   // same bytes, other storage
  EXPECT_THAT(compare_inputs(s, replaced), HasSubstr("q: tensor replaced"));

  TensorMap added = in;
  added["v"] = Tensor(DType::f32, {1});
  EXPECT_THAT(compare_inputs(s, added), HasSubstr("v: added"));

  TensorMap removed = in;
  removed.erase("q");
  EXPECT_THAT(compare_inputs(s, removed), HasSubstr("q: removed"));
}

TEST(StorageOverlaps, ByteRanges) {
  GuardedTensor g(DType::f32, {8}, Poison::quiet_nan);
  Tensor a = g.tensor();
  Tensor b = a;
  EXPECT_TRUE(storage_overlaps(a, b));
  EXPECT_FALSE(storage_overlaps(a, a.clone()));
  EXPECT_FALSE(storage_overlaps(a, Tensor()));
}

}  // namespace
}  // namespace dg
