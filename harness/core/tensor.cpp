// Tensor: dtype + shape + 64-byte aligned, zero-filled, contiguous row-major storage.
//
// get/set go through decode/encode one element at a time. read/write are the bulk paths: they pick
// the conversion once per call. Writing doubles into f32/tf32/bf16/f16 rounds once, correctly: the
// double is first rounded to odd into an f32 (the sticky bit lands in the f32's last place), then
// rounded to nearest even into the target, which is exact double rounding since 24 >= p + 2 for
// tf32 (p=11), bf16 (p=8) and f16 (p=11). The tests check these paths against encode().
#include "harness/core/tensor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace dg {
namespace {

constexpr size_t kAlign = 64;

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Zero-filled storage of at least nbytes (and at least one cache line), 64-byte aligned, padded to
// a whole number of cache lines. Without `zero` only the padding past nbytes is cleared.
std::shared_ptr<std::byte[]> allocate(size_t nbytes, bool zero = true) {
  const size_t size = std::max(kAlign, (nbytes + kAlign - 1) / kAlign * kAlign);
  auto* p = static_cast<std::byte*>(::operator new[](size, std::align_val_t{kAlign}));
  if (zero) std::memset(p, 0, size);
  else std::memset(p + nbytes, 0, size - nbytes);
  return std::shared_ptr<std::byte[]>(
      p, [](std::byte* q) { ::operator delete[](q, std::align_val_t{kAlign}); });
}

uint64_t load_bits(const std::byte* p, int width) {
  switch (width) {
    case 1: return static_cast<uint8_t>(*p);
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { uint64_t v; std::memcpy(&v, p, 8); return v; }
  }
}

void store_bits(std::byte* p, int width, uint64_t b) {
  switch (width) {
    case 1: *p = static_cast<std::byte>(b); break;
    case 2: { const auto v = static_cast<uint16_t>(b); std::memcpy(p, &v, 2); break; }
    case 4: { const auto v = static_cast<uint32_t>(b); std::memcpy(p, &v, 4); break; }
    default: std::memcpy(p, &b, 8); break;
  }
}

// The f32 nearest x toward zero, with its last bit set when inexact (NaN stays NaN; beyond the f32
// range this gives +-FLT_MAX, which is odd already).
inline float f32_round_to_odd(double x) {
  const float f = static_cast<float>(x);
  const double back = f;
  if (back == x || x != x) return f;
  uint32_t b = f32_bits(f);
  if (std::fabs(back) > std::fabs(x)) b -= 1;   // f rounded away from zero: step back toward it
  return f32_from_bits(b | 1u);
}

inline uint32_t tf32_rne_bits(float f) {
  const uint32_t b = f32_bits(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (b & 0x80000000u) | 0x7FC00000u;
  return (b + 0xFFFu + ((b >> 13) & 1u)) & 0xFFFFE000u;
}

inline uint16_t f16_bits_fast(float f) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return f16_from_f32(f);
#endif
}

// set() and write() into an integer dtype take integers only: a value that needs rounding is a
// caller's bug, not something to round silently.
void check_integer(DType t, double x) {
  const bool integral = std::isfinite(x) && std::trunc(x) == x;
  const bool in_range = t == DType::i64 ? (x >= -0x1p63 && x < 0x1p63)
                                        : (x >= -2147483648.0 && x <= 2147483647.0);
  if (!integral || !in_range) {
    throw std::invalid_argument("Tensor: " + std::string(name(t)) + " element needs an integer in range, got " +
                                std::to_string(x));
  }
}

const std::array<double, 256>& fp8_table(DType t) {
  static const auto make = [](DType d) {
    std::array<double, 256> a{};
    for (int i = 0; i < 256; ++i) a[static_cast<size_t>(i)] = decode(d, static_cast<uint64_t>(i));
    return a;
  };
  static const std::array<double, 256> e4m3 = make(DType::e4m3);
  static const std::array<double, 256> e5m2 = make(DType::e5m2);
  return t == DType::e4m3 ? e4m3 : e5m2;
}

}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : Tensor(dtype, std::move(shape), Uninitialized{}) {
  std::memset(storage_.get(), 0, nbytes());
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, Uninitialized) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = checked_numel();
  storage_ = allocate(nbytes(), /*zero=*/false);
}

