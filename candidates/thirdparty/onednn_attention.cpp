// oneDNN's primitives composed into an attention_decode candidate (reference/attention_decode.h), the
// way a framework without a fused decode kernel runs attention: per (sequence, kv head), the
// sequence's keys and values gathered out of the pages into contiguous f32 rows (FP8 pages
// dequantized by their scales, as the CPU candidates do: candidates/cpu/attention_decode_cpu.h), then
//   attention_decode_cpu_onednn_f32   S = scale Q K^T   dnnl::matmul in f32, the G query heads of the
//                                                       group as rows ([G,d] x [d,L], K described
//                                                       as "ba" over its [L,d] rows, no copy; the
//                                                       scale an output-scale attribute)
//                                     P = softmax(S)    dnnl::softmax_forward over the L scores of
//                                                       each row (the library's max subtraction,
//                                                       exp and sum)
//                                     O = P V           dnnl::matmul in f32 ([G,L] x [L,dv])
//                                     lse = m - ln P_m  m = max_j S_j, P_m its softmax weight
//                                                       1 / l (exp(0) / l): lse = m + ln l without
//                                                       a sum of driftgate's own
// One pass of each primitive over the whole context (the case's split count is not used: the
// library has no split-KV form). An empty context writes o = 0, lse = -inf without calling the
// library. Threads: the OpenMP team is set to driftgate's thread budget at each call, as the gemm
// candidates of candidates/thirdparty/onednn.cpp do; built without oneDNN every row is
// NOT_SUPPORTED with the reason.
#if DG_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "candidates/cpu/attention_decode_cpu.h"
#include "harness/cases/registry.h"
#include "harness/core/threads.h"

namespace dg {
namespace {

#if DG_HAVE_ONEDNN
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

const dnnl::engine& engine() {   // one engine for the process: the primitive cache keys on it
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// dst [M,N] = alpha * src [M,K] x w, w described over `w` as [K,N] in layout wtag.
void matmul(dnnl::stream& s, int64_t M, int64_t N, int64_t K, float* src, float* w, tag wtag, float* dst, float alpha) {
  const dnnl::memory::desc a_md({M, K}, dt::f32, tag::ab), w_md({K, N}, dt::f32, wtag), c_md({M, N}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, c_md), attr, engine());
  dnnl::matmul(pd).execute(s, {{DNNL_ARG_SRC, dnnl::memory(a_md, engine(), src)},
                               {DNNL_ARG_WEIGHTS, dnnl::memory(w_md, engine(), w)},
                               {DNNL_ARG_DST, dnnl::memory(c_md, engine(), dst)}});
}

// Row-wise softmax of p [G,L], in place.
void softmax(dnnl::stream& s, int64_t G, int64_t L, float* p) {
  const dnnl::memory::desc md({G, L}, dt::f32, tag::ab);
  const dnnl::softmax_forward::primitive_desc pd(dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1),
                                                 engine());
  dnnl::memory m(md, engine(), p);
  dnnl::softmax_forward(pd).execute(s, {{DNNL_ARG_SRC, m}, {DNNL_ARG_DST, m}});
}

// The q heads of group g of sequence b against its L gathered keys k [L,d] and values v [L,dv].
void group(const attention_cpu::View& w, TensorMap& out, int64_t b, int64_t g, int64_t L, std::vector<float>& k,
           std::vector<float>& v) {
  const int64_t G = w.group(), d = w.p.d, dv = w.p.dv;
  std::vector<float> q(static_cast<size_t>(G * d)), sc(static_cast<size_t>(G * L)), m(static_cast<size_t>(G)),
      o(static_cast<size_t>(G * dv));
  for (int64_t h = 0; h < G; ++h) {
    const std::vector<float> qh = attention_cpu::query(w, b, g * G + h);
    std::copy(qh.begin(), qh.end(), q.begin() + h * d);
  }
  dnnl::stream s(engine());
  matmul(s, G, L, d, q.data(), k.data(), tag::ba, sc.data(), w.p.scale);
  s.wait();
  std::vector<int64_t> arg(static_cast<size_t>(G));
  for (int64_t h = 0; h < G; ++h) {
    const float* row = sc.data() + h * L;
    arg[static_cast<size_t>(h)] = std::max_element(row, row + L) - row;
    m[static_cast<size_t>(h)] = row[arg[static_cast<size_t>(h)]];
  }
  softmax(s, G, L, sc.data());
  matmul(s, G, dv, L, sc.data(), v.data(), tag::ab, o.data(), 1.0f);
  s.wait();
  for (int64_t h = 0; h < G; ++h) {
    const std::vector<float> oh(o.begin() + h * dv, o.begin() + (h + 1) * dv);
    const float pm = sc[static_cast<size_t>(h * L + arg[static_cast<size_t>(h)])];
    attention_cpu::store(out, w, b, g * G + h, oh, m[static_cast<size_t>(h)] - std::log(pm));
  }
}

void run(const Case& c, const TensorMap& in, TensorMap& out) {
  const attention_cpu::View w = attention_cpu::view(c, in);
  omp_set_num_threads(num_threads());
  std::vector<float> k, v;
  for (int64_t b = 0; b < w.p.B; ++b)
    for (int64_t g = 0; g < w.p.n_kv; ++g) {
      const int64_t L = w.lens[static_cast<size_t>(b)];
      if (L == 0) {   // no keys: o = 0, lse = -inf
        const std::vector<float> zero(static_cast<size_t>(w.p.dv), 0.0f);
        for (int64_t h = g * w.group(); h < (g + 1) * w.group(); ++h)
          attention_cpu::store(out, w, b, h, zero, -std::numeric_limits<float>::infinity());
        continue;
      }
      attention_cpu::gather(w, b, g, L, k, v);
      group(w, out, b, g, L, k, v);
    }
}
#endif

void onednn_attention(const Case& c, const TensorMap& in, TensorMap& out) {
#if DG_HAVE_ONEDNN
  try {
    run(c, in, out);
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) throw NotSupported(std::string("oneDNN has no f32 primitive here: ") + e.what());
    throw;
  }
#else
  (void)c, (void)in, (void)out;
  throw NotSupported("this driftgate was built without oneDNN (Debian package libdnnl-dev; scripts/setup.sh "
                     "installs it, then rebuild)");
#endif
}

}  // namespace

DG_REGISTER_CANDIDATE(attention_decode_cpu_onednn_f32,
                      {"attention_decode_cpu_onednn_f32", "attention_decode", "cpu", "onednn", DType::f32, DType::f32,
                       DType::f32,
                       "oneDNN primitives composed (Debian's libdnnl): f32 matmul for the scores, softmax, f32 matmul "
                       "for P V; lse = m - ln P_m"},
                      onednn_attention);

}  // namespace dg
