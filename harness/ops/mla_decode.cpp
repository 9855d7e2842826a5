// OpSpec of mla_decode (reference/mla_decode.h): MLA decode attention in the absorbed form, one KV
// head of latent rows [c_kv | k_pe] for all n_h query heads, dense over the pages of a sequence or
// sparse over an index list. Outputs the latent output o~ [B,n_h,d_c] and the natural-log lse
// [B,n_h] (f32); o = W_UV o~ is a GEMM (the gemm op). Its regimes and suites are in
// datasets/mla_decode.cpp, its CPU candidates in candidates/cpu/mla_decode.cpp.
#include "harness/ops/mla_decode.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/attention_decode.h"
#include "harness/ops/op_common.h"
#include "reference/decode_softmax.h"

namespace dg {

MlaDecodeParams mla_decode_params(const Case& c) {
  MlaDecodeParams p;
  p.B = c.integer("B");
  p.n_h = c.integer("n_h");
  p.d_c = c.integer("d_c");
  p.rope = c.integer("rope");
  p.page = c.integer("page");
  p.max_pages = std::max<int64_t>(1, (c.integer("ctx") + p.page - 1) / p.page);
  p.n_pages = 1;
  for (int64_t L : attention_decode_lens(c)) p.n_pages += (L + p.page - 1) / p.page;
  p.topk = c.integer("topk");
  p.scale = static_cast<float>(c.real("scale"));
  p.kv_scale = static_cast<float>(c.real("kv_scale"));
  return p;
}

namespace {

void validate(const Case& c) {
  const auto fail = [](const std::string& m) { throw InputError("mla_decode: " + m); };
  for (const char* n : {"B", "n_h", "d_c", "page", "split"})
    if (c.integer(n) < 1) fail(fmt::format("{} must be >= 1, got {}", n, c.integer(n)));
  if (c.integer("ctx") < 0 || c.integer("ctx") > (int64_t{1} << 24))
    fail(fmt::format("ctx must be in [0, 2^24], got {}", c.integer("ctx")));
  if (c.integer("d_c") > 1024) fail(fmt::format("d_c must be at most 1024, got {}", c.integer("d_c")));
  if (c.integer("rope") < 0 || c.integer("rope") > 128) fail(fmt::format("rope must be in [0, 128], got {}", c.integer("rope")));
  if (c.integer("n_h") > 128) fail(fmt::format("n_h must be at most 128, got {}", c.integer("n_h")));
  if (c.integer("page") > 4096) fail(fmt::format("page must be at most 4096, got {}", c.integer("page")));
  if (c.integer("split") > 1024) fail(fmt::format("split must be at most 1024, got {}", c.integer("split")));
  if (c.integer("topk") < 0 || c.integer("topk") > 2051)
    fail(fmt::format("topk must be in [0, 2051] (0: dense; 2048 + the k-pool's ragged tail of 3), got {}", c.integer("topk")));
  const double scale = c.real("scale"), kvs = c.real("kv_scale");
  if (!std::isfinite(scale) || !(scale > 0) || scale > 1e3) fail(fmt::format("scale must be in (0, 1e3], got {}", scale));
  if (!std::isfinite(kvs) || !(kvs > 0) || kvs > 1e6) fail(fmt::format("kv_scale must be in (0, 1e6], got {}", kvs));
  if (kvs != 1.0 && c.text("kv") != "fp8") fail(fmt::format("kv_scale = {} needs kv=fp8 (the scale of FP8 pages)", kvs));
  check_decode_lens(c, "mla_decode");
  checked_product("mla_decode: B*n_h*d_c", {c.integer("B"), c.integer("n_h"), c.integer("d_c") + c.integer("rope")});
  checked_product("mla_decode: B*ctx*(d_c+rope)",
                  {c.integer("B"), std::max<int64_t>(1, c.integer("ctx")) + c.integer("page"), c.integer("d_c") + c.integer("rope")});
}

DType kv_dtype(const Case& c) { return c.text("kv") == "fp8" ? DType::e4m3 : c.dtype(); }

std::map<std::string, InputSpec> inputs(const Case& c) {
  const MlaDecodeParams p = mla_decode_params(c);
  std::map<std::string, InputSpec> in{{"q", {c.dtype(), {p.B, p.n_h, p.d_c}}},
                                      {"latent", {kv_dtype(c), {p.n_pages, p.page, p.width()}}},
                                      {"page_table", {DType::i32, {p.B, p.max_pages}}},
                                      {"seqlens", {DType::i32, {p.B}}}};
  if (p.rope > 0) in["q_pe"] = {c.dtype(), {p.B, p.n_h, p.rope}};
  if (p.topk > 0) in["indices"] = {DType::i32, {p.B, p.topk}};
  return in;
}

// Every stored input exactly as `inputs` says, finite; seqlens the case's lengths, every used
// page-table entry inside the pool, every index in [-1, max_pages*page).
void check_inputs(const Case& c, const TensorMap& in) {
  check_inputs_exact(c, in, inputs(c));
  const MlaDecodeParams p = mla_decode_params(c);
  check_attention_decode_pages(p.attention(), check_decode_seqlens(c, in, "mla_decode"), decode_softmax::ints(in.at("page_table")),
                               "mla_decode");
  if (p.topk > 0) check_mla_decode_indices(p, decode_softmax::ints(in.at("indices")));
}

AttentionDecodeReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  const MlaDecodeParams p = mla_decode_params(c);
  const Tensor none;
  return mla_decode_reference(tier, p, in.at("q"), p.rope > 0 ? in.at("q_pe") : none, in.at("latent"), in.at("page_table"),
                              in.at("seqlens"), p.topk > 0 ? in.at("indices") : none, tails, rows);
}

// Keys read per (b, h): every token of the context (dense), every slot of the index list (sparse).
double keys_per_row(const Case& c, int64_t b_len) {
  return c.integer("topk") > 0 ? static_cast<double>(c.integer("topk")) : static_cast<double>(b_len);
}

double total_keys(const Case& c) {
  double n = 0;
  for (int64_t L : attention_decode_lens(c)) n += keys_per_row(c, L);
  return n;
}

// The first rows (b, h) that kCertifyOps buys at the next tier (at least one).
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const MlaDecodeParams p = mla_decode_params(c);
  const double per_row = keys_per_row(c, std::max<int64_t>(1, c.integer("ctx"))) * static_cast<double>(4 * p.width() + 2 * p.d_c);
  const int64_t rows = p.B * p.n_h;
  const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / (per_row * tier_cost(*up))), 1, rows);
  return decode_certification(run_rows(c, in, tier, n, true), run_rows(c, in, *up, n, true), tier, *up, n, rows);
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // The latent geometries: GLM-5.3-Flash's NoPE 512 and the 576 layout (GLM-5.x, Kimi-Linear).
      {"geometry", {"NoPE (d_c 512, rope 0)", "576 (d_c 512, rope 64)"},
       [](const Case& c) {
         const int64_t rope = c.integer("d_c") == 512 ? c.integer("rope") : -1;
         return rope == 0 ? std::vector<std::string>{"NoPE (d_c 512, rope 0)"}
                : rope == 64 ? std::vector<std::string>{"576 (d_c 512, rope 64)"} : std::vector<std::string>{};
       }},
      // Dense, sparse at the indexers' top-k (2048, 2051), sparse with -1 and out-of-length entries.
      {"mode", {"dense", "sparse", "sparse topk >= 2048", "sparse with invalid entries"},
       [](const Case& c) {
         const int64_t k = c.integer("topk");
         if (k == 0) return std::vector<std::string>{"dense"};
         std::vector<std::string> v{"sparse"};
         if (k >= 2048) v.push_back("sparse topk >= 2048");
         if (c.text("regime") == "sparse_mixed") v.push_back("sparse with invalid entries");
         return v;
       }},
      decode_lengths_axis(),
      decode_split_axis(),
      // Latent pages: the activations' dtype, FP8 with a scale other than 1.
      {"kv", {"kv = dtype", "kv = fp8, kv_scale != 1"},
       [](const Case& c) {
         if (c.text("kv") != "fp8") return std::vector<std::string>{"kv = dtype"};
         return c.real("kv_scale") != 1.0 ? std::vector<std::string>{"kv = fp8, kv_scale != 1"} : std::vector<std::string>{};
       }},
      // Page sizes: SGLang's 1, FlashMLA's 64.
      {"page", {"page = 1", "page = 64"},
       [](const Case& c) {
         const int64_t P = c.integer("page");
         return P == 1 ? std::vector<std::string>{"page = 1"} : P == 64 ? std::vector<std::string>{"page = 64"} : std::vector<std::string>{};
       }},
  };
}

