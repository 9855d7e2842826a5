// The registries: ops (OpSpec), candidates and regimes. Everything registers itself in one statement
// beside its definition; `driftgate list` prints the registries.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/case.h"
#include "harness/tensor.h"

namespace dg {

enum class TensorRole : uint8_t { input, output, inout };

struct TensorSpec {
  std::string name;
  TensorRole role;
  std::string doc;
};

class Candidate;

// One per op, one place: parameters, tensors, how a case's tensors are shaped and generated, the
// reference, and how the harness drives a candidate.
struct OpSpec {
  std::string name;
  std::string doc;
  std::vector<ParamSpec> params;
  std::vector<TensorSpec> tensors;
  // Checks constraints the parameter types cannot express (HV % H == 0, K <= 256, ...); throws
  // InputError naming the problem.
  std::function<void(const Case&)> validate;
};

void register_op(OpSpec spec);
const OpSpec* find_op(std::string_view name);     // nullptr when unknown
std::vector<const OpSpec*> all_ops();

// A candidate: an implementation under test. Names are <op>_<backend>_<algo>_<dtype>.
struct CandidateInfo {
  std::string name;
  std::string op;           // the op it implements ("kda", "kda_decode")
  std::string backend;      // cpu, cuda, plugin, exec
  std::string algorithm;    // recurrent, chunk, ...
  DType input_dtype;        // the precision it reads its inputs in (it rounds wider inputs itself)
  DType state_dtype;        // the precision of its recurrent state between tokens or steps
  DType output_dtype;       // the dtype of its outputs, and of their ULP scoring
  std::string doc;
};

// run(case, in, out): `out` holds the output (and in-out) tensors, allocated by the harness in the
// candidate's output dtype (in-out tensors in its state dtype, already filled); the candidate writes
// every element of them and must not touch `in`.
using RunFn = std::function<void(const Case&, const TensorMap& in, TensorMap& out)>;

class Candidate {
 public:
  Candidate(CandidateInfo info, RunFn run) : info_(std::move(info)), run_(std::move(run)) {}
  const CandidateInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  void run(const Case& c, const TensorMap& in, TensorMap& out) const { run_(c, in, out); }

 private:
  CandidateInfo info_;
  RunFn run_;
};

void register_candidate(CandidateInfo info, RunFn run);
const Candidate* find_candidate(std::string_view name);   // nullptr when unknown
std::vector<const Candidate*> all_candidates();

// Static-init registration, one statement beside the definition:
//   DG_REGISTER_CANDIDATE(kda_cpu_chunk_f32, {"kda_cpu_chunk_f32", "kda", "cpu", ...}, run_fn);
struct Registrar {
  Registrar(CandidateInfo info, RunFn run) { register_candidate(std::move(info), std::move(run)); }
  explicit Registrar(OpSpec spec) { register_op(std::move(spec)); }
};
#define DG_REGISTER_CANDIDATE(id, ...) static const ::dg::Registrar dg_registrar_##id(__VA_ARGS__)
#define DG_REGISTER_OP(id, ...) static const ::dg::Registrar dg_registrar_op_##id(__VA_ARGS__)

}  // namespace dg
