// OpSpec of kpool_indexer (reference/kpool_indexer.h): GLM-5.3-Flash's k-pool indexer, pooled keys
// under the gated softmax, the top pools expanded to their tokens, the ragged tail appended unscored,
// and its measures (kpool_indexer.h). Its regimes and suites are in datasets/kpool_indexer.cpp, its
// CPU candidates in candidates/cpu/kpool_indexer.cpp.
#include "harness/ops/kpool_indexer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "harness/ops/dsa_indexer.h"
#include "harness/ops/op_common.h"
#include "harness/ops/topk_set.h"
#include "reference/certify.h"

namespace dg {

KpoolIndexerParams kpool_indexer_params(const Case& c) {
  KpoolIndexerParams p;
  p.B = c.integer("B");
  p.L = c.integer("L");
  p.H = c.integer("H");
  p.D = c.integer("D");
  p.topk = c.integer("topk");
  return p;
}

void kpool_indexer_ranges(const Case& c, std::vector<int64_t>& ctx, std::vector<int64_t>& start) {
  const int64_t B = c.integer("B"), L = c.integer("L"), k = c.integer("topk");
  ctx = c.int_list("lens");
  start.assign(static_cast<size_t>(B), 0);
  if (!ctx.empty()) return;
  const bool ragged = c.text("regime") == "ragged";
  const int64_t cycle[] = {L, 2051, 2054, 2053 + 2 * k, 9, L - 3}, first[] = {0, 1, 2, 3, 6, 0};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t e = ragged ? std::clamp<int64_t>(cycle[b % 6], 1, L) : std::max<int64_t>(1, L - (B - 1 - b));
    ctx.push_back(e);
    if (ragged) start[static_cast<size_t>(b)] = std::min(first[b % 6], e - 1);
  }
}

std::vector<double> kpool_indexer_scores(const KpoolIndexerParams& p, const KpoolInputs& in, int64_t b, std::vector<double>* scale) {
  const int64_t s0 = in.start[static_cast<size_t>(b)], P = (in.ctx[static_cast<size_t>(b)] - s0) / kKpoolSize;
  const double sc = 1.0 / std::sqrt(static_cast<double>(p.D));
  std::vector<double> out(static_cast<size_t>(P)), key(static_cast<size_t>(p.D)), mag(static_cast<size_t>(p.D));
  if (scale) scale->assign(static_cast<size_t>(P), 0.0);
  for (int64_t pool = 0; pool < P; ++pool) {
    const int64_t t0 = s0 + kKpoolSize * pool;
    for (int64_t c = 0; c < p.D; ++c) {
      double x[kKpoolSize], m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < kKpoolSize; ++j)
        m = std::max(m, x[j] = in.gate[static_cast<size_t>((t0 + j) * p.D + c)] + in.ape[static_cast<size_t>(j * p.D + c)]);
      for (double& v : x) sum += (v = std::exp(v - m));
      key[static_cast<size_t>(c)] = mag[static_cast<size_t>(c)] = 0;
      for (int64_t j = 0; j < kKpoolSize; ++j) {
        const double kv = in.k[static_cast<size_t>((t0 + j) * p.D + c)];
        key[static_cast<size_t>(c)] += x[j] / sum * kv;
        mag[static_cast<size_t>(c)] += x[j] / sum * std::fabs(kv);
      }
    }
    double score = 0, a = 0;
    for (int64_t h = 0; h < p.H; ++h) {
      const double* qh = in.q.data() + (b * p.H + h) * p.D;
      double dot = 0, abs = 0;
      for (int64_t c = 0; c < p.D; ++c) {
        dot += qh[c] * key[static_cast<size_t>(c)];
        abs += std::fabs(qh[c]) * mag[static_cast<size_t>(c)];
      }
      const double wh = in.w[static_cast<size_t>(b * p.H + h)];
      if (dot > 0) score += wh * dot * sc;
      a += std::fabs(wh) * abs * sc;
    }
    out[static_cast<size_t>(pool)] = score;
    if (scale) (*scale)[static_cast<size_t>(pool)] = a;
  }
  return out;
}

