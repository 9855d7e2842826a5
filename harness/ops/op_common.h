// What every op's OpSpec (harness/ops/<op>.cpp) may share: the certification budget, the layer ops'
// last parameters, the exact stored-input check, and prefix slicing for references run on a sample.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/tensor.h"

namespace dg {

// Budget of certification, in tier operations: about a second at mpfr127.
constexpr double kCertifyOps = 2e6;

// The last parameters of the KDA layer's ops (causal_conv1d, rmsnorm_gated): regime (default
// kimi_linear, documented by `regime_doc`), dtype of the stored activations (default bf16) and seed.
std::vector<ParamSpec> layer_params_tail(const char* regime_doc);

// The stored-input check of every op: `in` holds exactly the tensors of `want` (OpSpec::inputs), each
// with exactly its dtype (a bf16 case's q stored as f16 or f64 is refused, not converted) and shape,
// and every float tensor holds no NaN/Inf. Throws InputError naming the tensor and the problem; an
// extra tensor is refused with its name.
struct InputSpec;
void check_inputs_exact(const Case& c, const TensorMap& in, const std::map<std::string, InputSpec>& want);

// The first `keep` indices of axis `axis`: [B,T,...] cut to [B,keep,...] (axis 1), [N,...] to
// [keep,...] (axis 0).
Tensor leading_slice(const Tensor& t, int axis, int64_t keep);

}  // namespace dg
