// The registries: ops (OpSpec), candidates and regimes. Everything registers itself in one statement
// beside its definition; `driftgate list` prints the registries.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/cases/case.h"
#include "harness/core/tensor.h"
#include "reference/certify.h"
#include "reference/real/tier.h"

namespace dg {

enum class TensorRole : uint8_t { input, output, inout };

struct TensorSpec {
  std::string name;
  TensorRole role;
  std::string doc;
  // An output whose dtype the op fixes whatever the candidate's output dtype (a router's expert ids: i32).
  std::optional<DType> dtype = std::nullopt;
  // An output with no tensor metrics, judged by the op's measures only (OpSpec::measure): the weights
  // of a set, whose slots a candidate may order freely and the measures match by id.
  bool measured_only = false;
};

class Candidate;
struct CandidateInfo;

// Reference outputs: doubles rounded to odd from the tier's value (one RNE gives the correctly
// rounded value in any format), in each output tensor's layout; NaN outside a sampled region.
using RefOutputs = std::map<std::string, std::vector<double>>;

// How a sequence output's elements map to context positions, for drift curves: element i belongs
// to token i / inner, at position token_position[token] within its own sequence.
struct Positions {
  std::vector<int64_t> token_position;
  int64_t inner = 1;
};

// The dtypes a candidate moves its data in, for OpSpec::bytes, the floor of the physical-bound rule:
// inputs count at the narrower of the case's dtype and `input` (a candidate that reads its inputs
// rounded moves no more than that), outputs at the narrower of the case's and `output`, states at
// `state`. The default counts a case's inputs and outputs at the case's own dtype and f32 states.
struct Storage {
  DType input = DType::f64, state = DType::f32, output = DType::f64;
  double input_bytes(DType case_dtype) const;    // per element
  double output_bytes(DType case_dtype) const;
  double state_bytes() const;
};

// A stored input of a case: the exact dtype and shape the op reads it in.
struct InputSpec {
  DType dtype;
  std::vector<int64_t> shape;
};

// An axis of coverage: its values, and which of them a case exercises (one or more).
struct CoverageAxis {
  std::string name;
  std::vector<std::string> values;
  std::function<std::vector<std::string>(const Case&)> of;
};

// An op's own measurement of a candidate's outputs against the reference, for what the tensor
// metrics cannot judge: a set output (the experts a router picks), or an error bound that depends
// on the case (what f32 accumulation allows at a GEMM's K). verify marks a row INCORRECT when an
// absolute limit is exceeded; the gate judges each measure as check "op.<name>".
struct OpMeasure {
  std::string name;        // unique within the op: "format_bound.y", "flips_wide"
  double value = 0;        // the measurement; NaN: not measurable on this case (the rule fails)
  // Absolute rule (verify and gate): value <= limit. NaN: no absolute rule.
  double limit = std::numeric_limits<double>::quiet_NaN();
  // Relative rule (gate): value <= max(base (1 + slack), naive_factor x naive) + floor, over the
  // same measure of the base's and the naive's rows, as the tensor metrics are judged.
  bool relative = false;
  double floor = 0;
  std::string detail;      // one line: what was measured, and how
};

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
  // Every stored input of a case (what the regime's generator writes), with its exact dtype and shape.
  // check_inputs refuses a missing tensor, another dtype, another shape and any name not here;
  // case_memory_bytes (harness/cases/case_memory.h) sizes a case from it before anything is allocated.
  std::function<std::map<std::string, InputSpec>(const Case&)> inputs;
  // Shapes of the output and in-out tensors of a case.
  std::function<std::map<std::string, std::vector<int64_t>>(const Case&)> output_shapes;
  // Checks stored inputs (names, dtypes, shapes, finiteness) against the case; throws InputError.
  // Left empty, register_op sets it to check_inputs_exact against `inputs`; an op sets its own to
  // check more (KDA's cu_seqlens, rope's positions) after calling check_inputs_exact.
  std::function<void(const Case&, const TensorMap&)> check_inputs;
  // The reference on the given inputs at a tier; `max_tokens` < 0 means the whole case.
  std::function<RefOutputs(const Case&, const TensorMap&, Tier, int64_t max_tokens)> reference;
  // Certification: recomputes at the next tier up (on a documented sample when costly) and returns
  // the agreement in bits and what was sampled. Throws InputError when no tier is above `tier`.
  std::function<Certification(const Case&, const TensorMap&, Tier)> certify;
  // Outputs that are sequences, with their element -> position map.
  std::function<std::map<std::string, Positions>(const Case&)> positions;
  // Runs a candidate over a whole case. Empty: call candidate.run once with every output allocated.
  // Stateful ops (decode) drive the candidate step by step here.
  std::function<void(const Candidate&, const Case&, const TensorMap& in, TensorMap& out)> drive;
  // Work of one case (for throughput rows): floating-point operations, and the bytes a candidate
  // with storage `s` moves at least (decode steps read and write the state every step).
  std::function<double(const Case&)> flops;
  std::function<double(const Case&, const Storage& s)> bytes;
  // Axes of coverage beyond the parameters' own values (harness/cases/coverage.h): shapes and layouts
  // where bugs live (GVA ratios, B > 1, odd dims, lengths past a counter's range, varlen edges).
  std::vector<CoverageAxis> coverage;
  // The op's own measures (OpMeasure) of a candidate's outputs `out` (its dtypes) against the
  // reference `ref`; `cand` declares the dtypes it computes in. Empty: none. Outputs in an integer
  // dtype (a set of ids) have no tensor metrics: an op with such an output judges it here.
  std::function<std::vector<OpMeasure>(const Case&, const CandidateInfo& cand, const TensorMap& in,
                                       const RefOutputs& ref, const TensorMap& out)>
      measure;
};

