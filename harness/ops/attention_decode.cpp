// OpSpec of attention_decode (reference/attention_decode.h): paged GQA decode attention, one query
// token per sequence, over a pool of KV pages behind a page table, with ragged context lengths.
// Outputs o [B,n_h,dv] and the natural-log lse [B,n_h] (f32). Its regimes and suites are in
// datasets/attention_decode.cpp, its CPU candidates in candidates/cpu/attention_decode.cpp.
#include "harness/ops/attention_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"
#include "reference/decode_softmax.h"

namespace dg {

std::vector<int64_t> attention_decode_lens(const Case& c) {
  std::vector<int64_t> lens = c.int_list("lens");
  if (!lens.empty()) return lens;
  const int64_t B = c.integer("B"), ctx = c.integer("ctx"), page = c.integer("page");
  std::vector<int64_t> cycle = {ctx};
  if (c.text("regime") == "ragged" || c.text("regime") == "sparse_mixed") cycle = {ctx, 0, 1, ctx / 2 + 3, page + 1};
  if (c.text("regime") == "empty_splits") cycle = {0, 1, page - 1, page + 1};
  for (int64_t b = 0; b < B; ++b) lens.push_back(std::min(ctx, cycle[static_cast<size_t>(b) % cycle.size()]));
  return lens;
}

AttentionDecodeParams attention_decode_params(const Case& c) {
  AttentionDecodeParams p;
  p.B = c.integer("B");
  p.n_h = c.integer("n_h");
  p.n_kv = c.integer("n_kv");
  p.d = c.integer("d");
  p.dv = c.integer("dv") == 0 ? p.d : c.integer("dv");
  p.page = c.integer("page");
  p.max_pages = std::max<int64_t>(1, (c.integer("ctx") + p.page - 1) / p.page);
  p.n_pages = 1;
  for (int64_t L : attention_decode_lens(c)) p.n_pages += (L + p.page - 1) / p.page;
  const double scale = c.real("scale");
  p.scale = static_cast<float>(scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(p.d)));
  p.k_scale = static_cast<float>(c.real("k_scale"));
  p.v_scale = static_cast<float>(c.real("v_scale"));
  return p;
}

std::vector<int64_t> attention_decode_ints(const Tensor& t) { return decode_softmax::ints(t); }

void check_decode_lens(const Case& c, const char* op) {
  const std::vector<int64_t> lens = c.int_list("lens");
  if (!lens.empty() && static_cast<int64_t>(lens.size()) != c.integer("B"))
    throw InputError(fmt::format("{}: lens has {} lengths for B = {}", op, lens.size(), c.integer("B")));
  for (int64_t L : lens)
    if (L < 0 || L > c.integer("ctx"))
      throw InputError(fmt::format("{}: lens must be in [0, ctx = {}], got {}", op, c.integer("ctx"), L));
}

std::vector<int64_t> check_decode_seqlens(const Case& c, const TensorMap& in, const char* op) {
  const std::vector<int64_t> lens = attention_decode_ints(in.at("seqlens")), want = attention_decode_lens(c);
  for (size_t b = 0; b < want.size(); ++b)
    if (lens[b] != want[b])
      throw InputError(fmt::format("{}: seqlens[{}] = {} disagrees with the case's length {}", op, b, lens[b], want[b]));
  return lens;
}

Certification decode_certification(AttentionDecodeReferenceResult lo, AttentionDecodeReferenceResult hi, Tier tier, Tier up,
                                   int64_t n, int64_t rows) {
  for (AttentionDecodeReferenceResult* r : {&lo, &hi})
    for (double& x : r->lse)
      if (std::isinf(x)) x = std::numeric_limits<double>::quiet_NaN();
  Certification cert;
  cert.tier = tier;
  cert.against = up;
  cert.sample = n == rows ? "full case" : fmt::format("rows (b, h) [0,{})", n);
  cert.ref_bits = std::min(agreement_bits(lo.o, hi.o, lo.o_tail, hi.o_tail), agreement_bits(lo.lse, hi.lse, lo.lse_tail, hi.lse_tail));
  cert.ref_bits_max_elem = std::min(agreement_bits_max_elem(lo.o, hi.o, lo.o_tail, hi.o_tail),
                                    agreement_bits_max_elem(lo.lse, hi.lse, lo.lse_tail, hi.lse_tail));
  return cert;
}

