// Input distributions of the generators (datasets/<op>.cpp): a Dist fills a block of a tensor's
// elements from the tensor's counter-based stream (harness/core/rng.h), so element i is a pure function
// of (seed, case string, tensor name, i) whatever the blocking and the thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/rng.h"
#include "harness/core/tensor.h"
#include "harness/core/threads.h"

namespace dg::dists {

// A distribution fills out[j] with element i0 + j of a stream (the generators draw in blocks so that
// TensorRng's batched loops vectorize; element i is still a pure function of the stream and i).
using Dist = std::function<void(const TensorRng&, uint64_t i0, std::span<double> out)>;

inline double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
inline double logsigmoid(double x) { return -softplus(-x); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline Dist normal(double sd = 1.0) {
  return [sd](const TensorRng& r, uint64_t i0, std::span<double> out) {
    r.normal(i0, out);
    for (double& x : out) x = sd * x;
  };
}
inline Dist uniform(double lo, double hi) {
  return [=](const TensorRng& r, uint64_t i0, std::span<double> out) {
    r.uniform(i0, out);
    for (double& x : out) x = lo + (hi - lo) * x;
  };
}
inline Dist constant(double c) { return [c](const TensorRng&, uint64_t, std::span<double> out) { std::fill(out.begin(), out.end(), c); }; }
// PyTorch's default initialisation of a layer's weights with fan-in n (conv1d's is its width W):
// U(-1/sqrt(n), 1/sqrt(n)).
inline Dist fan_in_uniform(int64_t n) {
  const double a = 1.0 / std::sqrt(static_cast<double>(n));
  return uniform(-a, a);
}
// f applied to each element of `base`.
inline Dist map(Dist base, std::function<double(double)> f) {
  return [base = std::move(base), f = std::move(f)](const TensorRng& r, uint64_t i0, std::span<double> out) {
    base(r, i0, out);
    for (double& x : out) x = f(x);
  };
}

// Draws every element of `t` from `d` with the stream of (case, name), in parallel blocks.
inline void fill(Tensor& t, const Case& c, const std::string& name, const Dist& d) {
  TensorRng rng(c.seed(), c.str(), name);
  constexpr int64_t kBlock = 1 << 16;
  int64_t blocks = (t.numel() + kBlock - 1) / kBlock;
  parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    std::vector<double> buf(kBlock);
    for (int64_t b = b0; b < b1; ++b) {
      int64_t off = b * kBlock, n = std::min(kBlock, t.numel() - off);
      std::span<double> part(buf.data(), static_cast<size_t>(n));
      d(rng, static_cast<uint64_t>(off), part);
      t.write(off, part);
    }
  });
}

// Hidden states with "massive activations": N(0, sd^2), except that channels D/7 and D/3 of every
// row of D (the same two in every token, as in trained LLMs) hold +-(100 .. 400) * sd, so one term
// dominates a row's sum of squares or a dot product over it. Rows of fewer than 8 channels have none.
inline Dist massive_channels(int64_t D, double sd) {
  return [D, sd](const TensorRng& r, uint64_t i0, std::span<double> out) {
    r.normal(i0, out);
    const int64_t a = D / 7, b = D / 3;
    for (size_t j = 0; j < out.size(); ++j) {
      const int64_t ch = static_cast<int64_t>((i0 + j) % static_cast<uint64_t>(D));
      if (D >= 8 && (ch == a || ch == b)) out[j] = sd * (out[j] < 0 ? -1.0 : 1.0) * (100.0 + 100.0 * std::fabs(out[j]));
      else out[j] = sd * out[j];
    }
  };
}

// A new tensor `name` of dtype `dt` and `shape`, drawn from `d` with the stream of (case, name), as in[name].
inline void make(TensorMap& in, const Case& c, const std::string& name, DType dt, std::vector<int64_t> shape, const Dist& d) {
  Tensor t(dt, std::move(shape));
  fill(t, c, name, d);
  in[name] = std::move(t);
}

}  // namespace dg::dists