// A regime: a named, documented input distribution of an op, with parameter defaults it implies
// (a gate mode, a varlen layout, head sizes). The generator fills every input tensor of a case.
struct Regime {
  std::string name;
  std::string op;
  std::string doc;
  std::map<std::string, std::string> defaults;
  std::function<void(const Case&, TensorMap&)> generate;
};

void register_regime(Regime r);
const Regime* find_regime(std::string_view op, std::string_view name);
std::vector<const Regime*> all_regimes();

// Registers an op (at static initialisation); an empty check_inputs becomes check_inputs_exact.
void register_op(OpSpec spec);

// The stored-input check of every op: `in` holds exactly the tensors of `want` (OpSpec::inputs), each
// with exactly its dtype (a bf16 case's q stored as f16 or f64 is refused, not converted) and shape,
// and every float tensor holds no NaN/Inf. Throws InputError naming the tensor and the problem; an
// extra tensor is refused with its name.
void check_inputs_exact(const Case& c, const TensorMap& in, const std::map<std::string, InputSpec>& want);
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
  // How its op judges it beyond the values of its outputs: "" (against the op's definition, output by
  // output); "distribution": it draws its random outputs differently from the op's definition (a
  // sampler by rejection sampling), so its op judges the distribution of its draws, not each draw
  // (harness/ops/sampler.h, sampler_judged_by_distribution).
  std::string judged_by = "";
  Storage storage() const { return {input_dtype, state_dtype, output_dtype}; }
};

// The dtype the harness allocates a candidate's output tensor in: the one its op fixes for it
// (TensorSpec::dtype), else its state dtype for states ("ht", and the in-out "state" pool of decode
// steps), its output dtype for everything else.
inline DType output_dtype(const std::string& name, const CandidateInfo& info) {
  if (const OpSpec* op = find_op(info.op))
    for (const TensorSpec& t : op->tensors)
      if (t.name == name && t.dtype) return *t.dtype;
  return (name == "ht" || name == "state") ? info.state_dtype : info.output_dtype;
}

// True when the op judges output `name` by its measures only (TensorSpec::measured_only).
inline bool measured_only(const OpSpec& op, const std::string& name) {
  for (const TensorSpec& t : op.tensors)
    if (t.name == name) return t.measured_only;
  return false;
}

// Where an op's driver keeps a candidate's in-out pools (decode states, conv states) between the
// steps it drives: in device memory for a CUDA candidate when this build registered it, so that a
// state never crosses the bus between steps (as in a serving engine); in host memory otherwise.
inline Device pool_device(const CandidateInfo& info) {
  return info.backend == "cuda" && has_device_ops(Device::cuda) ? Device::cuda : Device::host;
}

// Canaries: the built-in null candidates (backend "null") and the cheating ones (algorithm "cheat")
// that exist to be caught (driftgate selftest). They never join a default candidate set.
inline bool is_canary(const CandidateInfo& i) { return i.backend == "null" || i.algorithm == "cheat"; }
// Variants: the built-in mutants (algorithm "mutant": one deliberate bug each) and equivalent
// variants (algorithm "equivalent": legitimate rewrites) that `driftgate mutants` runs to measure a
// suite's strength (candidates/mutants/). Not canaries (selftest leaves them out) and never part of
// a default candidate set either.
inline bool is_variant(const CandidateInfo& i) { return i.algorithm == "mutant" || i.algorithm == "equivalent"; }
// A candidate that verify runs when no --candidate is given: neither a canary nor a variant.
inline bool in_default_set(const CandidateInfo& i) { return !is_canary(i) && !is_variant(i); }

// Thrown by a candidate that cannot run here or on this case: no CUDA device, a layout it does not
// implement. The row becomes NOT_SUPPORTED with what() as its reason (never ERRORED, never a failed
// verify; a gate cannot merge a patch it could not run).
struct NotSupported : std::runtime_error {
  using std::runtime_error::runtime_error;
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
// The candidate, or an InputError naming it and listing the known ones.
const Candidate& require_candidate(std::string_view name);
std::vector<const Candidate*> all_candidates();

// Static-init registration, one statement beside the definition:
//   DG_REGISTER_CANDIDATE(kda_cpu_chunk_f32, {"kda_cpu_chunk_f32", "kda", "cpu", ...}, run_fn);
struct Registrar {
  Registrar(CandidateInfo info, RunFn run) { register_candidate(std::move(info), std::move(run)); }
  explicit Registrar(OpSpec spec) { register_op(std::move(spec)); }
  explicit Registrar(Regime r) { register_regime(std::move(r)); }
};
#define DG_REGISTER_CANDIDATE(id, ...) static const ::dg::Registrar dg_registrar_##id(__VA_ARGS__)
#define DG_REGISTER_OP(id, ...) static const ::dg::Registrar dg_registrar_op_##id(__VA_ARGS__)
#define DG_REGISTER_REGIME(id, ...) static const ::dg::Registrar dg_registrar_regime_##id(__VA_ARGS__)

}  // namespace dg
