// Tests for harness/tensor: construction and its errors, alignment, element and bulk access (the
// bulk paths must equal encode/decode element by element), clone and convert.
#include "harness/core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace dg {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DType kAllDTypes[] = {DType::f64,  DType::f32,  DType::tf32, DType::bf16, DType::f16,
                                DType::e4m3, DType::e5m2, DType::i64,  DType::i32};

bool same(double a, double b) {
  if (a != a || b != b) return a != a && b != b;
  return a == b && std::signbit(a) == std::signbit(b);
}

uint64_t raw(const Tensor& t, int64_t i) {
  const int w = info(t.dtype()).storage_bytes;
  uint64_t b = 0;
  std::memcpy(&b, t.bytes() + i * w, static_cast<size_t>(w));   // little-endian
  return b;
}

// Doubles that exercise rounding in every format: random magnitudes from far below the f32
// subnormals to past the f32 range, exact f16/bf16/fp8 midpoints and their neighbours, zeros,
// infinities, NaN.
std::vector<double> probe_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v = {0.0, -0.0, kInf, -kInf, kNaN, 448.0, 464.0, 465.0, 1e9, 65520.0, 61440.0,
                           1 + 0x1p-11, 1 + 0x1p-8, 0x1p-25, 0x1p-150, 1e-300, 1e300};
  while (v.size() < n) {
    const int e = -160 + static_cast<int>(rng() % 300);
    double x = std::ldexp(1.0 + std::ldexp(static_cast<double>(rng() >> 12), -52), e);
    if (rng() % 4 != 0) {
      // A tie of a format with fb fraction bits (e5m2, e4m3, bf16, f16/tf32, f32), exact or a
      // little off it: 2^-40 relative is below f32's precision, so rounding through f32 first
      // would turn it into an exact tie.
      const int fbs[] = {2, 3, 7, 10, 23};
      const int fb = fbs[rng() % 5];
      const double tie = std::ldexp(std::floor(std::ldexp(x, fb - e)) + 0.5, e - fb);
      switch (rng() % 4) {
        case 0: x = tie; break;
        case 1: x = tie + std::ldexp(1.0, e - 40); break;
        case 2: x = tie - std::ldexp(1.0, e - 40); break;
        default: x = std::nextafter(tie, (rng() & 1) ? kInf : 0.0); break;
      }
    }
    v.push_back((rng() & 1) ? -x : x);
  }
  return v;
}

TEST(Tensor, ConstructionShapeAndAlignment) {
  const Tensor none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.numel(), 0);
  for (const DType t : kAllDTypes) {
    for (const auto& shape : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {3, 5}, {2, 3, 7}, {1, 65, 4, 3}}) {
      const Tensor x(t, shape);
      int64_t n = 1;
      for (const int64_t d : shape) n *= d;
      EXPECT_FALSE(x.empty());
      EXPECT_EQ(x.numel(), n);
      EXPECT_EQ(x.rank(), static_cast<int>(shape.size()));
      EXPECT_EQ(x.nbytes(), static_cast<size_t>(n * info(t).storage_bytes));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(x.bytes()) % 64, 0u);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(raw(x, i), 0u);   // zero-filled
    }
  }
  const Tensor x(DType::bf16, {1, 4096, 4, 128});
  EXPECT_EQ(x.shape_str(), "[1,4096,4,128]");
  EXPECT_EQ(x.dim(3), 128);
  EXPECT_THROW(x.dim(4), std::out_of_range);
  EXPECT_EQ(Tensor(DType::f32, {}).shape_str(), "[]");
  EXPECT_EQ(Tensor(DType::f32, {}).numel(), 1);   // a scalar
}

TEST(Tensor, BadShapesThrowNamingTheShape) {
  try {
    Tensor(DType::f32, {2, -1, 3});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2,-1,3]"), std::string::npos) << e.what();
  }
  try {
    Tensor(DType::f32, {int64_t{1} << 40, int64_t{1} << 40});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[1099511627776,1099511627776]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor(DType::f64, {int64_t{1} << 61}), std::invalid_argument);   // bytes overflow
}

