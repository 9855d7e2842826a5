#include "harness/cases/case.h"

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "datasets/suites.h"
#include "harness/cases/case_memory.h"
#include "harness/ops/kda.h"
#include "harness/judge/verify.h"
#include "harness/cases/registry.h"

namespace dg {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string error_of(const std::string& s) {
  try {
    parse_case(s);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Case, CanonicalStringRoundTrips) {
  Case c = parse_case("kda( T = 64K, H=4, K=128, V=128, regime=long_memory, dtype=bf16, seed=3 )");
  EXPECT_EQ(c.str(), "kda(T=65536,H=4,K=128,V=128,regime=long_memory,dtype=bf16,seed=3)");
  EXPECT_EQ(parse_case(c.str()).str(), c.str());
  EXPECT_EQ(c.integer("T"), 65536);
  EXPECT_EQ(c.seed(), 3u);
  EXPECT_EQ(c.dtype(), DType::bf16);
}

TEST(Case, DefaultsAreFilledAndOmitted) {
  Case c = parse_case("kda(T=8,H=1,K=4,V=4)");
  EXPECT_EQ(c.str(), "kda(T=8,H=1,K=4,V=4,regime=kimi_linear,dtype=bf16,seed=0)");
  // The regime implies its gate and beta modes; they are not printed because they are defaults.
  EXPECT_EQ(c.text("gate"), "softplus");
  EXPECT_EQ(c.text("beta"), "sigmoid");
  Case lm = parse_case("kda(T=8,H=1,K=4,V=4,regime=long_memory)");
  EXPECT_EQ(lm.text("gate"), "pregated");
  // A value equal to its default is not part of the identity.
  EXPECT_EQ(parse_case("kda(T=8,H=1,K=4,V=4,gate=softplus)").str(), c.str());
  Case o = parse_case("kda(T=8,H=1,K=4,V=4,gate=pregated,scale=0.5)");
  EXPECT_EQ(o.str(), "kda(T=8,H=1,K=4,V=4,gate=pregated,scale=0.5,regime=kimi_linear,dtype=bf16,seed=0)");
}

TEST(Case, RegimeDefaultsForShapes) {
  Case c = parse_case("kda(T=130,H=1,regime=odd_dims)");
  EXPECT_EQ(c.integer("K"), 60);
  EXPECT_EQ(c.integer("V"), 100);
  EXPECT_EQ(parse_case(c.str()).str(), c.str());
}

TEST(Case, VarlenSegments) {
  Case c = parse_case("kda(T=4096,H=1,K=16,V=16,regime=varlen_ragged)");
  KdaParams p = kda_params(c);
  EXPECT_EQ(p.cu_seqlens, (std::vector<int64_t>{0, 1, 16, 79, 143, 208, 1208, 4096}));
  EXPECT_THAT(error_of("kda(T=100,H=1,K=16,V=16,seqlens=50/60)"), HasSubstr("exceeds T=100"));
  EXPECT_THAT(error_of("kda(T=100,B=2,H=1,K=16,V=16,seqlens=50/50)"), HasSubstr("needs B=1"));
}

TEST(Case, WithReplacesOneParameter) {
  Case c = parse_case("kda(T=64,H=2,K=16,V=16,regime=long_memory,seed=1)");
  EXPECT_EQ(c.with("T", "1").str(), "kda(T=1,H=2,K=16,V=16,regime=long_memory,dtype=bf16,seed=1)");
}

TEST(Case, BadInputNamesTheProblem) {
  EXPECT_THAT(error_of("kda(T=64"), HasSubstr("malformed case string"));
  EXPECT_THAT(error_of("kda T=64"), HasSubstr("malformed case string"));
  EXPECT_THAT(error_of("(T=64)"), HasSubstr("no op name"));
  EXPECT_THAT(error_of("kda(T=64,)"), HasSubstr("trailing comma"));
  EXPECT_THAT(error_of("kda(T64)"), HasSubstr("not name=value"));
  EXPECT_THAT(error_of("kda(T=1,T=2)"), HasSubstr("given twice"));
  EXPECT_THAT(error_of("convolution3d(T=1)"), HasSubstr("unknown op 'convolution3d'"));
  EXPECT_THAT(error_of("kda(X=1)"), HasSubstr("unknown parameter 'X'"));
  EXPECT_THAT(error_of("kda(T=abc)"), HasSubstr("parameter 'T' expects an integer"));
  EXPECT_THAT(error_of("kda(scale=nan)"), HasSubstr("expects a finite number"));
  EXPECT_THAT(error_of("kda(gate=relu)"), HasSubstr("one of: pregated, softplus, lower_bound"));
  EXPECT_THAT(error_of("kda(regime=nope)"), HasSubstr("unknown regime 'nope'"));
  EXPECT_THAT(error_of("kda(K=300)"), HasSubstr("K must be <= 256"));
  EXPECT_THAT(error_of("kda(H=2,HV=3)"), HasSubstr("HV % H must be 0"));
  EXPECT_THAT(error_of("kda(T=0)"), HasSubstr("T must be >= 1"));
  EXPECT_THAT(error_of("kda(dtype=f8)"), HasSubstr("one of: f64, f32, bf16, f16"));
  EXPECT_THAT(error_of("kda(lb=0.5,gate=lower_bound)"), HasSubstr("lb must be < 0"));
  EXPECT_THAT(error_of("kda(seqlens=1/x)"), HasSubstr("integers separated by '/'"));
}

TEST(Case, OverflowingSumsAndProductsAreRefused) {
  // Before: the seqlens sum wrapped around, passed validation and corrupted the heap.
  EXPECT_THAT(error_of("kda(T=8,seqlens=9223372036854775807/9223372036854775807)"), HasSubstr("seqlens sum exceeds T=8"));
  EXPECT_THAT(error_of("kda(T=8,seqlens=9223372036854775807/1)"), HasSubstr("seqlens sum exceeds T=8"));
  EXPECT_THAT(error_of("kda(T=8,seqlens=4/-4)"), HasSubstr("seqlens must be >= 0"));
  EXPECT_THAT(error_of("kda(T=1M,B=4611686018427387904,K=128,V=128)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("kda(T=4611686018427387904,H=2,K=128,V=128)"), HasSubstr("B*T*H*K"));
  EXPECT_THAT(error_of("kda(T=4,H=4611686018427387904,K=8,V=8)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("kda_decode(T=4,B=4611686018427387904,K=8,V=8)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("kda_decode_fused(T=1,B=1,H=4611686018427387904,K=8,V=8)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("causal_conv1d(T=4611686018427387904,B=4,D=4)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("rmsnorm_gated(N=4611686018427387904,D=4)"), HasSubstr("does not fit in 64 bits"));
  EXPECT_THAT(error_of("kda(T=9223372036854775807K)"), HasSubstr("expects an integer"));
  EXPECT_EQ(checked_product("x", {3, 5, 7}), 105);
  EXPECT_THROW(checked_product("x", {int64_t{1} << 32, int64_t{1} << 31}), InputError);
  EXPECT_THROW(checked_product("x", {-1, 2}), InputError);
  // At the edge: a sum of exactly T is fine.
  EXPECT_EQ(parse_case("kda(T=8,H=1,K=8,V=8,seqlens=4/4)").int_list("seqlens"), (std::vector<int64_t>{4, 4}));
}

TEST(Case, MemoryEstimateComesFromTheOpSpec) {
  // kda, f32, T=64, H=1, K=V=16, long_memory (h0=1): q, k, v, g at 64*16 f32 each, beta 64, h0
  // 16*16; twice. Outputs o (64*16) and ht (16*16) at 16 bytes per element.
  const Case c = parse_case("kda(T=64,H=1,K=16,V=16,regime=long_memory,dtype=f32,seed=0)");
  ASSERT_TRUE(c.boolean("h0"));
  const long double inputs = 2.0L * 4 * (4 * 64 * 16 + 64 + 16 * 16);
  const long double outputs = 16.0L * (64 * 16 + 16 * 16);
  EXPECT_EQ(case_memory_bytes(c), inputs + outputs);
  const Case huge = parse_case("kda(T=64M,B=64,H=64,K=256,V=256,regime=long_memory,dtype=f32,seed=0)");
  EXPECT_GT(case_memory_bytes(huge), 1e15L);
  EXPECT_THAT([&] {
    try {
      check_cases_fit_memory({c, huge}, "verify");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  }(), AllOf(HasSubstr("verify: case kda(T=67108864"), HasSubstr("of memory")));
  EXPECT_NO_THROW(check_cases_fit_memory({c}, "verify"));
  ASSERT_TRUE(available_memory_bytes().has_value());
  EXPECT_GT(*available_memory_bytes(), 0u);
}

TEST(Case, StoredInputsMustMatchTheOpSpecExactly) {
  const Case c = parse_case("kda(T=8,H=1,K=8,V=8,regime=varlen_ragged,seqlens=3/5,dtype=bf16,seed=0)");
  TensorMap in = generate_inputs(c);
  const OpSpec* op = find_op("kda");
  ASSERT_NO_THROW(op->check_inputs(c, in));
  EXPECT_EQ(op->inputs(c).size(), in.size());
  auto error = [&](const TensorMap& m) {
    try {
      op->check_inputs(c, m);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  TensorMap extra = in;
  extra["o"] = Tensor(DType::f64, {1, 8, 1, 8});
  EXPECT_THAT(error(extra), HasSubstr("unexpected input tensor(s) 'o'"));
  TensorMap wrong = in;
  wrong["k"] = Tensor(DType::f16, in.at("k").shape());
  EXPECT_THAT(error(wrong), HasSubstr("input tensor 'k' is stored as f16, but " + c.str() + " reads it as bf16"));
  TensorMap cu = in;
  cu["cu_seqlens"] = Tensor(DType::i32, cu.at("cu_seqlens").shape());
  EXPECT_THAT(error(cu), HasSubstr("input tensor 'cu_seqlens' is stored as i32"));
  TensorMap missing = in;
  missing.erase("beta");
  EXPECT_THAT(error(missing), HasSubstr("input tensor 'beta' is missing"));
}

TEST(Suites, EveryCaseParsesCanonically) {
  for (const Suite& s : all_suites()) {
    EXPECT_FALSE(s.cases.empty()) << s.name;
    for (const std::string& cs : s.cases) {
      Case c = parse_case(cs);
      EXPECT_EQ(c.str(), cs) << "suite " << s.name << " should list canonical strings";
    }
  }
  ASSERT_NE(find_suite("kda-long"), nullptr);
  EXPECT_EQ(find_suite("kda-long")->cases.size(), 12u);
}

TEST(Regimes, EveryRegimeGeneratesFiniteInputsOfTheRightShape) {
  for (const Regime* r : all_regimes()) {
    std::string T = r->name == "varlen_ragged" ? "1300" : "70";
    std::map<std::string, std::string> shape{{"T", T}, {"H", "1"}, {"K", "8"}, {"V", "8"}};
    if (r->op == "causal_conv1d") shape = {{"T", "70"}, {"D", "24"}};
    if (r->op == "rmsnorm_gated" || r->op == "rmsnorm" || r->op == "add_rmsnorm") shape = {{"N", "70"}, {"D", "24"}};
    if (r->op == "swiglu") shape = {{"N", "70"}, {"I", "24"}};
    if (r->op == "rope") shape = {{"T", "70"}, {"H", "2"}, {"D", "24"}, {"d_rope", "16"}};
    if (r->op == "gemm") shape = {{"M", "5"}, {"N", "24"}, {"K", "70"}};
    if (r->op == "moe_router") shape = {{"T", "70"}, {"E", "64"}, {"k", "4"}, {"n_group", "4"}, {"topk_group", "2"}};
    if (r->op == "gemm_fp8_block") shape = {{"M", "5"}, {"N", "130"}, {"K", "256"}};
    if (r->op == "moe_combine") shape = {{"T", "5"}, {"topk", "3"}, {"H", "24"}, {"rsf", "2.5"}};
    if (r->op == "mhc") shape = {{"T", "5"}, {"H", "24"}, {"iters", "3"}};
    if (r->op == "attention_decode") shape = {{"B", "5"}, {"n_h", "4"}, {"n_kv", "2"}, {"d", "16"}, {"page", "4"}, {"ctx", "37"}};
    if (r->op == "mla_decode")
      shape = {{"B", "5"}, {"n_h", "4"}, {"d_c", "16"}, {"rope", "4"}, {"page", "4"}, {"ctx", "37"}, {"topk", r->name == "sparse_mixed" ? "8" : "0"}};
    if (r->op == "sampler") shape = {{"B", "5"}, {"V", "300"}, {"top_k", "20"}, {"top_p", "0.9"}};
    if (r->op == "decode_layer")
      shape = {{"T", "3"}, {"B", "2"}, {"D", "24"}, {"H", "2"}, {"K", "8"}, {"E", "4"}, {"k", "2"}, {"I", "16"}};
    if (r->op == "dsa_indexer") shape = {{"B", "6"}, {"L", "70"}, {"H", "2"}, {"D", "8"}, {"topk", "16"}};
    if (r->op == "kpool_indexer") shape = {{"B", "6"}, {"L", "90"}, {"H", "2"}, {"D", "8"}, {"topk", "4"}};
    shape["regime"] = r->name;
    Case c = make_case(r->op, shape);
    TensorMap in;
    r->generate(c, in);
    EXPECT_NO_THROW(find_op(c.op())->check_inputs(c, in)) << c.str();
  }
}

TEST(Regimes, InputsArePureFunctionsOfTheCase) {
  Case c = parse_case("kda(T=33,H=1,K=8,V=8,regime=kimi_linear,seed=5)");
  TensorMap a, b;
  find_regime("kda", "kimi_linear")->generate(c, a);
  find_regime("kda", "kimi_linear")->generate(c, b);
  for (const auto& [name, t] : a)
    EXPECT_EQ(0, std::memcmp(t.bytes(), b.at(name).bytes(), t.nbytes())) << name;
  TensorMap other;
  find_regime("kda", "kimi_linear")->generate(c.with("seed", "6"), other);
  EXPECT_NE(0, std::memcmp(a.at("q").bytes(), other.at("q").bytes(), a.at("q").nbytes()));
}

}  // namespace
}  // namespace dg
