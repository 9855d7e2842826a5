// The CPU candidates of attention_decode (candidates/cpu/attention_decode.cpp, and oneDNN's primitives
// composed: candidates/thirdparty/onednn_attention.cpp) against the
// reference through verify, as a user runs them; the split count changes nothing beyond f32's
// error; bad cases and bad stored inputs refused.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "candidates/cpu/attention_decode_cpu.h"
#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "harness/ops/attention_decode.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

// Every candidate passes every smoke case (an empty context's o = 0 and lse = -inf matched exactly):
// 20+ bits in o and lse, except where f32 itself loses them: scores near +-100 (the f32 dot
// product's error of ~2^-13 in s moves every weight; 16.6 bits measured) and 32K keys (the
// split-KV candidate's per-page tiles in 8 splits keep 21.2 bits, the naive's per-page partials
// 20.3, where a single sequential f32 sum over the 32K keys kept 14.3).
TEST(AttentionDecodeCpu, EveryCandidatePassesEverySmokeCase) {
  for (const std::string& cs : find_suite("attention-decode-smoke")->cases)
    for (const char* cand : {"attention_decode_cpu_naive_f32", "attention_decode_cpu_splitkv_f32", "attention_decode_cpu_onednn_f32"}) {
      const bool hard = cs.find("large_logits") != std::string::npos || cs.find("ctx=32768") != std::string::npos;
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_GT(output(r, "o").metrics.bits, hard ? 14.0 : 20.0) << cand << " " << cs;
      EXPECT_GT(output(r, "lse").metrics.bits, hard ? 14.0 : 20.0) << cand << " " << cs;
    }
}

// attention-long: contexts of 128K, 512K and 1M in ragged batches (a length 0 and a short one beside
// the long ones), bf16 and FP8 pages, the few-dominant and near-uniform regimes, split-KV, and every
// case's pages under 0.8 GB as stored (what the reference reads in f64 is 4x the bf16 bytes).
TEST(AttentionDecodeCpu, TheLongSuiteSpans128KTo1MOnRaggedBatchesInBoundedMemory) {
  const Suite* s = find_suite("attention-long");
  ASSERT_NE(s, nullptr);
  std::set<int64_t> ctx;
  std::set<std::string> regimes, kv;
  bool empty = false, short_one = false, split = false;
  for (const std::string& cs : s->cases) {
    const Case c = parse_case(cs);
    const AttentionDecodeParams p = attention_decode_params(c);
    ctx.insert(c.integer("ctx"));
    regimes.insert(c.text("regime"));
    kv.insert(c.text("kv"));
    for (int64_t L : attention_decode_lens(c)) empty |= L == 0, short_one |= L > 0 && L < 64;
    split |= c.integer("split") > 1;
    const double bytes = static_cast<double>(p.n_pages * p.page * p.n_kv * (p.d + p.dv)) * (c.text("kv") == "fp8" ? 1.0 : 2.0);
    EXPECT_LT(bytes, 0.8e9) << cs;
  }
  EXPECT_EQ(ctx, (std::set<int64_t>{131072, 524288, 1048576}));
  EXPECT_TRUE(regimes.count("few_dominant") && regimes.count("near_uniform"));
  EXPECT_EQ(kv, (std::set<std::string>{"dtype", "fp8"}));
  EXPECT_TRUE(empty && short_one && split);
}

// The split-KV candidate with no split and with 7 splits (most of them empty for the short
// sequences) passes the same ragged case, within 2 bits of each other.
TEST(AttentionDecodeCpu, SplitCountChangesNothingBeyondTheFormatsError) {
  const std::string base = "attention_decode(B=5,n_h=8,n_kv=2,d=128,page=16,split=1,ctx=300,regime=ragged,dtype=bf16,seed=3)";
  const Record one = verify_one("attention_decode_cpu_splitkv_f32", base, Tier::dd);
  const Record seven = verify_one("attention_decode_cpu_splitkv_f32", parse_case(base).with("split", "7").str(), Tier::dd);
  for (const Record* r : {&one, &seven}) EXPECT_EQ(r->disposition, Disposition::PASSED) << r->reason;
  for (const char* out : {"o", "lse"})
    EXPECT_NEAR(output(one, out).metrics.bits, output(seven, out).metrics.bits, 2.0) << out;
}

