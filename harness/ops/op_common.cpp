// What every op's OpSpec may share (op_common.h).
#include "harness/ops/op_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "harness/cases/registry.h"

namespace dg {
std::vector<ParamSpec> layer_params_tail(const char* regime_doc) {
  return {{"regime", ParamKind::text, "kimi_linear", regime_doc, true},
          {"dtype", ParamKind::text, "bf16", "dtype of the stored activations", true, {"f64", "f32", "bf16", "f16"}},
          {"seed", ParamKind::integer, "0", "RNG seed", true}};
}

Tensor leading_slice(const Tensor& t, int axis, int64_t keep) {
  std::vector<int64_t> shape = t.shape();
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  const int64_t rows = shape[static_cast<size_t>(axis)];
  const size_t row_bytes = rows * outer == 0 ? 0 : t.nbytes() / static_cast<size_t>(outer * rows);
  shape[static_cast<size_t>(axis)] = keep;
  Tensor s(t.dtype(), shape);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(s.bytes() + static_cast<size_t>(o * keep) * row_bytes, t.bytes() + static_cast<size_t>(o * rows) * row_bytes,
                static_cast<size_t>(keep) * row_bytes);
  return s;
}

Certification certify_leading_rows(Tier tier, int64_t rows, double ops_per_row,
                                   const std::function<SampleOutputs(Tier, int64_t)>& run) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / (ops_per_row * tier_cost(*up))), 1, rows);
  Certification cert;
  cert.tier = tier;
  cert.against = *up;
  cert.sample = n == rows ? "full case" : fmt::format("rows [0,{})", n);
  const SampleOutputs lo = run(tier, n), hi = run(*up, n);
  cert.ref_bits = agreement_bits(lo.y, hi.y, lo.y_tail, hi.y_tail);
  cert.ref_bits_max_elem = agreement_bits_max_elem(lo.y, hi.y, lo.y_tail, hi.y_tail);
  return cert;
}

}  // namespace dg