TEST(Tensor, TypedDataChecksWidth) {
  Tensor x(DType::bf16, {4});
  EXPECT_NO_THROW(x.data<uint16_t>());
  EXPECT_THROW(x.data<float>(), std::logic_error);
  const Tensor& cx = x;
  EXPECT_THROW(cx.data<double>(), std::logic_error);
  Tensor y(DType::f32, {2});
  y.data<float>()[1] = 2.5f;
  EXPECT_EQ(y.get(1), 2.5);
  EXPECT_THROW(Tensor(DType::e4m3, {1}).data<uint16_t>(), std::logic_error);
}

// set/get and write/read agree with round_to/encode/decode, element by element, for every format.
TEST(Tensor, ElementAndBulkPathsMatchEncode) {
  const std::vector<double> values = probe_values(200000, 17);
  for (const DType t : kFloatDTypes) {
    SCOPED_TRACE(std::string(name(t)));
    const auto n = static_cast<int64_t>(values.size());
    Tensor bulk(t, {n});
    bulk.write(0, values);
    Tensor single(t, {n});
    std::vector<double> back(values.size());
    bulk.read(0, back);
    int failures = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = values[static_cast<size_t>(i)];
      single.set(i, x);
      const double want = round_to(t, x);
      const bool ok = std::isnan(x) ? std::isnan(bulk.get(i)) && std::isnan(single.get(i))
                                    : raw(bulk, i) == encode(t, x) && raw(single, i) == encode(t, x) &&
                                          same(single.get(i), want) && same(back[static_cast<size_t>(i)], want);
      if (!ok && ++failures <= 10) {
        ADD_FAILURE() << "x=" << x << " bulk bits " << std::hex << raw(bulk, i) << " set bits " << raw(single, i)
                      << " encode " << encode(t, x);
      }
    }
    EXPECT_EQ(failures, 0);
  }
}

// read decodes every bit pattern of the 8- and 16-bit formats exactly, at any offset.
TEST(Tensor, ReadDecodesEveryPattern) {
  for (const DType t : {DType::bf16, DType::f16, DType::e4m3, DType::e5m2}) {
    const int64_t count = int64_t{1} << (8 * info(t).storage_bytes);
    Tensor x(t, {count});
    for (int64_t b = 0; b < count; ++b) {
      const auto v = static_cast<uint64_t>(b);
      std::memcpy(x.bytes() + b * info(t).storage_bytes, &v, static_cast<size_t>(info(t).storage_bytes));
    }
    for (const int64_t offset : {int64_t{0}, int64_t{3}}) {
      std::vector<double> out(static_cast<size_t>(count - offset));
      x.read(offset, out);
      for (int64_t b = offset; b < count; ++b) {
        ASSERT_TRUE(same(out[static_cast<size_t>(b - offset)], decode(t, static_cast<uint64_t>(b))))
            << name(t) << " " << b;
        ASSERT_TRUE(same(x.get(b), decode(t, static_cast<uint64_t>(b))));
      }
    }
  }
}

TEST(Tensor, OffsetsAndBounds) {
  Tensor x(DType::f16, {10});
  const std::vector<double> in = {1.0, 2.0, 3.0};
  x.write(7, in);
  EXPECT_EQ(x.get(6), 0.0);
  EXPECT_EQ(x.get(9), 3.0);
  std::vector<double> out(4);
  x.read(6, out);
  EXPECT_EQ(out, (std::vector<double>{0.0, 1.0, 2.0, 3.0}));
  EXPECT_THROW(x.write(8, in), std::out_of_range);
  EXPECT_THROW(x.read(-1, out), std::out_of_range);
  EXPECT_THROW(x.read(7, out), std::out_of_range);
  EXPECT_THROW(x.get(10), std::out_of_range);
  EXPECT_THROW(x.set(-1, 0.0), std::out_of_range);
  EXPECT_NO_THROW(x.read(10, std::span<double>()));
}

