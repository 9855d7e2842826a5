// Small tensors from listed values, for the reference tests (tests/reference/*_test.cpp).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "harness/core/tensor.h"

namespace dg {

// A `dt` tensor of `shape` whose first v.size() elements (row-major) are `v`, each rounded once to
// `dt`; the rest stay zero.
inline Tensor tensor(DType dt, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor t(dt, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), v[i]);
  return t;
}

// The same in f64 (the values exactly).
inline Tensor f64(std::vector<int64_t> shape, const std::vector<double>& v) { return tensor(DType::f64, std::move(shape), v); }

}  // namespace dg