std::vector<ParamSpec> params() {
  return {{"B", ParamKind::integer, "4", "sequences (one query token each)", true},
          {"n_h", ParamKind::integer, "16", "query heads, all reading the one latent KV head (64 in GLM-5.x and GLM-5.3-Flash)", true},
          {"d_c", ParamKind::integer, "512", "latent dim (kv_lora_rank): the absorbed query's and the value's dim", true},
          {"rope", ParamKind::integer, "0", "decoupled rope dims per token (64: the 576 layout; 0: NoPE, no q_pe)", true},
          {"page", ParamKind::integer, "64", "tokens per latent page (FlashMLA 64, SGLang 1)", true},
          {"split", ParamKind::integer, "1", "split-KV count a candidate uses (1: no split)", true},
          {"ctx", ParamKind::integer, "512", "context length (the page table's width is ceil(ctx / page))", true},
          {"lens", ParamKind::int_list, "", "per-sequence lengths, '/'-separated, B of them, each <= ctx (default: ctx each; "
           "the ragged, sparse_mixed and empty_splits regimes cycle their own)"},
          {"topk", ParamKind::integer, "0", "0: dense; N > 0: sparse over indices [B,N] (-1 and entries >= the length "
           "not attended; duplicates attended each time), N <= 2051"},
          {"scale", ParamKind::real, "0.0625", "softmax scale (f32): (d_nope + d_rope)^-0.5 of the expanded head, 1/16 for "
           "GLM-5.x and GLM-5.3-Flash, 192^-0.5 for Kimi-Linear"},
          {"kv", ParamKind::text, "dtype", "latent pages in the case's dtype, or FP8 e4m3 with a per-tensor scale", false,
           {"dtype", "fp8"}},
          {"kv_scale", ParamKind::real, "1", "FP8 latent scale (f32): the latent is kv_scale * the stored e4m3 value"},
          {"regime", ParamKind::text, "typical", "input regime (driftgate list regimes)", true},
          {"dtype", ParamKind::text, "bf16", "dtype of the stored q, q_pe and latent pages", true, {"f64", "f32", "bf16", "f16"}},
          {"seed", ParamKind::integer, "0", "RNG seed", true}};
}

