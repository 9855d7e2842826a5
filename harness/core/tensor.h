// Tensor and TensorMap: a dtype, a shape and contiguous row-major storage, named by the same keys as
// in .safetensors files ("q", "k", "v", "g", "beta", "h0", "o", "ht", ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "harness/core/dtype.h"

namespace dg {

enum class Device : uint8_t { host, cuda };
std::string_view device_name(Device d);   // "host", "cuda"

// How storage on a device is allocated, cleared, freed and copied. candidates/cuda registers the
// CUDA functions at start-up (copies through pinned staging memory, every call checked); a build or
// a machine without them cannot make a device tensor, and the error says why.
struct DeviceOps {
  void* (*alloc)(size_t bytes) = nullptr;   // throws std::runtime_error on failure
  void (*zero)(void* p, size_t bytes) = nullptr;
  void (*free)(void* p) = nullptr;
  // dst, src on the given devices (host memory is ordinary pageable memory)
  void (*copy)(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = nullptr;
};
void register_device_ops(Device d, const DeviceOps& ops);
bool has_device_ops(Device d);

class Tensor {
 public:
  Tensor() = default;
  // Storage is zero-filled and 64-byte aligned.
  Tensor(DType dtype, std::vector<int64_t> shape);
  // The same, with the elements left unset (only the alignment padding is zeroed): for readers that
  // write every byte next, so gigabyte tensors are not cleared just to be overwritten.
  struct Uninitialized {};
  Tensor(DType dtype, std::vector<int64_t> shape, Uninitialized);
  // Zero-filled storage on `device` (DeviceOps). bytes() and data<T>() of a device tensor are device
  // pointers; the element accessors (get, set, read, write) are host-only and throw std::logic_error
  // on it: copy it with to(Device::host) first.
  Tensor(DType dtype, std::vector<int64_t> shape, Device device);
  // A copy on `device` (a copy even when already there).
  Tensor to(Device device) const;

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * static_cast<size_t>(info(dtype_).storage_bytes); }
  bool empty() const { return storage_ == nullptr; }

  std::byte* bytes() { return storage_.get(); }
  const std::byte* bytes() const { return storage_.get(); }
  // Typed view; throws std::logic_error when sizeof(T) is not the dtype's storage size.
  template <class T> T* data() { check_width(sizeof(T)); return reinterpret_cast<T*>(storage_.get()); }
  template <class T> const T* data() const { check_width(sizeof(T)); return reinterpret_cast<const T*>(storage_.get()); }

  // Element access through doubles (slow path, for tests, generators and metrics).
  double get(int64_t i) const;         // exact value of element i
  void set(int64_t i, double x);       // rounds x once (round_to) and stores it
  // Fast bulk paths: decode elements [offset, offset + out.size()) exactly into doubles, and
  // round-and-store doubles into [offset, offset + in.size()).
  void read(int64_t offset, std::span<double> out) const;
  void write(int64_t offset, std::span<const double> in);

  Tensor clone() const;
  std::string shape_str() const;       // "[1,4096,4,128]"

 private:
  void check_width(size_t w) const;
  void check_host(const char* what) const;
  int64_t checked_numel() const;
  DType dtype_ = DType::f32;
  Device device_ = Device::host;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::shared_ptr<std::byte[]> storage_;   // shared on copy; clone() for a deep copy
};

using TensorMap = std::map<std::string, Tensor>;

// Convert every element (exactly when widening, one rounding when narrowing).
Tensor convert(const Tensor& t, DType to);

}  // namespace dg