// The naive keeps one f32 partial per page of `page` keys and adds the pages' partials in page
// order: four keys of equal score (p_j = 1) with values 1, 0, 2^-24, 2^-24. Pages of 2 sum the two
// small values into 2^-23 before adding it to 1 (o = (1 + 2^-23) / 4); one page of 4, or pages of
// 1 (one sequential sum), round each 2^-24 away against 1 (o = 1/4).
TEST(AttentionDecodeCpu, TheNaiveSumsOnePartialPerPageInPageOrder) {
  AttentionDecodeParams p;
  p.d = p.dv = 1, p.scale = 1.0f;
  const float t = std::ldexp(1.0f, -24);
  const std::vector<float> q = {0.0f}, k = {1.0f, 1.0f, 1.0f, 1.0f}, v = {1.0f, 0.0f, t, t};
  for (const auto& [page, want] : {std::pair<int64_t, float>{2, 0.25f + t / 2}, {4, 0.25f}, {1, 0.25f}, {3, 0.25f}}) {
    p.page = page;
    std::vector<float> o(1);
    float lse = 0.0f;
    attention_cpu::naive_row(p, q, 4, k, v, o, lse);
    EXPECT_EQ(o[0], want) << "page " << page;
    EXPECT_EQ(lse, std::log(4.0f)) << "page " << page;
  }
}

TEST(AttentionDecodeCpu, BadCasesAreRefused) {
  for (const char* bad : {"attention_decode(B=2,n_h=6,n_kv=4)", "attention_decode(B=0,n_h=8,n_kv=2)",
                          "attention_decode(B=2,n_h=8,n_kv=2,page=0)", "attention_decode(B=2,n_h=8,n_kv=2,split=0)",
                          "attention_decode(B=2,n_h=8,n_kv=2,ctx=-1)", "attention_decode(B=2,n_h=8,n_kv=2,ctx=64,lens=3)",
                          "attention_decode(B=2,n_h=8,n_kv=2,ctx=64,lens=3/65)", "attention_decode(B=2,n_h=8,n_kv=2,scale=-1)",
                          "attention_decode(B=2,n_h=8,n_kv=2,dtype=e4m3)", "attention_decode(B=2,n_h=8,n_kv=2,regime=hidden)",
                          "attention_decode(B=2,n_h=8,n_kv=2,d=2048)", "attention_decode(B=2,n_h=8,n_kv=2,k_scale=0.5)",
                          "attention_decode(B=2,n_h=8,n_kv=2,kv=fp8,v_scale=0)", "attention_decode(B=2,n_h=8,n_kv=2,kv=fp4)"})
    expect_refused(bad);
}

// Stored inputs that break the op: a page-table entry outside the pool, a length other than the
// case's, NaN in q; each refused naming the problem.
TEST(AttentionDecodeCpu, BadStoredInputsAreRefused) {
  const Case c = parse_case("attention_decode(B=2,n_h=4,n_kv=2,d=8,page=4,split=1,ctx=10,regime=typical,dtype=bf16,seed=0)");
  const OpSpec& op = *find_op("attention_decode");
  const TensorMap good = generate_inputs(c);
  EXPECT_NO_THROW(op.check_inputs(c, good));
  TensorMap bad_page = generate_inputs(c);
  bad_page.at("page_table").set(1, 99);
  expect_stored_refused(c, bad_page, "page_table[0][1] = 99 is outside the pool [0, 7)");
  TensorMap bad_len = generate_inputs(c);
  bad_len.at("seqlens").set(1, 3);
  expect_stored_refused(c, bad_len, "seqlens[1] = 3 disagrees with the case's length 10");
  TensorMap bad_q = generate_inputs(c);
  bad_q.at("q").set(5, std::nan(""));
  expect_stored_refused(c, bad_q, "'q'");
}

}  // namespace
}  // namespace dg