// Whether some sequence of the case leaves a split with no keys (the -inf guard's case).
bool decode_has_empty_split(const Case& c) {
  const int64_t split = c.integer("split"), page = c.integer("page");
  for (int64_t L : attention_decode_lens(c)) {
    const int64_t np = (L + page - 1) / page, pps = attention_decode_pages_per_split(np, split);
    if (np == 0 || (np + pps - 1) / pps < split) return true;
  }
  return false;
}

// Lengths: an empty and a one-token context, a partial last page, ragged batches, long context.
CoverageAxis decode_lengths_axis() {
  return {"lengths", {"a length 0", "a length 1", "a partial last page", "lengths differ", "ctx >= 32768"},
    [](const Case& c) {
      const std::vector<int64_t> lens = attention_decode_lens(c);
      std::vector<std::string> v;
      if (std::count(lens.begin(), lens.end(), 0)) v.push_back("a length 0");
      if (std::count(lens.begin(), lens.end(), 1)) v.push_back("a length 1");
      if (std::any_of(lens.begin(), lens.end(), [&](int64_t L) { return L % c.integer("page") != 0; }))
        v.push_back("a partial last page");
      if (std::adjacent_find(lens.begin(), lens.end(), std::not_equal_to<>()) != lens.end()) v.push_back("lengths differ");
      if (c.integer("ctx") >= 32768) v.push_back("ctx >= 32768");
      return v;
    }};
}

// Split-KV: none, several, and a split that gets no keys.
CoverageAxis decode_split_axis() {
  return {"split", {"split = 1", "split > 1", "an empty split"},
    [](const Case& c) {
      std::vector<std::string> v{c.integer("split") == 1 ? "split = 1" : "split > 1"};
      if (decode_has_empty_split(c)) v.push_back("an empty split");
      return v;
    }};
}

