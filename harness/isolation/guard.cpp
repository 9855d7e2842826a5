// Guarded, poisoned output storage; input fingerprints; XXH64.
#include "harness/isolation/guard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace dg {
namespace {

// tensor_view needs a Tensor whose storage pointer is ours. tensor.h offers no constructor for that,
// so we reach the private member through the one door C++ leaves open: an explicit instantiation
// may name a private member ([temp.spec.general]/6), and the friend it defines hands the
// pointer-to-member out. This is the only place that depends on Tensor's layout; a public
// Tensor(DType, shape, std::shared_ptr<std::byte[]>) would replace it.
using StorageMember = std::shared_ptr<std::byte[]> Tensor::*;
StorageMember tensor_storage_member();
template <StorageMember M>
struct StorageAccess {
  friend StorageMember tensor_storage_member() { return M; }
};
template struct StorageAccess<&Tensor::storage_>;

constexpr size_t kAlign = 64;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) throw std::invalid_argument("GuardedTensor: bad shape");
  }
  return n;
}

template <class U>
void fill_as(std::byte* p, int64_t n, uint64_t bits) {
  std::fill_n(reinterpret_cast<U*>(p), n, static_cast<U>(bits));
}

// --- XXH64 ---------------------------------------------------------------------------------------
constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
inline uint32_t read32(const unsigned char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t xxh_round(uint64_t acc, uint64_t input) { return rotl(acc + input * P2, 31) * P1; }
inline uint64_t xxh_merge(uint64_t acc, uint64_t v) { return (acc ^ xxh_round(0, v)) * P1 + P4; }

}  // namespace

Tensor tensor_view(DType dtype, std::vector<int64_t> shape, const std::shared_ptr<std::byte[]>& owner,
                   std::byte* data) {
  Tensor t(dtype, std::move(shape));
  t.*tensor_storage_member() = std::shared_ptr<std::byte[]>(owner, data);
  return t;
}

// --- poisons --------------------------------------------------------------------------------------
std::string_view poison_name(Poison p) { return p == Poison::quiet_nan ? "quiet_nan" : "negative_max"; }

Poison poison_for_run(int run) { return run % 2 == 0 ? Poison::quiet_nan : Poison::negative_max; }

uint64_t poison_bits(DType t, Poison p) {
  switch (t) {
    case DType::i64:
      return p == Poison::quiet_nan ? static_cast<uint64_t>(std::numeric_limits<int64_t>::min())
                                    : static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    case DType::i32:
      return p == Poison::quiet_nan ? static_cast<uint32_t>(std::numeric_limits<int32_t>::min())
                                    : static_cast<uint32_t>(std::numeric_limits<int32_t>::max());
    default:
      return p == Poison::quiet_nan ? encode(t, std::numeric_limits<double>::quiet_NaN())
                                    : encode(t, -info(t).max_finite);
  }
}

void fill_poison(Tensor& t, Poison p) {
  const uint64_t bits = poison_bits(t.dtype(), p);
  switch (info(t.dtype()).storage_bytes) {
    case 1: fill_as<uint8_t>(t.bytes(), t.numel(), bits); break;
    case 2: fill_as<uint16_t>(t.bytes(), t.numel(), bits); break;
    case 4: fill_as<uint32_t>(t.bytes(), t.numel(), bits); break;
    default: fill_as<uint64_t>(t.bytes(), t.numel(), bits); break;
  }
}

// --- guarded storage ------------------------------------------------------------------------------
uint8_t GuardedTensor::guard_byte(size_t i) { return static_cast<uint8_t>(i * 157u + 91u); }

GuardedTensor::GuardedTensor(DType dtype, std::vector<int64_t> shape, Poison poison) {
  nbytes_ = static_cast<size_t>(numel_of(shape)) * static_cast<size_t>(info(dtype).storage_bytes);
  const size_t size = 2 * kGuardBytes + nbytes_;
  auto* p = static_cast<std::byte*>(::operator new[](size, std::align_val_t{kAlign}));
  block_ = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t{kAlign}); });
  data_ = p + kGuardBytes;
  for (size_t i = 0; i < kGuardBytes; ++i) {
    p[i] = static_cast<std::byte>(guard_byte(i));
    data_[nbytes_ + i] = static_cast<std::byte>(guard_byte(i));
  }
  view_ = tensor_view(dtype, std::move(shape), block_, data_);
  fill_poison(view_, poison);
}

std::string GuardedTensor::check_guards() const {
  const std::byte* head = block_.get();
  const std::byte* tail = data_ + nbytes_;
  size_t head_changed = 0, tail_changed = 0, head_nearest = 0, tail_nearest = 0;
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (head[i] != static_cast<std::byte>(guard_byte(i))) {
      ++head_changed;
      head_nearest = kGuardBytes - i;              // distance before the first element
    }
    if (tail[i] != static_cast<std::byte>(guard_byte(i))) {
      if (tail_changed++ == 0) tail_nearest = i;   // distance after the last element
    }
  }
  std::string msg;
  if (tail_changed)
    msg = fmt::format("{} bytes overwritten after the end (first at end+{})", tail_changed, tail_nearest);
  if (head_changed)
    msg += fmt::format("{}{} bytes overwritten before the start (nearest at start-{})", msg.empty() ? "" : "; ",
                       head_changed, head_nearest);
  return msg;
}

// --- hashing --------------------------------------------------------------------------------------
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    for (const unsigned char* limit = end - 32; p <= limit; p += 32) {
      v1 = xxh_round(v1, read64(p));
      v2 = xxh_round(v2, read64(p + 8));
      v3 = xxh_round(v3, read64(p + 16));
      v4 = xxh_round(v4, read64(p + 24));
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
  } else {
    h = seed + P5;
  }
  h += static_cast<uint64_t>(n);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ xxh_round(0, read64(p)), 27) * P1 + P4;
  if (p + 4 <= end) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * P1), 23) * P2 + P3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

uint64_t hash_tensor(const Tensor& t) {
  std::vector<int64_t> head = t.shape();
  head.push_back(static_cast<int64_t>(t.dtype()));
  const uint64_t seed = hash_bytes(head.data(), head.size() * sizeof(int64_t));
  return hash_bytes(t.bytes(), t.empty() ? 0 : t.nbytes(), seed);
}

InputSnapshot snapshot_inputs(const TensorMap& in) {
  InputSnapshot s;
  for (const auto& [name, t] : in) s.tensors[name] = {t.bytes(), t.dtype(), t.shape(), hash_tensor(t)};
  return s;
}

std::string compare_inputs(const InputSnapshot& before, const TensorMap& in) {
  for (const auto& [name, e] : before.tensors) {
    auto it = in.find(name);
    if (it == in.end()) return fmt::format("{}: removed from the inputs", name);
    const Tensor& t = it->second;
    if (t.bytes() != e.data || t.dtype() != e.dtype || t.shape() != e.shape)
      return fmt::format("{}: tensor replaced (storage, dtype or shape changed)", name);
    const uint64_t h = hash_tensor(t);
    if (h != e.hash) return fmt::format("{}: contents changed (hash {:#018x} -> {:#018x})", name, e.hash, h);
  }
  for (const auto& [name, t] : in)
    if (!before.tensors.count(name)) return fmt::format("{}: added to the inputs", name);
  return {};
}

bool storage_overlaps(const Tensor& a, const Tensor& b) {
  if (a.empty() || b.empty() || a.nbytes() == 0 || b.nbytes() == 0) return false;
  const std::byte* a0 = a.bytes();
  const std::byte* b0 = b.bytes();
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace dg