namespace {

struct PoolScores {
  std::vector<std::vector<double>> s, mag;
  std::vector<uint64_t> token_hash;   // [L] a hash of each token's k and gate rows
};

uint64_t fnv(const double* a, int64_t n, uint64_t h) {
  const unsigned char* c = reinterpret_cast<const unsigned char*>(a);
  for (size_t i = 0; i < static_cast<size_t>(n) * sizeof(double); ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

std::shared_ptr<const PoolScores> scores_of(const KpoolIndexerParams& p, const KpoolInputs& in) {
  using Key = std::tuple<int64_t, std::vector<double>, std::vector<double>, std::vector<double>, std::vector<double>,
                         std::vector<double>, std::vector<int64_t>, std::vector<int64_t>>;
  static LastResult<Key, PoolScores> last;
  return last.get(Key{p.H, in.q, in.w, in.k, in.gate, in.ape, in.ctx, in.start}, [&] {
    PoolScores r;
    for (int64_t b = 0; b < p.B; ++b) {
      r.mag.emplace_back();
      r.s.push_back(kpool_indexer_scores(p, in, b, &r.mag.back()));
    }
    for (int64_t t = 0; t < p.L; ++t)
      r.token_hash.push_back(fnv(in.gate.data() + t * p.D, p.D, fnv(in.k.data() + t * p.D, p.D, 14695981039346656037ull)));
    return r;
  });
}

// The tie classes of row b's pools: pools whose 4 tokens hash alike, confirmed equal row by row.
std::vector<int64_t> pool_ties(const KpoolIndexerParams& p, const KpoolInputs& in, const PoolScores& ps, int64_t b, int64_t P) {
  const int64_t s0 = in.start[static_cast<size_t>(b)];
  std::vector<double> sig(static_cast<size_t>(P * kKpoolSize));
  for (int64_t i = 0; i < P * kKpoolSize; ++i) std::memcpy(&sig[static_cast<size_t>(i)], &ps.token_hash[static_cast<size_t>(s0 + i)], 8);
  std::vector<int64_t> cls = identical_rows(sig, P, kKpoolSize);
  auto same = [&](int64_t a, int64_t c) {
    const size_t n = static_cast<size_t>(kKpoolSize * p.D);
    const size_t ta = static_cast<size_t>((s0 + kKpoolSize * a) * p.D), tc = static_cast<size_t>((s0 + kKpoolSize * c) * p.D);
    return std::equal(in.k.begin() + ta, in.k.begin() + ta + n, in.k.begin() + tc) &&
           std::equal(in.gate.begin() + ta, in.gate.begin() + ta + n, in.gate.begin() + tc);
  };
  for (int64_t i = 0; i < P; ++i)
    if (cls[static_cast<size_t>(i)] >= 0 && cls[static_cast<size_t>(i)] != i && !same(cls[static_cast<size_t>(i)], i)) cls[static_cast<size_t>(i)] = -1;
  return cls;
}

struct IdFaults {
  int64_t outside = 0, duplicate = 0, partial_pool = 0, tail = 0, sentinels = 0;
};

// The candidate's pools of one row, or false when its ids break the layout (kpool_indexer.h).
bool row_pools(const double* ids, int64_t slots, int64_t topk, int64_t s0, int64_t e, std::vector<int64_t>& pools, IdFaults& why) {
  const int64_t P = (e - s0) / kKpoolSize, tail0 = s0 + kKpoolSize * P;
  std::vector<int> count(static_cast<size_t>(P), 0);
  std::vector<char> seen(static_cast<size_t>(e - s0), 0);
  int64_t minus = 0, tail = 0;
  bool ok = true;
  for (int64_t j = 0; j < slots; ++j) {
    const double x = ids[j];
    if (x == -1.0) { ++minus; continue; }
    if (!(x >= static_cast<double>(s0) && x < static_cast<double>(e)) || x != std::floor(x)) { ++why.outside; ok = false; continue; }
    const int64_t t = static_cast<int64_t>(x);
    if (seen[static_cast<size_t>(t - s0)]++) { ++why.duplicate; ok = false; continue; }
    if (t >= tail0) ++tail;
    else ++count[static_cast<size_t>((t - s0) / kKpoolSize)];
  }
  pools.clear();
  for (int64_t i = 0; i < P; ++i) {
    if (count[static_cast<size_t>(i)] == kKpoolSize) pools.push_back(i);
    else if (count[static_cast<size_t>(i)] != 0) { ++why.partial_pool; ok = false; }
  }
  if (tail != e - tail0) { ++why.tail; ok = false; }
  if (minus != slots - kKpoolSize * std::min(P, topk) - (e - tail0)) { ++why.sentinels; ok = false; }
  return ok;
}

}  // namespace

std::vector<OpMeasure> kpool_indexer_measure(const KpoolIndexerParams& p, const KpoolInputs& in,
                                             const std::vector<double>& ref_ids, const std::vector<double>& ids, double u) {
  const std::shared_ptr<const PoolScores> all = scores_of(p, in);
  const double terms = static_cast<double>(p.D + p.H + 24);
  const int64_t S = p.slots();
  TopkSetTotals totals;
  int64_t invalid = 0;
  IdFaults why;
  std::vector<int64_t> ref, cand;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t s0 = in.start[static_cast<size_t>(b)], e = in.ctx[static_cast<size_t>(b)], P = (e - s0) / kKpoolSize;
    const std::vector<double>& s = all->s[static_cast<size_t>(b)];
    std::vector<double> tol(s.size());
    for (size_t i = 0; i < s.size(); ++i) tol[i] = terms * u * all->mag[static_cast<size_t>(b)][i];
    ref.clear();
    for (int64_t j = 0; j < std::min(P, p.topk); ++j)
      ref.push_back((static_cast<int64_t>(ref_ids[static_cast<size_t>(b * S + kKpoolSize * j)]) - s0) / kKpoolSize);
    if (!row_pools(ids.data() + b * S, S, p.topk, s0, e, cand, why)) ++invalid;
    totals.add(judge_topk_row(s, tol, ref, cand, pool_ties(p, in, *all, b, P)));
  }
  TopkSetDetails detail;
  detail.misses_wide = fmt::format("pools selected or left out that no score error within (D + H + 24) u A explains, u = 2^{:.1f}; {} "
                                   "pool misses in all, the farthest {:.3g} bounds past", std::log2(u), totals.misses, totals.widest);
  detail.tie_breaks = "rows selecting pool j over a pool i < j with identical tokens (the tie rule: lower pool)";
  detail.invalid_ids = fmt::format("rows whose ids are not whole pools, the ragged tail and -1 sentinels ({} ids outside [start, ctx), "
                                   "{} duplicates, {} partial pools, {} rows with a wrong tail, {} with a wrong sentinel count)",
                                   why.outside, why.duplicate, why.partial_pool, why.tail, why.sentinels);
  detail.recall = "mean over the rows of |C n R| / |R| (pools)";
  detail.jaccard = "mean over the rows of |C n R| / |C u R| (pools)";
  detail.misses = "pools in the symmetric differences of the rows' sets";
  return topk_set_measures(totals, invalid, detail);
}

namespace {

std::vector<double> read(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  t.read(0, v);
  return v;
}
std::vector<int64_t> ints(const Tensor& t) {
  const std::vector<double> v = read(t);
  return std::vector<int64_t>(v.begin(), v.end());
}

KpoolInputs read_inputs(const Case& c, const TensorMap& in) {
  return kpool_indexer_inputs(kpool_indexer_params(c), in.at("q"), in.at("w"), in.at("k"), in.at("gate"), in.at("ape"),
                              ints(in.at("ctx")), ints(in.at("start")));
}

void validate(const Case& c) {
  indexer_check_positive("kpool_indexer", c);
  kpool_indexer_check_params(kpool_indexer_params(c));
  indexer_check_lens_and_sizes("kpool_indexer", c);
  checked_product("kpool_indexer: B*slots", {c.integer("B"), kKpoolSize * c.integer("topk") + kKpoolSize});
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const KpoolIndexerParams p = kpool_indexer_params(c);
  return {{"q", {c.dtype(), {p.B, p.H, p.D}}},     {"w", {DType::f32, {p.B, p.H}}},
          {"k", {c.dtype(), {p.L, p.D}}},           {"gate", {c.dtype(), {p.L, p.D}}},
          {"ape", {DType::f32, {kKpoolSize, p.D}}}, {"ctx", {DType::i32, {p.B}}},
          {"start", {DType::i32, {p.B}}}};
}

void check_inputs(const Case& c, const TensorMap& in) {
  check_inputs_exact(c, in, inputs(c));
  std::vector<int64_t> ctx, start;
  kpool_indexer_ranges(c, ctx, start);
  const std::vector<int64_t> got_ctx = ints(in.at("ctx")), got_start = ints(in.at("start"));
  for (size_t b = 0; b < ctx.size(); ++b)
    if (got_ctx[b] != ctx[b] || got_start[b] != start[b])
      throw InputError(fmt::format("kpool_indexer: row {} stores [start, ctx) = [{}, {}), the case's is [{}, {})", b,
                                   got_start[b], got_ctx[b], start[b], ctx[b]));
}

RefOutputs reference(const Case& c, const TensorMap& in, Tier tier, int64_t) {
  return {{"indices", kpool_indexer_reference(tier, kpool_indexer_params(c), read_inputs(c, in)).indices}};
}

// The scores of row 0's first pools that kCertifyOps buys at the next tier (about 4 D exponentials
// and operations for the pooled key, H (2 D + 3) for the score, per pool).
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const KpoolIndexerParams p = kpool_indexer_params(c);
  const KpoolInputs x = read_inputs(c, in);
  const int64_t pools = std::max<int64_t>(1, (x.ctx[0] - x.start[0]) / kKpoolSize);
  const double per_pool = static_cast<double>(p.D * 40 + p.H * (2 * p.D + 3));
  Certification cert = certify_leading_rows(tier, pools, per_pool, [&](Tier t, int64_t n) {
    SampleOutputs s;
    kpool_indexer_pool_scores(t, p, x, n, s.y, s.y_tail);
    return s;
  });
  cert.sample = "pool scores of row 0, " + cert.sample + " (pools)";
  return cert;
}

std::vector<OpMeasure> measure(const Case& c, const CandidateInfo& cand, const TensorMap& in, const RefOutputs& ref,
                               const TensorMap& out) {
  return kpool_indexer_measure(kpool_indexer_params(c), read_inputs(c, in), ref.at("indices"), read(out.at("indices")),
                               indexer_unit_roundoff(cand));
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // Selection happens only past topk complete pools (notes/model-ops.md section 1.4).
      {"pools", {"<= topk", "> topk"},
       [](const Case& c) {
         std::vector<int64_t> ctx, start;
         kpool_indexer_ranges(c, ctx, start);
         bool below = false, above = false;
         for (size_t b = 0; b < ctx.size(); ++b) ((ctx[b] - start[b]) / kKpoolSize <= c.integer("topk") ? below : above) = true;
         std::vector<std::string> v;
         if (below) v.push_back("<= topk");
         if (above) v.push_back("> topk");
         return v;
       }},
      // The ragged tail (0 to 3 tokens) and the first valid token off the pool grid.
      {"tail", {"0", "1", "2", "3"},
       [](const Case& c) {
         std::vector<int64_t> ctx, start;
         kpool_indexer_ranges(c, ctx, start);
         std::vector<std::string> v;
         for (size_t b = 0; b < ctx.size(); ++b) {
           const std::string t = std::to_string((ctx[b] - start[b]) % kKpoolSize);
           if (std::find(v.begin(), v.end(), t) == v.end()) v.push_back(t);
         }
         return v;
       }},
  };
}