namespace {

void validate(const Case& c) {
  const auto fail = [](const std::string& m) { throw InputError("attention_decode: " + m); };
  for (const char* n : {"B", "n_h", "n_kv", "d", "page", "split"})
    if (c.integer(n) < 1) fail(fmt::format("{} must be >= 1, got {}", n, c.integer(n)));
  if (c.integer("ctx") < 0) fail(fmt::format("ctx must be >= 0, got {}", c.integer("ctx")));
  if (c.integer("dv") < 0) fail(fmt::format("dv must be >= 0 (0: d), got {}", c.integer("dv")));
  if (c.integer("n_h") % c.integer("n_kv") != 0)
    fail(fmt::format("n_h = {} must be a multiple of n_kv = {} (GQA groups)", c.integer("n_h"), c.integer("n_kv")));
  if (c.integer("d") > 1024 || c.integer("dv") > 1024)
    fail(fmt::format("d and dv must be at most 1024, got {} and {}", c.integer("d"), c.integer("dv")));
  if (c.integer("page") > 4096) fail(fmt::format("page must be at most 4096, got {}", c.integer("page")));
  if (c.integer("split") > 1024) fail(fmt::format("split must be at most 1024, got {}", c.integer("split")));
  if (c.integer("ctx") > (int64_t{1} << 24)) fail(fmt::format("ctx must be at most 2^24, got {}", c.integer("ctx")));
  const double scale = c.real("scale");
  if (!std::isfinite(scale) || scale < 0 || scale > 1e3) fail(fmt::format("scale must be in [0, 1e3] (0: d^-0.5), got {}", scale));
  for (const char* n : {"k_scale", "v_scale"}) {
    const double x = c.real(n);
    if (!std::isfinite(x) || !(x > 0) || x > 1e6) fail(fmt::format("{} must be in (0, 1e6], got {}", n, x));
    if (x != 1.0 && c.text("kv") != "fp8") fail(fmt::format("{} = {} needs kv=fp8 (scales of FP8 pages)", n, x));
  }
  check_decode_lens(c, "attention_decode");
  checked_product("attention_decode: B*n_h*d", {c.integer("B"), c.integer("n_h"), std::max(c.integer("d"), c.integer("dv"))});
  checked_product("attention_decode: B*ctx*n_kv*d",
                  {c.integer("B"), std::max<int64_t>(1, c.integer("ctx")) + c.integer("page"), c.integer("n_kv"),
                   std::max(c.integer("d"), c.integer("dv"))});
}

DType kv_dtype(const Case& c) { return c.text("kv") == "fp8" ? DType::e4m3 : c.dtype(); }

std::map<std::string, InputSpec> inputs(const Case& c) {
  const AttentionDecodeParams p = attention_decode_params(c);
  return {{"q", {c.dtype(), {p.B, p.n_h, p.d}}},
          {"k_cache", {kv_dtype(c), {p.n_pages, p.page, p.n_kv, p.d}}},
          {"v_cache", {kv_dtype(c), {p.n_pages, p.page, p.n_kv, p.dv}}},
          {"page_table", {DType::i32, {p.B, p.max_pages}}},
          {"seqlens", {DType::i32, {p.B}}}};
}

// Every stored input exactly as `inputs` says, finite; seqlens the case's lengths, and every used
// page-table entry inside the pool.
void check_inputs(const Case& c, const TensorMap& in) {
  check_inputs_exact(c, in, inputs(c));
  check_attention_decode_pages(attention_decode_params(c), check_decode_seqlens(c, in, "attention_decode"),
                               attention_decode_ints(in.at("page_table")));
}

AttentionDecodeReferenceResult run_rows(const Case& c, const TensorMap& in, Tier tier, int64_t rows, bool tails) {
  return attention_decode_reference(tier, attention_decode_params(c), in.at("q"), in.at("k_cache"), in.at("v_cache"),
                                    in.at("page_table"), in.at("seqlens"), tails, rows);
}

// The first rows (b, h) that kCertifyOps buys at the next tier (at least one).
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const AttentionDecodeParams p = attention_decode_params(c);
  const double per_row = static_cast<double>(std::max<int64_t>(1, c.integer("ctx"))) * static_cast<double>(4 * p.d + 2 * p.dv);
  const int64_t rows = p.B * p.n_h;
  const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / (per_row * tier_cost(*up))), 1, rows);
  return decode_certification(run_rows(c, in, tier, n, true), run_rows(c, in, *up, n, true), tier, *up, n, rows);
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // GQA: MHA (one q head per kv head), MQA (one kv head), grouped with several kv heads.
      {"heads", {"MHA (group 1)", "MQA (n_kv 1)", "GQA (n_kv > 1, group > 1)"},
       [](const Case& c) {
         const int64_t g = c.integer("n_h") / c.integer("n_kv");
         return std::vector<std::string>{g == 1 ? "MHA (group 1)" : c.integer("n_kv") == 1 ? "MQA (n_kv 1)" : "GQA (n_kv > 1, group > 1)"};
       }},
      decode_lengths_axis(),
      decode_split_axis(),
      // Head dims: the configs' 128, and a value dim other than the key dim (where d^-0.5 and dv^-0.5 differ).
      {"dims", {"d = 128", "dv != d"},
       [](const Case& c) {
         std::vector<std::string> v;
         if (c.integer("d") == 128) v.push_back("d = 128");
         if (c.integer("dv") != 0 && c.integer("dv") != c.integer("d")) v.push_back("dv != d");
         return v;
       }},
      // KV pages: the activations' dtype, FP8 with scales other than 1.
      {"kv", {"kv = dtype", "kv = fp8, scales != 1"},
       [](const Case& c) {
         if (c.text("kv") != "fp8") return std::vector<std::string>{"kv = dtype"};
         if (c.real("k_scale") != 1.0 && c.real("v_scale") != 1.0) return std::vector<std::string>{"kv = fp8, scales != 1"};
         return std::vector<std::string>{};
       }},
      // Page sizes: SGLang's 1, vLLM's 16, FlashMLA's 64 and larger.
      {"page", {"page = 1", "page = 16", "page >= 64"},
       [](const Case& c) {
         const int64_t P = c.integer("page");
         return P == 1 ? std::vector<std::string>{"page = 1"} : P == 16 ? std::vector<std::string>{"page = 16"}
                : P >= 64 ? std::vector<std::string>{"page >= 64"} : std::vector<std::string>{};
       }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "attention_decode";
  s.doc = "paged GQA decode attention: o = softmax(scale q K^T) V per (b, h) over the sequence's pages, lse = m + ln sum "
          "exp(s - m) (natural, f32); q [B,n_h,d], k/v pools [n_pages,page,n_kv,d|dv], page_table [B,max_pages] i32, "
          "seqlens [B] i32; an empty context gives o = 0, lse = -inf";
  s.params = {{"B", ParamKind::integer, "4", "sequences (one query token each)", true},
              {"n_h", ParamKind::integer, "8", "query heads", true},
              {"n_kv", ParamKind::integer, "2", "kv heads (n_h % n_kv == 0; q head h reads kv head h / (n_h / n_kv))", true},
              {"d", ParamKind::integer, "128", "query/key head dim", true},
              {"dv", ParamKind::integer, "0", "value head dim (0: d)"},
              {"page", ParamKind::integer, "16", "tokens per KV page (vLLM 16, SGLang 1, FlashMLA 64)", true},
              {"split", ParamKind::integer, "1", "split-KV count a candidate uses (1: no split); split s of a sequence "
               "of n pages covers pages [s ceil(n/split), (s+1) ceil(n/split))", true},
              {"ctx", ParamKind::integer, "512", "context length (the page table's width is ceil(ctx / page))", true},
              {"lens", ParamKind::int_list, "", "per-sequence lengths, '/'-separated, B of them, each <= ctx (default: "
               "ctx each; the ragged and empty_splits regimes cycle their own)"},
              {"scale", ParamKind::real, "0", "softmax scale, held in f32 (0: d^-0.5)"},
              {"kv", ParamKind::text, "dtype", "KV pages in the case's dtype, or FP8 e4m3 with per-tensor scales", false,
               {"dtype", "fp8"}},
              {"k_scale", ParamKind::real, "1", "FP8 key scale (f32): the key is k_scale * the stored e4m3 value"},
              {"v_scale", ParamKind::real, "1", "FP8 value scale (f32): the value is v_scale * the stored e4m3 value"},
              {"regime", ParamKind::text, "typical", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored q and KV pages", true, {"f64", "f32", "bf16", "f16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"q", TensorRole::input, "[B,n_h,d] the query of each sequence's new token"},
               {"k_cache", TensorRole::input, "[n_pages,page,n_kv,d] the pool of key pages (e4m3 with kv=fp8)"},
               {"v_cache", TensorRole::input, "[n_pages,page,n_kv,dv] the pool of value pages (e4m3 with kv=fp8)"},
               {"page_table", TensorRole::input, "[B,max_pages] i32 pool page of each logical page (entries past a "
                "sequence's pages are not read)"},
               {"seqlens", TensorRole::input, "[B] i32 context length of each sequence"},
               {"o", TensorRole::output, "[B,n_h,dv]"},
               {"lse", TensorRole::output, "[B,n_h] f32 natural-log sum of exp of the scores (-inf for an empty context)", DType::f32}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    const AttentionDecodeParams p = attention_decode_params(c);
    return std::map<std::string, std::vector<int64_t>>{{"o", {p.B, p.n_h, p.dv}}, {"lse", {p.B, p.n_h}}};
  };
  s.check_inputs = check_inputs;
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    AttentionDecodeReferenceResult r = run_rows(c, in, tier, -1, false);
    return RefOutputs{{"o", std::move(r.o)}, {"lse", std::move(r.lse)}};
  };
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.flops = [](const Case& c) {   // per (b, h) and token: q.k (2d), the exp and sum (~4), p v (2dv)
    const AttentionDecodeParams p = attention_decode_params(c);
    double tokens = 0;
    for (int64_t L : attention_decode_lens(c)) tokens += static_cast<double>(L);
    return tokens * static_cast<double>(p.n_h) * static_cast<double>(2 * p.d + 2 * p.dv + 4);
  };
  s.bytes = [](const Case& c, const Storage& st) {   // each kv head's K and V once, q, o, lse, table, lengths
    const AttentionDecodeParams p = attention_decode_params(c);
    double tokens = 0;
    for (int64_t L : attention_decode_lens(c)) tokens += static_cast<double>(L);
    const double in_b = st.input_bytes(c.dtype()), kv_b = st.input_bytes(kv_dtype(c));
    return tokens * static_cast<double>(p.n_kv * (p.d + p.dv)) * kv_b + static_cast<double>(p.B * p.n_h * p.d) * in_b +
           static_cast<double>(p.B * p.n_h * p.dv) * st.output_bytes(c.dtype()) + static_cast<double>(p.B * p.n_h) * 4.0 +
           static_cast<double>(p.B * (p.max_pages + 1)) * 4.0;
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(attention_decode, spec());

}  // namespace dg