TEST(Tensor, Integers) {
  Tensor a(DType::i32, {4});
  a.set(0, -7);
  a.set(1, 2147483647.0);
  a.set(2, -2147483648.0);
  EXPECT_EQ(a.get(0), -7.0);
  EXPECT_EQ(a.data<int32_t>()[1], 2147483647);
  EXPECT_EQ(a.get(2), -2147483648.0);
  EXPECT_THROW(a.set(3, 1.5), std::invalid_argument);
  EXPECT_THROW(a.set(3, 2147483648.0), std::invalid_argument);
  EXPECT_THROW(a.set(3, kNaN), std::invalid_argument);
  const std::vector<double> bad = {1.0, 0.25};
  EXPECT_THROW(a.write(0, bad), std::invalid_argument);
  const std::vector<double> good = {5.0, -6.0};
  a.write(2, good);
  std::vector<double> out(4);
  a.read(0, out);
  EXPECT_EQ(out, (std::vector<double>{-7.0, 2147483647.0, 5.0, -6.0}));
  Tensor b(DType::i64, {2});
  b.set(0, 0x1p62);
  b.set(1, -0x1p63);
  EXPECT_EQ(b.data<int64_t>()[0], int64_t{1} << 62);
  EXPECT_EQ(b.data<int64_t>()[1], std::numeric_limits<int64_t>::min());
  EXPECT_THROW(b.set(0, 0x1p63), std::invalid_argument);
}

TEST(Tensor, CopySharesCloneDoesNot) {
  Tensor a(DType::bf16, {2, 3});
  a.set(4, 1.5);
  Tensor shared = a;
  Tensor deep = a.clone();
  EXPECT_EQ(deep.shape(), a.shape());
  EXPECT_EQ(deep.dtype(), DType::bf16);
  EXPECT_NE(deep.bytes(), a.bytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(deep.bytes()) % 64, 0u);
  EXPECT_EQ(deep.get(4), 1.5);
  deep.set(4, -2.0);
  shared.set(0, 3.0);
  EXPECT_EQ(a.get(4), 1.5);
  EXPECT_EQ(a.get(0), 3.0);
  EXPECT_EQ(deep.get(0), 0.0);
  EXPECT_TRUE(Tensor().clone().empty());
}

TEST(Tensor, ConvertRoundsOnceAndWidensExactly) {
  const std::vector<double> values = probe_values(5000, 23);
  const auto n = static_cast<int64_t>(values.size());
  Tensor f64(DType::f64, {n});
  f64.write(0, values);
  for (const DType t : kFloatDTypes) {
    SCOPED_TRACE(std::string(name(t)));
    const Tensor narrow = convert(f64, t);
    ASSERT_EQ(narrow.dtype(), t);
    ASSERT_EQ(narrow.shape(), f64.shape());
    const Tensor wide = convert(narrow, DType::f64);
    for (int64_t i = 0; i < n; ++i) {
      const double x = values[static_cast<size_t>(i)];
      ASSERT_TRUE(same(narrow.get(i), round_to(t, x))) << x;
      ASSERT_TRUE(same(wide.get(i), narrow.get(i))) << x;   // widening is exact
    }
    if (t == DType::f64) continue;
    const Tensor again = convert(convert(narrow, DType::f32), t);   // through f32 and back: exact
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isnan(narrow.get(i)) || raw(again, i) == raw(narrow, i)) << i;
    }
  }
  // f32 -> bf16 rounds from the f32 values, not from anything wider.
  Tensor f32(DType::f32, {2});
  f32.set(0, 1 + 0x1p-8 + 0x1p-20);
  f32.set(1, 1 + 0x1p-8);
  const Tensor bf = convert(f32, DType::bf16);
  EXPECT_EQ(bf.get(0), 1 + 0x1p-7);
  EXPECT_EQ(bf.get(1), 1.0);
  EXPECT_EQ(convert(f32, DType::e4m3).get(0), 1.0);
  EXPECT_TRUE(convert(Tensor(), DType::f32).empty());
}

