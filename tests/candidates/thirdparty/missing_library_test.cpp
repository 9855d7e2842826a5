// The third-party candidates built without their libraries (this test compiles
// candidates/thirdparty/openblas.cpp, onednn.cpp and onednn_attention.cpp with DG_HAVE_OPENBLAS=0 and DG_HAVE_ONEDNN=0, as
// CMake does where a library is missing): the candidates are still listed, and every row of theirs is
// NOT_SUPPORTED with a reason naming the Debian package, never a build failure and never ERRORED.
#include <gtest/gtest.h>

#include <string>

#include "harness/cases/registry.h"
#include "tests/candidates/cpu/verify_one.h"

namespace dg {
namespace {

TEST(ThirdPartyMissing, RowsAreNotSupportedWithTheReason) {
  const std::string cs = "gemm(M=2,N=8,K=16,regime=activations,dtype=bf16,seed=0)";
  for (const auto& [cand, package] : {std::pair<std::string, std::string>{"gemm_cpu_openblas_f32", "libopenblas-serial-dev"},
                                      {"gemm_cpu_onednn_f32", "libdnnl-dev"},
                                      {"gemm_cpu_onednn_bf16", "libdnnl-dev"}}) {
    ASSERT_NE(find_candidate(cand), nullptr) << cand << " is not listed";
    const Record r = verify_one(cand, cs, Tier::f64);
    EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << cand << ": " << r.reason;
    EXPECT_NE(r.reason.find(package), std::string::npos) << cand << ": " << r.reason;
  }
  const Record r = verify_one("attention_decode_cpu_onednn_f32",
                              "attention_decode(B=2,n_h=4,n_kv=2,d=32,page=16,split=1,ctx=40,regime=typical,dtype=bf16,seed=0)", Tier::f64);
  EXPECT_EQ(r.disposition, Disposition::NOT_SUPPORTED) << r.reason;
  EXPECT_NE(r.reason.find("libdnnl-dev"), std::string::npos) << r.reason;
}

}  // namespace
}  // namespace dg