OpSpec spec() {
  OpSpec s;
  s.name = "kpool_indexer";
  s.doc = "k-pool indexer (GLM-5.3-Flash): pools of 4 keys from the first valid token, pool_key = sum_j softmax_j(gate + "
          "ape) k, S = sum_h w_h ReLU(q_h . pool_key D^-0.5); the top-k pools expanded to their tokens, the ragged tail "
          "appended unscored, -1 in the rest (4 topk + 3 slots)";
  s.params = {{"B", ParamKind::integer, "4", "rows (prefill tokens or decode sequences)", true},
              {"L", ParamKind::integer, "8192", "tokens in the cache", true},
              {"H", ParamKind::integer, "32", "indexer heads (32)"},
              {"D", ParamKind::integer, "128", "indexer head dim (128)"},
              {"topk", ParamKind::integer, "512", "pools selected per row (512: 2048 tokens)", true},
              {"lens", ParamKind::int_list, "", "per-row context lengths, '/'-separated, B of them, each in [1, L], "
               "start 0 (default: the last B tokens of a prefill of L; regime ragged: a cycle with starts 0..6)"},
              {"regime", ParamKind::text, "production", "input regime (driftgate list regimes)", true},
              {"dtype", ParamKind::text, "bf16", "dtype of the stored q, k and gate", true, {"f32", "bf16"}},
              {"seed", ParamKind::integer, "0", "RNG seed", true}};
  s.tensors = {{"q", TensorRole::input, "[B,H,D] indexer queries"},
               {"w", TensorRole::input, "[B,H] f32 head weights, used as given"},
               {"k", TensorRole::input, "[L,D] per-token keys (LayerNormed)"},
               {"gate", TensorRole::input, "[L,D] per-token pooling gates"},
               {"ape", TensorRole::input, "[4,D] f32 the pool's position embedding"},
               {"ctx", TensorRole::input, "[B] i32 end of each row's visible tokens"},
               {"start", TensorRole::input, "[B] i32 each row's first valid token (the pools start there)"},
               {"indices", TensorRole::output, "[B,4 topk + 3] i32 whole pools and the tail in any slot order, -1 in the rest",
                DType::i32}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.check_inputs = check_inputs;
  s.output_shapes = [](const Case& c) {
    const KpoolIndexerParams p = kpool_indexer_params(c);
    return std::map<std::string, std::vector<int64_t>>{{"indices", {p.B, p.slots()}}};
  };
  s.reference = reference;
  s.certify = certify;
  s.positions = [](const Case&) { return std::map<std::string, Positions>{}; };
  s.measure = measure;
  s.flops = [](const Case& c) {   // per pool: 4 D exps and ~6 D for the softmax and pooling, H (2 D + 3) for the score
    std::vector<int64_t> ctx, start;
    kpool_indexer_ranges(c, ctx, start);
    double pools = 0;
    for (size_t b = 0; b < ctx.size(); ++b) pools += static_cast<double>((ctx[b] - start[b]) / kKpoolSize);
    const double D = static_cast<double>(c.integer("D")), H = static_cast<double>(c.integer("H"));
    return pools * (10.0 * D + H * (2.0 * D + 3.0));
  };
  s.bytes = [](const Case& c, const Storage& st) {   // q, k, gate in; w, ape, ranges; ids (4 bytes) out
    const KpoolIndexerParams p = kpool_indexer_params(c);
    const double B = static_cast<double>(p.B), L = static_cast<double>(p.L), H = static_cast<double>(p.H), D = static_cast<double>(p.D);
    return (B * H * D + 2.0 * L * D) * st.input_bytes(c.dtype()) + 4.0 * (B * H + 4.0 * D + 2.0 * B) +
           4.0 * B * static_cast<double>(p.slots());
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(kpool_indexer, spec());

}  // namespace dg