OpSpec spec() {
  OpSpec s;
  s.name = "mla_decode";
  s.doc = "MLA absorbed decode attention: o~ = softmax(scale (q~ c_kv^T + q_pe k_pe^T)) c_kv per (b, h) over one latent KV "
          "head, lse = m + ln sum exp(s - m) (natural, f32); dense over the sequence's pages or sparse over indices "
          "[B,topk] (-1 invalid); q~ [B,n_h,d_c], q_pe [B,n_h,rope], latent pool [n_pages,page,d_c+rope]; no key gives "
          "o~ = 0, lse = -inf; o = W_UV o~ is the gemm op's";
  s.params = params();
  s.tensors = {{"q", TensorRole::input, "[B,n_h,d_c] the absorbed query q~_h = W_UK,h^T q_nope,h"},
               {"q_pe", TensorRole::input, "[B,n_h,rope] the rope part of the query (only with rope > 0)"},
               {"latent", TensorRole::input, "[n_pages,page,d_c+rope] the pool of latent pages [c_kv | k_pe] (e4m3 with kv=fp8)"},
               {"page_table", TensorRole::input, "[B,max_pages] i32 pool page of each logical page"},
               {"seqlens", TensorRole::input, "[B] i32 context length of each sequence"},
               {"indices", TensorRole::input, "[B,topk] i32 token positions to attend (only with topk > 0; -1 invalid)"},
               {"o", TensorRole::output, "[B,n_h,d_c] the latent output o~"},
               {"lse", TensorRole::output, "[B,n_h] f32 natural-log sum of exp of the scores (-inf with no key)", DType::f32}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    const MlaDecodeParams p = mla_decode_params(c);
    return std::map<std::string, std::vector<int64_t>>{{"o", {p.B, p.n_h, p.d_c}}, {"lse", {p.B, p.n_h}}};
  };
  s.check_inputs = check_inputs;
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    AttentionDecodeReferenceResult r = run_rows(c, in, tier, -1, false);
    return RefOutputs{{"o", std::move(r.o)}, {"lse", std::move(r.lse)}};
  };
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [](const Case& c) {   // per head and key: q.k (2(d_c+rope)), the exp and sums (~4), p c_kv (2 d_c)
    const MlaDecodeParams p = mla_decode_params(c);
    return total_keys(c) * static_cast<double>(p.n_h) * static_cast<double>(2 * p.width() + 2 * p.d_c + 4);
  };
  s.bytes = [](const Case& c, const Storage& st) {   // each latent row once for all heads, q, o, lse, table, lengths, indices
    const MlaDecodeParams p = mla_decode_params(c);
    const double in_b = st.input_bytes(c.dtype()), kv_b = st.input_bytes(kv_dtype(c));
    return total_keys(c) * static_cast<double>(p.width()) * kv_b + static_cast<double>(p.B * p.n_h * p.width()) * in_b +
           static_cast<double>(p.B * p.n_h * p.d_c) * st.output_bytes(c.dtype()) + static_cast<double>(p.B * p.n_h) * 4.0 +
           static_cast<double>(p.B * (p.max_pages + 1 + p.topk)) * 4.0;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(mla_decode, spec());

}  // namespace dg