// The element count of shape_, with every dimension >= 0 and the padded byte count representable.
int64_t Tensor::checked_numel() const {
  const int64_t width = info(dtype_).storage_bytes;
  int64_t n = 1;
  for (const int64_t d : shape_) {
    if (d < 0) throw std::invalid_argument("Tensor: negative dimension in shape " + format_shape(shape_));
    if (__builtin_mul_overflow(n, d, &n)) {
      throw std::invalid_argument("Tensor: element count of shape " + format_shape(shape_) + " overflows");
    }
  }
  if (n > (std::numeric_limits<int64_t>::max() - static_cast<int64_t>(kAlign)) / width) {
    throw std::invalid_argument("Tensor: byte size of shape " + format_shape(shape_) + " overflows");
  }
  return n;
}

std::string_view device_name(Device d) { return d == Device::host ? "host" : "cuda"; }

namespace {
DeviceOps g_device_ops[2];
const DeviceOps& device_ops(Device d) {
  const DeviceOps& ops = g_device_ops[static_cast<size_t>(d)];
  if (!ops.alloc)
    throw std::runtime_error(std::string("no ") + std::string(device_name(d)) +
                             " memory: this build or machine has no device support registered (built without CUDA, or "
                             "no device)");
  return ops;
}
}  // namespace

void register_device_ops(Device d, const DeviceOps& ops) {
  if (d == Device::host) throw std::invalid_argument("register_device_ops: host memory needs no registration");
  g_device_ops[static_cast<size_t>(d)] = ops;
}
bool has_device_ops(Device d) { return d == Device::host || g_device_ops[static_cast<size_t>(d)].alloc != nullptr; }

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, Device device) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = checked_numel();
  if (device == Device::host) {
    storage_ = allocate(nbytes());
    return;
  }
  const DeviceOps& ops = device_ops(device);
  device_ = device;
  const size_t bytes = std::max<size_t>(nbytes(), 1);
  void (*release)(void*) = ops.free;
  storage_ = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(ops.alloc(bytes)), [release](std::byte* q) { release(q); });
  ops.zero(storage_.get(), bytes);
}

Tensor Tensor::to(Device device) const {
  if (empty()) return Tensor();
  Tensor t = device == Device::host ? Tensor(dtype_, shape_, Uninitialized{}) : Tensor(dtype_, shape_, device);
  if (device == Device::host && device_ == Device::host) {
    std::memcpy(t.storage_.get(), storage_.get(), nbytes());
    return t;
  }
  const DeviceOps& ops = device_ops(device == Device::host ? device_ : device);
  ops.copy(t.storage_.get(), device, storage_.get(), device_, nbytes());
  return t;
}

void Tensor::check_host(const char* what) const {
  if (device_ != Device::host)
    throw std::logic_error(std::string("Tensor::") + what + " on a " + std::string(device_name(device_)) +
                           " tensor: copy it with to(Device::host) first");
}

double Tensor::get(int64_t i) const {
  check_host("get");
  if (i < 0 || i >= numel_) {
    throw std::out_of_range("Tensor::get: index " + std::to_string(i) + " outside shape " + shape_str());
  }
  const int w = info(dtype_).storage_bytes;
  return decode(dtype_, load_bits(storage_.get() + i * w, w));
}

void Tensor::set(int64_t i, double x) {
  check_host("set");
  if (i < 0 || i >= numel_) {
    throw std::out_of_range("Tensor::set: index " + std::to_string(i) + " outside shape " + shape_str());
  }
  if (!info(dtype_).is_float) check_integer(dtype_, x);
  const int w = info(dtype_).storage_bytes;
  store_bits(storage_.get() + i * w, w, encode(dtype_, x));
}

