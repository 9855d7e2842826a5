// The memory side of the worker's anti-gaming rules (DESIGN.md "Rules the gate enforces"):
// poisoned outputs between guard regions, input fingerprints, and a fast 64-bit hash.
//
//   block:  [ guard: 4096 pattern bytes | output elements (poisoned) | guard: 4096 pattern bytes ]
//
// The output Tensor the candidate sees is a view of the middle part; the tail guard starts at the
// first byte past the last element, so a write of one element past the end is seen. The guard
// pattern is position-dependent (no run of equal bytes), so no common value (0, NaN, 0xFF) written
// over it can leave it intact by chance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harness/core/tensor.h"

namespace dg {

// A Tensor whose storage is `data`, inside a block `owner` keeps alive (shared_ptr's aliasing
// constructor). `data` must hold numel(shape) elements of `dtype`.
Tensor tensor_view(DType dtype, std::vector<int64_t> shape, const std::shared_ptr<std::byte[]>& owner,
                   std::byte* data);

// --- poisons ------------------------------------------------------------------------------------
// Run 1 fills every output element with the format's quiet NaN (f32 0x7FC00000, bf16 0x7FC0,
// f16 0x7E00, f64 0x7FF8..., fp8 0x7F); run 2 with the format's most negative finite value
// (f32 0xFF7FFFFF = -FLT_MAX, bf16 0xFF7F, f16 0xFBFF, e4m3 0xFE = -448, e5m2 0xFB = -57344).
// The second is finite on purpose: a kernel that tests its output for NaN ("was I here already?")
// cannot recognise it, and one that accumulates into its output gets a different wrong answer.
// An element the candidate never writes therefore differs bitwise between the runs.
// Integer outputs: the type's minimum, then its maximum.
enum class Poison : uint8_t { quiet_nan, negative_max };
std::string_view poison_name(Poison p);
Poison poison_for_run(int run);                 // run 0, 2, 4...: quiet_nan; 1, 3...: negative_max
uint64_t poison_bits(DType t, Poison p);        // one element's storage bits
void fill_poison(Tensor& t, Poison p);

// --- guarded output storage ---------------------------------------------------------------------
class GuardedTensor {
 public:
  static constexpr size_t kGuardBytes = 4096;

  // Allocates [guard | numel(shape) elements | guard], fills the guards with their pattern and the
  // elements with the poison.
  GuardedTensor(DType dtype, std::vector<int64_t> shape, Poison poison);

  // The candidate's view: storage strictly between the guards. Copies share the block.
  Tensor& tensor() { return view_; }
  const Tensor& tensor() const { return view_; }
  const std::byte* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

  // Empty when both guards still hold their pattern; else names the side, how many bytes changed
  // and the first changed offset, e.g. "4 bytes overwritten after the end (first at end+0)".
  std::string check_guards() const;

  static uint8_t guard_byte(size_t i);          // the pattern byte at offset i of a guard

 private:
  std::shared_ptr<std::byte[]> block_;
  std::byte* data_ = nullptr;
  size_t nbytes_ = 0;
  Tensor view_;
};

// --- hashing ------------------------------------------------------------------------------------
// XXH64 (Yann Collet's xxHash, 64-bit variant): about 10 GB/s, so hashing the inputs before and
// after a run costs far less than the run.
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);
// The storage bytes of a tensor, seeded with its dtype and shape.
uint64_t hash_tensor(const Tensor& t);

// What a candidate's inputs were before it ran: each tensor's storage address, dtype, shape and hash.
struct InputSnapshot {
  struct Entry {
    const std::byte* data = nullptr;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    uint64_t hash = 0;
  };
  std::map<std::string, Entry> tensors;
};
InputSnapshot snapshot_inputs(const TensorMap& in);
// Empty when `in` still has the same tensors at the same addresses with the same bytes; else names
// the first change, e.g. "k: contents changed (hash 0x... -> 0x...)" or "q: tensor replaced".
std::string compare_inputs(const InputSnapshot& before, const TensorMap& in);

// True when the byte ranges of two tensors' storage overlap (empty tensors overlap nothing).
bool storage_overlaps(const Tensor& a, const Tensor& b);

}  // namespace dg
