// The CPU candidates of mla_decode (candidates/cpu/mla_decode.cpp) against the reference through
// verify, as a user runs them; the split count changes nothing beyond f32's error; bad cases and bad
// stored inputs (indices outside the cache, lengths, page-table entries, NaN) refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "datasets/suites.h"
#include "harness/cases/registry.h"
#include "harness/judge/verify.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

// Every candidate passes every smoke case (no key: o~ = 0 and lse = -inf matched exactly), with
// 18.5+ bits in o~ and lse (19.2-22.7 measured; the f32 dot product over 576 channels of f32 or
// FP8-range values costs the most), except the naive's sequential f32 sum over 32K keys (16.8 bits;
// the packed candidate's partial sums keep 20.8).
TEST(MlaDecodeCpu, EveryCandidatePassesEverySmokeCase) {
  for (const std::string& cs : find_suite("mla-decode-smoke")->cases)
    for (const char* cand : {"mla_decode_cpu_naive_f32", "mla_decode_cpu_packed_f32"}) {
      const bool hard = cs.find("ctx=32768") != std::string::npos;
      const Record r = verify_one(cand, cs, Tier::dd);
      EXPECT_EQ(r.disposition, Disposition::PASSED) << cand << " " << cs << ": " << r.reason;
      EXPECT_GT(output(r, "o").metrics.bits, hard ? 15.0 : 18.5) << cand << " " << cs;
      EXPECT_GT(output(r, "lse").metrics.bits, hard ? 15.0 : 18.5) << cand << " " << cs;
    }
}

// The packed candidate with no split and with 7 splits (most empty for the short sequences), dense
// and sparse, passes within 2 bits of itself.
TEST(MlaDecodeCpu, SplitCountChangesNothingBeyondTheFormatsError) {
  for (const std::string base : {"mla_decode(B=5,n_h=8,d_c=512,rope=64,page=64,split=1,ctx=300,regime=ragged,dtype=bf16,seed=3)",
                                 "mla_decode(B=5,n_h=8,d_c=512,rope=0,page=16,split=1,ctx=300,topk=200,regime=sparse_mixed,dtype=bf16,seed=3)"}) {
    const Record one = verify_one("mla_decode_cpu_packed_f32", base, Tier::dd);
    const Record seven = verify_one("mla_decode_cpu_packed_f32", parse_case(base).with("split", "7").str(), Tier::dd);
    for (const Record* r : {&one, &seven}) EXPECT_EQ(r->disposition, Disposition::PASSED) << r->reason;
    for (const char* out : {"o", "lse"})
      EXPECT_NEAR(output(one, out).metrics.bits, output(seven, out).metrics.bits, 2.0) << out << " " << base;
  }
}

TEST(MlaDecodeCpu, BadCasesAreRefused) {
  for (const char* bad : {"mla_decode(B=0,n_h=8)", "mla_decode(B=2,n_h=0)", "mla_decode(B=2,n_h=8,d_c=0)",
                          "mla_decode(B=2,n_h=8,d_c=2048)", "mla_decode(B=2,n_h=8,rope=-1)", "mla_decode(B=2,n_h=8,rope=256)",
                          "mla_decode(B=2,n_h=8,page=0)", "mla_decode(B=2,n_h=8,split=0)", "mla_decode(B=2,n_h=8,ctx=-1)",
                          "mla_decode(B=2,n_h=8,ctx=64,lens=3)", "mla_decode(B=2,n_h=8,ctx=64,lens=3/65)",
                          "mla_decode(B=2,n_h=8,topk=-1)", "mla_decode(B=2,n_h=8,topk=2052)", "mla_decode(B=2,n_h=8,scale=0)",
                          "mla_decode(B=2,n_h=8,scale=-0.0625)", "mla_decode(B=2,n_h=8,kv_scale=0.5)",
                          "mla_decode(B=2,n_h=8,kv=fp8,kv_scale=0)", "mla_decode(B=2,n_h=8,kv=fp4)",
                          "mla_decode(B=2,n_h=8,dtype=e4m3)", "mla_decode(B=2,n_h=8,regime=hidden)"})
    expect_refused(bad);
}

// Stored inputs that break the op: an index past the cache or below -1, a page-table entry outside
// the pool, a length other than the case's, NaN in q_pe and in the latent, a mis-shaped index
// tensor; each refused naming the problem.
TEST(MlaDecodeCpu, BadStoredInputsAreRefused) {
  const Case c = parse_case("mla_decode(B=2,n_h=2,d_c=8,rope=4,page=4,split=1,ctx=10,topk=6,regime=typical,dtype=bf16,seed=0)");
  const OpSpec& op = *find_op("mla_decode");
  const TensorMap good = generate_inputs(c);
  EXPECT_NO_THROW(op.check_inputs(c, good));
  TensorMap far = generate_inputs(c);
  far.at("indices").set(7, 12);
  expect_stored_refused(c, far, "indices[1][1] = 12 is outside [-1, max_pages*page = 12)");
  TensorMap low = generate_inputs(c);
  low.at("indices").set(0, -3);
  expect_stored_refused(c, low, "indices[0][0] = -3");
  TensorMap bad_page = generate_inputs(c);
  bad_page.at("page_table").set(1, 99);
  expect_stored_refused(c, bad_page, "page_table[0][1] = 99 is outside the pool [0, 7)");
  TensorMap bad_len = generate_inputs(c);
  bad_len.at("seqlens").set(1, 3);
  expect_stored_refused(c, bad_len, "seqlens[1] = 3 disagrees with the case's length 10");
  TensorMap nan_pe = generate_inputs(c);
  nan_pe.at("q_pe").set(5, std::nan(""));
  expect_stored_refused(c, nan_pe, "'q_pe'");
  TensorMap nan_latent = generate_inputs(c);
  nan_latent.at("latent").set(17, std::nan(""));
  expect_stored_refused(c, nan_latent, "'latent'");
  TensorMap shape = generate_inputs(c);
  shape.at("indices") = Tensor(DType::i32, {2, 5});
  expect_stored_refused(c, shape, "'indices'");
}

}  // namespace
}  // namespace dg