void Tensor::read(int64_t offset, std::span<double> out) const {
  check_host("read");
  const auto n = static_cast<int64_t>(out.size());
  if (offset < 0 || n > numel_ || offset > numel_ - n) {
    throw std::out_of_range("Tensor::read: [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                            ") outside shape " + shape_str());
  }
  if (n == 0) return;
  double* dst = out.data();
  const std::byte* base = storage_.get() + offset * info(dtype_).storage_bytes;
  switch (dtype_) {
    case DType::f64: std::memcpy(dst, base, static_cast<size_t>(n) * 8); return;
    case DType::f32:
    case DType::tf32: {
      const auto* src = reinterpret_cast<const float*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
      return;
    }
    case DType::bf16: {
      const auto* src = reinterpret_cast<const uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(src[i]);
      return;
    }
    case DType::f16: {
      const auto* src = reinterpret_cast<const uint16_t*>(base);
      int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
      for (; i + 8 <= n; i += 8) {
        const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
        _mm256_storeu_pd(dst + i, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
        _mm256_storeu_pd(dst + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
      }
#endif
      for (; i < n; ++i) dst[i] = f32_from_f16(src[i]);
      return;
    }
    case DType::e4m3:
    case DType::e5m2: {
      const auto& table = fp8_table(dtype_);
      const auto* src = reinterpret_cast<const uint8_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
      return;
    }
    case DType::i64: {
      const auto* src = reinterpret_cast<const int64_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<double>(src[i]);
      return;
    }
    case DType::i32: {
      const auto* src = reinterpret_cast<const int32_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
      return;
    }
  }
}

void Tensor::write(int64_t offset, std::span<const double> in) {
  check_host("write");
  const auto n = static_cast<int64_t>(in.size());
  if (offset < 0 || n > numel_ || offset > numel_ - n) {
    throw std::out_of_range("Tensor::write: [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                            ") outside shape " + shape_str());
  }
  if (n == 0) return;
  const double* src = in.data();
  std::byte* base = storage_.get() + offset * info(dtype_).storage_bytes;
  switch (dtype_) {
    case DType::f64: std::memcpy(base, src, static_cast<size_t>(n) * 8); return;
    case DType::f32: {
      auto* dst = reinterpret_cast<float*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
      return;
    }
    case DType::tf32: {
      auto* dst = reinterpret_cast<uint32_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = tf32_rne_bits(f32_round_to_odd(src[i]));
      return;
    }
    case DType::bf16: {
      auto* dst = reinterpret_cast<uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(f32_round_to_odd(src[i]));
      return;
    }
    case DType::f16: {
      auto* dst = reinterpret_cast<uint16_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_fast(f32_round_to_odd(src[i]));
      return;
    }
    case DType::e4m3:
    case DType::e5m2: {
      auto* dst = reinterpret_cast<uint8_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(encode(dtype_, src[i]));
      return;
    }
    case DType::i64: {
      for (int64_t i = 0; i < n; ++i) check_integer(dtype_, src[i]);
      auto* dst = reinterpret_cast<int64_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int64_t>(src[i]);
      return;
    }
    case DType::i32: {
      for (int64_t i = 0; i < n; ++i) check_integer(dtype_, src[i]);
      auto* dst = reinterpret_cast<int32_t*>(base);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int32_t>(src[i]);
      return;
    }
  }
}

Tensor Tensor::clone() const {
  if (empty()) return Tensor();
  if (device_ != Device::host) return to(device_);
  Tensor t(dtype_, shape_);
  std::memcpy(t.storage_.get(), storage_.get(), nbytes());
  return t;
}

std::string Tensor::shape_str() const { return format_shape(shape_); }

void Tensor::check_width(size_t w) const {
  const auto have = static_cast<size_t>(info(dtype_).storage_bytes);
  if (w != have) {
    throw std::logic_error("Tensor::data: element type of " + std::to_string(w) + " bytes for dtype " +
                           std::string(name(dtype_)) + " (" + std::to_string(have) + " bytes)");
  }
}

Tensor convert(const Tensor& t, DType to) {
  if (t.empty()) return Tensor();
  if (t.dtype() == to) return t.clone();
  Tensor out(to, t.shape());
  const int64_t n = t.numel();
  const int out_width = info(to).storage_bytes;

  if (t.dtype() == DType::i64 && info(to).is_float) {
    // An i64 beyond 2^53 is not a double: round hi + lo (exact) once.
    const int64_t* src = t.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const double hi = static_cast<double>(src[i]);
      const double lo = static_cast<double>(static_cast<__int128>(src[i]) - static_cast<__int128>(hi));
      store_bits(out.bytes() + i * out_width, out_width, encode(to, round_to(to, DD{hi, lo})));
    }
    return out;
  }

  // Every other source decodes exactly into doubles; write() rounds once into a float target, and
  // an integer target takes the nearest integer (round_to), throwing when it is out of range.
  constexpr int64_t kChunk = 1024;
  std::array<double, kChunk> buf;
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    const std::span<double> chunk(buf.data(), static_cast<size_t>(m));
    t.read(off, chunk);
    if (info(to).is_float) {
      out.write(off, chunk);
    } else {
      for (int64_t i = 0; i < m; ++i) {
        store_bits(out.bytes() + (off + i) * out_width, out_width, encode(to, chunk[static_cast<size_t>(i)]));
      }
    }
  }
  return out;
}

}  // namespace dg
