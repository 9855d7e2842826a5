// Null candidates: outputs any honest gate must reject against a sound base, on every suite
// (the canaries of DESIGN.md "Rules the gate enforces"). `driftgate selftest` runs them all.
//   kda_null_zeros_f32      every output 0
//   kda_null_copy_f32       o = v (the same shape), ht = h0 or 0: the copy-input canary
//   kda_null_ref_f16        the f64 reference rounded to f16: a "kernel" in a narrower format than claimed
//   kda_null_noise_f32      the f64 reference plus Gaussian noise at 2^-12 of its RMS: plausible but wrong
#include <cmath>
#include <cstring>

#include "harness/ops/kda.h"
#include "harness/cases/registry.h"
#include "harness/core/rng.h"
#include "reference/kda.h"

namespace dg {
namespace {

void zeros(const Case&, const TensorMap&, TensorMap& out) {
  for (auto& [_, t] : out) std::memset(t.bytes(), 0, t.nbytes());
}

void copy_input(const Case& c, const TensorMap& in, TensorMap& out) {
  KdaParams p = kda_params(c);
  std::vector<double> row(static_cast<size_t>(p.V));
  const Tensor& v = in.at("v");
  Tensor& o = out.at("o");
  for (int64_t off = 0; off < v.numel(); off += p.V) {
    v.read(off, row);
    o.write(off, row);
  }
  Tensor& ht = out.at("ht");
  if (in.count("h0")) {
    std::vector<double> all(static_cast<size_t>(ht.numel()));
    in.at("h0").read(0, all);
    ht.write(0, all);
  } else {
    std::memset(ht.bytes(), 0, ht.nbytes());
  }
}

// The f64 reference's outputs, then `perturb` applied to each tensor before it is stored.
template <class Perturb>
void from_reference(const Case& c, const TensorMap& in, TensorMap& out, Perturb perturb) {
  KdaReferenceResult r = kda_reference(Tier::f64, kda_params(c), in);
  perturb("o", r.o);
  perturb("ht", r.ht);
  out.at("o").write(0, r.o);
  out.at("ht").write(0, r.ht);
}

void ref_f16(const Case& c, const TensorMap& in, TensorMap& out) {
  from_reference(c, in, out, [](const char*, std::vector<double>&) {});   // stored in f16 by the harness
}

void noise(const Case& c, const TensorMap& in, TensorMap& out) {
  from_reference(c, in, out, [&](const char* name, std::vector<double>& x) {
    double ss = 0;
    for (double v : x) ss += v * v;
    double sd = std::ldexp(std::sqrt(ss / static_cast<double>(std::max<size_t>(1, x.size()))), -12);
    TensorRng rng(c.seed(), c.str(), std::string("null_noise.") + name);
    for (size_t i = 0; i < x.size(); ++i) x[i] += sd * rng.normal(i);
  });
}

}  // namespace

DG_REGISTER_CANDIDATE(kda_null_zeros_f32, {"kda_null_zeros_f32", "kda", "null", "zeros", DType::f32, DType::f32,
                                           DType::f32, "null canary: every output 0"}, zeros);
DG_REGISTER_CANDIDATE(kda_null_copy_f32, {"kda_null_copy_f32", "kda", "null", "copy", DType::f32, DType::f32, DType::f32,
                                          "null canary: o = v, ht = h0"}, copy_input);
DG_REGISTER_CANDIDATE(kda_null_ref_f16, {"kda_null_ref_f16", "kda", "null", "reference", DType::f32, DType::f16,
                                         DType::f16, "null canary: the f64 reference rounded to f16"}, ref_f16);
DG_REGISTER_CANDIDATE(kda_null_noise_f32, {"kda_null_noise_f32", "kda", "null", "noise", DType::f32, DType::f32,
                                           DType::f32, "null canary: the reference plus noise at 2^-12 of its RMS"}, noise);

}  // namespace dg
