// The tensors of a CPU candidate's maps (candidates/cpu/, candidates/mutants/): an input by name, an
// output by name and element count, each throwing std::invalid_argument that names the op and the
// tensor; and the row readers and writers of kda_cpu.h (rows read as f32, written in the tensor's dtype).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "candidates/cpu/kda_cpu.h"
#include "harness/core/tensor.h"

namespace dg {

using kda_cpu::load_row;
using kda_cpu::store_row;

// Input `name` of `m`; throws "<op>: tensor '<name>' is missing".
inline const Tensor& need(const TensorMap& m, const char* name, std::string_view op) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument(std::string(op) + ": tensor '" + name + "' is missing");
  return it->second;
}

// Output `name` of `m`, which must hold `numel` elements; throws "<op>: output tensor '<name>' is
// missing" or "... has shape <shape>".
inline Tensor& need_out(TensorMap& m, const char* name, int64_t numel, std::string_view op) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument(std::string(op) + ": output tensor '" + name + "' is missing");
  if (it->second.numel() != numel)
    throw std::invalid_argument(std::string(op) + ": output tensor '" + name + "' has shape " + it->second.shape_str());
  return it->second;
}

}  // namespace dg