TEST(Tensor, ConvertIntegers) {
  // i64 beyond 2^53 rounds once: 2^60 + 2^36 + 1 is just above an f32 tie (ulp 2^37), so it rounds
  // up; going through the nearest double (2^60 + 2^36, the tie itself) would give 2^60.
  Tensor big(DType::i64, {3});
  big.data<int64_t>()[0] = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  big.data<int64_t>()[1] = std::numeric_limits<int64_t>::max();
  big.data<int64_t>()[2] = -7;
  const Tensor f = convert(big, DType::f32);
  EXPECT_EQ(f.get(0), 0x1p60 + 0x1p37);
  EXPECT_EQ(f.get(1), 0x1p63);
  EXPECT_EQ(f.get(2), -7.0);
  EXPECT_EQ(convert(big, DType::bf16).get(1), 0x1p63);
  EXPECT_EQ(convert(big, DType::f64).get(0), 0x1p60 + 0x1p36);
  EXPECT_THROW(convert(big, DType::i32), std::out_of_range);

  Tensor g(DType::f32, {4});
  const std::vector<double> v = {2.5, 3.5, -0.5, 1e6};
  g.write(0, v);
  const Tensor gi = convert(g, DType::i32);
  EXPECT_EQ(gi.data<int32_t>()[0], 2);   // nearest, ties to even
  EXPECT_EQ(gi.data<int32_t>()[1], 4);
  EXPECT_EQ(gi.data<int32_t>()[2], 0);
  EXPECT_EQ(gi.data<int32_t>()[3], 1000000);
  const Tensor gl = convert(gi, DType::i64);
  EXPECT_EQ(gl.data<int64_t>()[3], 1000000);
  g.set(0, 1e10);
  EXPECT_THROW(convert(g, DType::i32), std::out_of_range);
  g.set(0, kNaN);
  EXPECT_THROW(convert(g, DType::i64), std::out_of_range);
}

}  // namespace
}  // namespace dg

namespace dg {
namespace {

// A stand-in device: host memory behind DeviceOps, counting what the hooks do, so the device path of
// Tensor is tested without a GPU (candidates/cuda registers the real CUDA functions).
struct FakeDevice {
  static inline int allocs = 0, frees = 0, copies = 0;
  static void* alloc(size_t n) {
    ++allocs;
    return ::operator new(n);
  }
  static void zero(void* p, size_t n) { std::memset(p, 0, n); }
  static void free(void* p) {
    ++frees;
    ::operator delete(p);
  }
  static void copy(void* dst, Device, const void* src, Device, size_t n) {
    ++copies;
    std::memcpy(dst, src, n);
  }
};

TEST(Tensor, DeviceTensorsGoThroughTheRegisteredOps) {
  // Before registration (a build without CUDA): a clear error, no half-made tensor.
  if (!has_device_ops(Device::cuda)) {
    try {
      Tensor t(DType::f32, {4}, Device::cuda);
      FAIL() << "made a device tensor without device support";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("no cuda memory"), std::string::npos) << e.what();
    }
  }
  DeviceOps ops;
  ops.alloc = FakeDevice::alloc;
  ops.zero = FakeDevice::zero;
  ops.free = FakeDevice::free;
  ops.copy = FakeDevice::copy;
  register_device_ops(Device::cuda, ops);
  {
    Tensor h(DType::bf16, {2, 3});
    for (int64_t i = 0; i < h.numel(); ++i) h.set(i, 0.5 * static_cast<double>(i));
    Tensor d = h.to(Device::cuda);
    EXPECT_EQ(d.device(), Device::cuda);
    EXPECT_EQ(d.shape(), h.shape());
    EXPECT_EQ(FakeDevice::copies, 1);
    // Host accessors refuse device memory, naming the way out.
    try {
      (void)d.get(0);
      FAIL();
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("to(Device::host)"), std::string::npos);
    }
    EXPECT_THROW(d.set(0, 1.0), std::logic_error);
    std::vector<double> buf(6);
    EXPECT_THROW(d.read(0, buf), std::logic_error);
    Tensor back = d.clone().to(Device::host);
    EXPECT_EQ(back.device(), Device::host);
    for (int64_t i = 0; i < h.numel(); ++i) EXPECT_EQ(back.get(i), h.get(i));
    Tensor z(DType::f32, {5}, Device::cuda);   // zero-filled on the device too
    Tensor zh = z.to(Device::host);
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(zh.get(i), 0.0);
    EXPECT_THROW(Tensor(DType::f32, {-1}, Device::cuda), std::invalid_argument);
  }
  EXPECT_EQ(FakeDevice::allocs, FakeDevice::frees);   // every device buffer released
  EXPECT_THROW(register_device_ops(Device::host, ops), std::invalid_argument);
  register_device_ops(Device::cuda, DeviceOps{});   // back to no device support
  EXPECT_FALSE(has_device_ops(Device::cuda));
}

}  // namespace
}  // namespace dg
