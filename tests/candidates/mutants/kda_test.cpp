// The KDA mutants and equivalent variants (candidates/mutants/kda.cpp) judged by
// harness/judge/mutants.h in this process: every mutant is rejected on a named case that exercises
// its bug, every equivalent variant merges on all of them, no variant joins a default candidate set
// or selftest's canaries, and a cell of the kill matrix is the verdict `gate --no-time` gives on
// that case.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "harness/judge/gate_run.h"
#include "harness/judge/mutants.h"

namespace dg {
namespace {

// Each mutant and the case that exercises its bug (small shapes; the 64K + 1 case is the only one
// long enough for a 16-bit position counter or a state dropped every 32K tokens).
const std::map<std::string, std::string>& exercising_case() {
  static const std::string plain = "kda(T=256,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)";
  static const std::string gva = "kda(T=256,H=2,HV=4,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)";
  static const std::string tiny = "kda(T=256,H=1,K=64,V=64,regime=tiny_norm,dtype=bf16,seed=0)";
  static const std::string h0 = "kda(T=64,H=1,K=64,V=64,regime=nonsymmetric_h0,dtype=bf16,seed=0)";
  static const std::string varlen = "kda(T=1208,H=1,K=64,V=64,regime=varlen_ragged,dtype=bf16,seed=0)";
  static const std::string past_64k = "kda(T=65537,H=1,K=16,V=16,regime=long_memory,dtype=bf16,seed=0)";
  // The chunk form's boundaries: a ragged last chunk (T % 64 != 0), and gates of full precision
  // that decay fast, whose chunk-local cumsums round (bf16 gates of this size sum exactly).
  static const std::string ragged = "kda(T=250,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)";
  static const std::string strong_f32 = "kda(T=1024,H=2,K=64,V=64,regime=strong_decay,dtype=f32,seed=0)";
  static const std::map<std::string, std::string> m = {
      {"kda_mutant_state_bf16", plain},          {"kda_mutant_decay_bf16", plain},
      {"kda_mutant_decay_f16", plain},           {"kda_mutant_dot_bf16", plain},
      {"kda_mutant_exp_cubic", plain},           {"kda_mutant_residual_before_decay", plain},
      {"kda_mutant_read_before_write", plain},   {"kda_mutant_gva_head_mod", gva},
      {"kda_mutant_eps_outside_sqrt", tiny},     {"kda_mutant_eps_1e12", tiny},
      {"kda_mutant_h0_transposed", h0},          {"kda_mutant_varlen_boundary", varlen},
      {"kda_mutant_pos_wrap16", past_64k},       {"kda_mutant_reset_32k", past_64k},
      {"kda_mutant_checkpoint_bf16", past_64k},
      {"kda_mutant_sigmoid_fast", plain},        {"kda_mutant_log_fast", plain},   // kimi_linear: sigmoid beta, softplus gate
      {"kda_mutant_chunk_no_boundary_decay", plain}, {"kda_mutant_chunk_ragged_gamma", ragged},
      {"kda_mutant_chunk_gamma_diff", strong_f32},
  };
  return m;
}

const KillMatrix& matrix() {
  static const KillMatrix m = [] {
    std::set<std::string> unique;
    for (const auto& [mutant, c] : exercising_case()) unique.insert(c);
    std::vector<Case> cases;
    for (const std::string& c : unique) cases.push_back(parse_case(c));
    MutantOptions opt;
    opt.isolate = false;
    return run_mutants(require_candidate("kda_cpu_recurrent_f32"), cases, default_policy(), opt);
  }();
  return m;
}

size_t case_index(const KillMatrix& m, const std::string& c) {
  for (size_t i = 0; i < m.cases.size(); ++i)
    if (m.cases[i] == c) return i;
  ADD_FAILURE() << "case not in the matrix: " << c;
  return 0;
}

TEST(KdaMutants, EveryMutantHasAnExercisingCase) {
  std::vector<const Candidate*> v = variants_of("kda");
  int mutants = 0, equivalents = 0;
  for (const Candidate* k : v) {
    if (k->info().algorithm == "mutant") {
      ++mutants;
      EXPECT_TRUE(exercising_case().count(k->name())) << k->name() << " has no exercising case in this test";
    } else {
      ++equivalents;
    }
  }
  EXPECT_EQ(mutants, static_cast<int>(exercising_case().size()));
  EXPECT_GE(equivalents, 4);
}

TEST(KdaMutants, EachMutantIsRejectedOnTheCaseThatExercisesItsBug) {
  const KillMatrix& m = matrix();
  for (const VariantRow& r : m.rows) {
    if (r.kind != "mutant") continue;
    const std::string& c = exercising_case().at(r.candidate);
    const KillCell& cell = r.cells[case_index(m, c)];
    EXPECT_EQ(cell.verdict, Verdict::REJECT) << r.candidate << " survived " << c;
    EXPECT_FALSE(cell.fired.empty()) << r.candidate;
  }
  EXPECT_EQ(m.killed(), m.mutants());
  EXPECT_DOUBLE_EQ(m.kill_rate(), 1.0);
  EXPECT_TRUE(m.survivors().empty());
  EXPECT_EQ(m.exit_code(), 0);
}

// Bugs that need a condition stay hidden without it: the matrix is not "everything rejects".
TEST(KdaMutants, ConditionalBugsSurviveCasesThatDoNotExerciseThem) {
  const KillMatrix& m = matrix();
  const size_t plain = case_index(m, "kda(T=256,H=2,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)");
  for (const char* name : {"kda_mutant_gva_head_mod", "kda_mutant_h0_transposed", "kda_mutant_varlen_boundary",
                           "kda_mutant_pos_wrap16", "kda_mutant_reset_32k", "kda_mutant_checkpoint_bf16",
                           "kda_mutant_chunk_ragged_gamma"}) {
    auto it = std::find_if(m.rows.begin(), m.rows.end(), [&](const VariantRow& r) { return r.candidate == name; });
    ASSERT_NE(it, m.rows.end()) << name;
    EXPECT_EQ(it->cells[plain].verdict, Verdict::MERGE) << name << " (H = HV, no h0, one sequence, T = 256 = 4 full chunks)";
  }
}

TEST(KdaMutants, EquivalentVariantsMergeOnEveryCase) {
  const KillMatrix& m = matrix();
  int seen = 0;
  for (const VariantRow& r : m.rows) {
    if (r.kind != "equivalent") continue;
    ++seen;
    for (size_t i = 0; i < r.cells.size(); ++i)
      EXPECT_EQ(r.cells[i].verdict, Verdict::MERGE) << r.candidate << " on " << m.cases[i] << ": " << r.cells[i].detail;
  }
  EXPECT_GE(seen, 4);
  EXPECT_EQ(m.false_rejects(), 0);
}

TEST(KdaMutants, CheapestKillIsTheLeastCostlyRejectingCase) {
  const KillMatrix& m = matrix();
  for (const VariantRow& r : m.rows) {
    if (!r.rejected()) {
      EXPECT_FALSE(r.cheapest_kill) << r.candidate;
      continue;
    }
    ASSERT_TRUE(r.cheapest_kill) << r.candidate;
    for (size_t i = 0; i < r.cells.size(); ++i)
      if (r.cells[i].verdict == Verdict::REJECT) {
        EXPECT_LE(m.case_cost[*r.cheapest_kill], m.case_cost[i]) << r.candidate;
      }
  }
}

TEST(KdaMutants, NoVariantJoinsDefaultSetsOrSelftest) {
  std::vector<const Candidate*> all = variants_of("kda");
  const std::vector<const Candidate*> decode = variants_of("kda_decode");
  EXPECT_GE(decode.size(), 13u);   // 9 mutants, 4 equivalents of the decode step
  all.insert(all.end(), decode.begin(), decode.end());
  for (const Candidate* k : all) {
    EXPECT_TRUE(is_variant(k->info())) << k->name();
    EXPECT_FALSE(is_canary(k->info())) << k->name() << " would be run by selftest as a canary";
    EXPECT_FALSE(in_default_set(k->info())) << k->name();
  }
  EXPECT_TRUE(in_default_set(require_candidate("kda_cpu_recurrent_f32").info()));
  EXPECT_TRUE(in_default_set(require_candidate("kda_cpu_chunk_f32").info()));
}

// A cell is the gate's own verdict: run_gate with timing off on the same case agrees.
TEST(KdaMutants, CellIsTheVerdictOfGateNoTime) {
  const std::string c = "kda(T=256,H=2,HV=4,K=64,V=64,regime=kimi_linear,dtype=bf16,seed=0)";
  const KillMatrix& m = matrix();
  for (const char* name : {"kda_mutant_gva_head_mod", "kda_equiv_fused_decay"}) {
    GateOptions opt;
    opt.time = false;
    opt.isolate = false;
    GateReport rep = run_gate(require_candidate("kda_cpu_recurrent_f32"), require_candidate(name), {parse_case(c)},
                              default_policy(), opt);
    ASSERT_EQ(rep.rows.size(), 1u);
    auto it = std::find_if(m.rows.begin(), m.rows.end(), [&](const VariantRow& r) { return r.candidate == name; });
    ASSERT_NE(it, m.rows.end());
    EXPECT_EQ(it->cells[case_index(m, c)].verdict, rep.rows[0].verdict) << name;
  }
}

TEST(KdaMutants, RefusesAVariantAsBaseAndCasesOfAnotherOp) {
  MutantOptions opt;
  opt.isolate = false;
  const std::vector<Case> one = {parse_case("kda(T=8,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)")};
  EXPECT_THROW(run_mutants(require_candidate("kda_mutant_state_bf16"), one, default_policy(), opt), InputError);
  EXPECT_THROW(run_mutants(require_candidate("kda_cpu_recurrent_f32"),
                           {parse_case("kda_decode(T=4,B=1,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)")},
                           default_policy(), opt),
               InputError);
}

}  // namespace
}  // namespace dg
