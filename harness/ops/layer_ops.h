// The small ops around KDA (reference/layer_ops.h): causal_conv1d and rmsnorm_gated, and what the
// fused decode op (kda_fused_op.cpp) shares with them.
#pragma once

#include <string>
#include <vector>

#include "harness/case.h"
#include "harness/tensor.h"
#include "reference/layer_ops.h"

namespace dg {

ConvParams conv_params(const Case& c);   // a causal_conv1d case
NormParams norm_params(const Case& c);   // an rmsnorm_gated case

// Throws InputError unless in[name] exists, is a float tensor of `shape` and holds no NaN/Inf (the
// stored-input check of every op).
void check_tensor(const TensorMap& in, const std::string& name, const std::vector<int64_t>& shape, const Case& c);

// The first `keep` indices of axis `axis`: [B,T,...] cut to [B,keep,...] (axis 1), [N,...] to
// [keep,...] (axis 0).
Tensor leading_slice(const Tensor& t, int axis, int64_t keep);

}  // namespace dg
