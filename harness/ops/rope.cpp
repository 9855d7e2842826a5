// OpSpec of rope (reference/rope.h): the rotary position embedding of q and k, NeoX (GLM-4.x) and
// interleaved (GLM-5.x MLA) pairing, partial rotary. Its regimes and suites are in datasets/rope.cpp,
// its CPU candidates in candidates/cpu/rope.cpp.
//
// Positions are an input tensor (i64 [T]) laid out by the case (`layout`, `pos0`, `pos_max`:
// rope_positions), so a case of a few hundred tokens holds positions up to 2^20 and beyond; stored
// positions that differ from the case's layout are refused (the drift curve buckets by them).
//
// The drift curve of y over position is the phase-error view: a rotation keeps norms (|y| = |x| per
// pair), so a phase error dphi on pair i changes it by |dy| = 2 |sin(dphi/2)| |x_pair| ~ |dphi| |x_pair|,
// and a bucket's rms_ratio ||dy|| / ||y|| is the rms phase error in radians over its rotated dims
// (weighted by |x_pair|^2; pass-through dims dilute it by the share of ||x||^2 they hold, half for
// GLM-4.x's 64 of 128). Angles formed in f32 grow that error linearly with position, which the
// drift rule (growth exponent) judges on every case past policy drift_min_positions.
#include "harness/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/ops/op_common.h"
#include "reference/certify.h"

namespace dg {

RopeParams rope_params(const Case& c) {
  RopeParams p;
  p.T = c.integer("T");
  p.H = c.integer("H");
  p.D = c.integer("D");
  p.d_rope = c.integer("d_rope");
  p.style = c.text("style") == "gptj" ? RopeStyle::gptj : RopeStyle::neox;
  p.theta = c.real("theta");
  return p;
}

std::vector<int64_t> rope_positions(const Case& c) {
  const int64_t T = c.integer("T"), pos0 = c.integer("pos0");
  std::vector<int64_t> pos(static_cast<size_t>(T));
  if (c.text("layout") == "prefill") {
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = pos0 + t;
    return pos;
  }
  const int64_t span = c.integer("pos_max") - pos0;
  const double l = std::log2(static_cast<double>(span) + 1.0);
  for (int64_t t = 0; t < T; ++t) {
    const double q = std::nearbyint(std::exp2(l * static_cast<double>(t) / static_cast<double>(T - 1))) - 1.0;
    pos[static_cast<size_t>(t)] = pos0 + std::clamp<int64_t>(static_cast<int64_t>(q), 0, span);
  }
  pos.back() = pos0 + span;
  return pos;
}

namespace {

constexpr double kMaxTheta = 1e9;

void validate(const Case& c) {
  for (const char* n : {"T", "H"})
    if (c.integer(n) < 1) throw InputError(fmt::format("rope: {} must be >= 1, got {}", n, c.integer(n)));
  const int64_t D = c.integer("D"), d = c.integer("d_rope");
  if (d < 2 || d % 2 != 0 || d > D)
    throw InputError(fmt::format("rope: d_rope must be even, >= 2 and <= D = {}, got {}", D, d));
  const double theta = c.real("theta");
  if (!(theta > 1) || theta > kMaxTheta)
    throw InputError(fmt::format("rope: theta must be in (1, {:g}] (the models use 1e4 to 8e6), got {}", kMaxTheta, theta));
  checked_product("rope: T*H*D", {c.integer("T"), c.integer("H"), D});
  const int64_t T = c.integer("T"), pos0 = c.integer("pos0"), pos_max = c.integer("pos_max");
  if (pos0 < 0 || pos0 > kRopeMaxPosition)
    throw InputError(fmt::format("rope: pos0 must be in [0, {}], got {}", kRopeMaxPosition, pos0));
  if (c.text("layout") == "prefill") {
    if (pos_max != 0) throw InputError("rope: pos_max is only for layout=spread (prefill positions are pos0 + t)");
    if (T - 1 > kRopeMaxPosition - pos0)
      throw InputError(fmt::format("rope: the last position pos0 + T - 1 = {} is above {}", pos0 + T - 1, kRopeMaxPosition));
  } else {
    if (T < 2) throw InputError("rope: layout=spread needs T >= 2 (positions from pos0 to pos_max)");
    if (pos_max <= pos0 || pos_max > kRopeMaxPosition)
      throw InputError(fmt::format("rope: layout=spread needs pos0 < pos_max <= {}, got pos0={}, pos_max={}",
                                   kRopeMaxPosition, pos0, pos_max));
  }
}

std::map<std::string, InputSpec> inputs(const Case& c) {
  const RopeParams p = rope_params(c);
  return {{"x", {c.dtype(), {p.T, p.H, p.D}}}, {"positions", {DType::i64, {p.T}}}};
}

void check_inputs(const Case& c, const TensorMap& in) {
  check_inputs_exact(c, in, inputs(c));
  const Tensor& t = in.at("positions");
  const std::vector<int64_t> want = rope_positions(c);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.data<int64_t>()[i] != want[static_cast<size_t>(i)])
      throw InputError(fmt::format("positions[{}] = {} in the inputs disagrees with the case's layout ({})", i,
                                   t.data<int64_t>()[i], want[static_cast<size_t>(i)]));
}

// Tokens `tokens` of the case's inputs through the reference.
RopeReferenceResult run_tokens(const Case& c, const TensorMap& in, Tier tier, const std::vector<int64_t>& tokens, bool tails) {
  RopeParams p = rope_params(c);
  const Tensor& x = in.at("x");
  const Tensor& pos = in.at("positions");
  if (static_cast<int64_t>(tokens.size()) == p.T) return rope_reference(tier, p, x, pos, tails);
  p.T = static_cast<int64_t>(tokens.size());
  Tensor xs(x.dtype(), {p.T, p.H, p.D}), ps(DType::i64, {p.T});
  const size_t row = x.nbytes() / static_cast<size_t>(x.shape()[0]);
  for (size_t j = 0; j < tokens.size(); ++j) {
    std::memcpy(xs.bytes() + j * row, x.bytes() + static_cast<size_t>(tokens[j]) * row, row);
    ps.data<int64_t>()[j] = pos.data<int64_t>()[tokens[j]];
  }
  return rope_reference(tier, p, xs, ps, tails);
}

// Certification on n tokens evenly spaced over the case, the last token (the largest position of a
// spread layout) always among them, n as many as kCertifyOps buys at the upper tier: per token, the
// products of every head's pairs and about 50 operations for each pair's sin and cos.
Certification certify(const Case& c, const TensorMap& in, Tier tier) {
  const std::optional<Tier> up = next_tier(tier);
  if (!up) throw InputError("certify: no tier above " + std::string(tier_name(tier)) + " to certify it against");
  const RopeParams p = rope_params(c);
  const double per_token = static_cast<double>(p.d_rope / 2) * (6.0 * static_cast<double>(p.H) + 50.0);
  const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(kCertifyOps / (per_token * tier_cost(*up))), 1, p.T);
  std::vector<int64_t> tokens(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) tokens[static_cast<size_t>(j)] = n == 1 ? p.T - 1 : j * (p.T - 1) / (n - 1);
  Certification cert;
  cert.tier = tier;
  cert.against = *up;
  cert.sample = n == p.T ? "full case" : fmt::format("{} tokens evenly spaced over [0,{}), the last included", n, p.T);
  const RopeReferenceResult lo = run_tokens(c, in, tier, tokens, true), hi = run_tokens(c, in, *up, tokens, true);
  cert.ref_bits = agreement_bits(lo.y, hi.y, lo.y_tail, hi.y_tail);
  cert.ref_bits_max_elem = agreement_bits_max_elem(lo.y, hi.y, lo.y_tail, hi.y_tail);
  return cert;
}

// The op's measures: the error of each rotated pair split into phase and magnitude. For reference
// pair r = (r_a, r_b) and candidate pair c, dphi = atan2(r x c, r . c) and dm = |c| - |r|, over
// every (token, head, pair) with finite values and r != 0:
//   phase.y              sqrt(sum |r|^2 dphi^2 / sum |r|^2): the rms phase error in radians (a pair
//                        near 0 has an ill-defined phase and weighs little); gate: relative
//   magnitude.y          sqrt(sum dm^2 / sum |r|^2): the rms norm error (a rotation keeps norms:
//                        cos/sin off the unit circle, a scaled output); gate: relative
//   phase_top_octave.y   phase.y over the tokens in the highest octave of positions [2^k, max]
//                        (the drift curve's last bucket, at the longest context); report only
// The relative rules' floor is one f32 ulp (2^-23, in radians for the phase).
std::vector<OpMeasure> measure(const Case& c, const CandidateInfo&, const TensorMap&, const RefOutputs& ref,
                               const TensorMap& out) {
  const RopeParams p = rope_params(c);
  std::vector<double> cv(static_cast<size_t>(p.T * p.H * p.D));
  out.at("y").read(0, cv);
  const std::vector<double>& r = ref.at("y");
  const std::vector<int64_t> pos = rope_positions(c);
  const int64_t max_pos = *std::max_element(pos.begin(), pos.end());
  const int64_t top = max_pos > 0 ? int64_t{1} << (63 - __builtin_clzll(static_cast<uint64_t>(max_pos))) : 0;
  double w = 0, ph = 0, mag = 0, w_top = 0, ph_top = 0;
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.d_rope / 2; ++i) {
        int64_t a = 0, b = 0;
        rope_pair_dims(p.style, i, p.d_rope, a, b);
        const size_t base = static_cast<size_t>((t * p.H + h) * p.D);
        const double ra = r[base + static_cast<size_t>(a)], rb = r[base + static_cast<size_t>(b)];
        const double ca = cv[base + static_cast<size_t>(a)], cb = cv[base + static_cast<size_t>(b)];
        const double rr = ra * ra + rb * rb;
        if (!std::isfinite(ra + rb + ca + cb) || rr == 0) continue;   // the tensor metrics judge non-finite values
        const double dphi = std::atan2(ra * cb - rb * ca, ra * ca + rb * cb), dm = std::hypot(ca, cb) - std::sqrt(rr);
        w += rr;
        ph += rr * dphi * dphi;
        mag += dm * dm;
        if (pos[static_cast<size_t>(t)] >= top) w_top += rr, ph_top += rr * dphi * dphi;
      }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  return {{"phase.y", w > 0 ? std::sqrt(ph / w) : 0.0, nan, true, 0x1p-23,
           "rms phase error of the rotated pairs in radians, |r|^2-weighted"},
          {"magnitude.y", w > 0 ? std::sqrt(mag / w) : 0.0, nan, true, 0x1p-23,
           "rms error of the rotated pairs' norms, relative to their rms"},
          {"phase_top_octave.y", w_top > 0 ? std::sqrt(ph_top / w_top) : 0.0, nan, false, 0.0,
           fmt::format("phase.y over the tokens at positions [{}, {}]; report only", top, max_pos)}};
}

std::vector<CoverageAxis> coverage_axes() {
  return {
      // Partial rotary (GLM-4.x: 64 of 128) is where the frequencies' exponent (over d_rope, not D)
      // and the pass-through dims show; full rotary is the MLA rope slice.
      {"rotary", {"full (d_rope = D)", "partial (d_rope < D)"},
       [](const Case& c) {
         return std::vector<std::string>{c.integer("d_rope") == c.integer("D") ? "full (d_rope = D)" : "partial (d_rope < D)"};
       }},
      // The largest position: past a 16-bit counter, past 2^20 (1M contexts, where an f32 angle is
      // off by 2^-4 rad), near 2^24 (the last integers an f32 holds).
      {"max position", {"< 2^16", ">= 2^16", ">= 2^20", ">= 2^24 - 2^16"},
       [](const Case& c) {
         const int64_t m = rope_positions(c).back();
         std::vector<std::string> v{m < (1 << 16) ? "< 2^16" : ">= 2^16"};
         if (m >= (1 << 20)) v.push_back(">= 2^20");
         if (m >= kRopeMaxPosition - (1 << 16)) v.push_back(">= 2^24 - 2^16");
         return v;
       }},
      // The models' bases: 1e4 (the original), 1e6 (GLM-4.x, GLM-5), 8e6 (GLM-5.2/5.3).
      {"theta", {"1e4", "1e6", "8e6"},
       [](const Case& c) {
         const double t = c.real("theta");
         return std::vector<std::string>{t == 1e4 ? "1e4" : t == 1e6 ? "1e6" : t == 8e6 ? "8e6" : fmt::format("{:g}", t)};
       }},
  };
}

std::vector<ParamSpec> params() {
  return {{"T", ParamKind::integer, "64", "tokens", true},
          {"H", ParamKind::integer, "8", "heads (q heads, or 1 for MLA's shared k_pe)", true},
          {"D", ParamKind::integer, "128", "head_dim: dims d_rope .. D-1 pass through", true},
          {"d_rope", ParamKind::integer, "64", "rotated dims (even, <= D): 64 of 128 for GLM-4.x, the 64-d MLA slice", true},
          {"style", ParamKind::text, "neox", "pairing: neox (i, i + d_rope/2; GLM-4.x) or gptj (2i, 2i+1; GLM-5.x MLA)", false,
           {"neox", "gptj"}},
          {"theta", ParamKind::real, "1000000", "rope base, in (1, 1e9]: 1e4, 1e6 (GLM-4.x, GLM-5), 8e6 (GLM-5.2/5.3)"},
          {"layout", ParamKind::text, "prefill", "positions: prefill (pos0 + t) or spread (pos0 .. pos_max, geometric)",
           false, {"prefill", "spread"}},
          {"pos0", ParamKind::integer, "0", "the first position (<= 2^24)"},
          {"pos_max", ParamKind::integer, "0", "layout=spread: the last position (<= 2^24)"},
          {"regime", ParamKind::text, "glm4", "input regime (driftgate list regimes)", true},
          {"dtype", ParamKind::text, "bf16", "dtype of the stored x and y", true, {"bf16", "f32"}},
          {"seed", ParamKind::integer, "0", "RNG seed", true}};
}

OpSpec spec() {
  OpSpec s;
  s.name = "rope";
  s.doc = "rotary position embedding of q/k heads: pairs of the first d_rope dims rotated by pos * theta^(-2i/d_rope) "
          "(neox or gptj pairing), the rest passed through; angles exact (the drift curve's rms_ratio per position "
          "bucket is the rms phase error in radians)";
  s.params = params();
  s.tensors = {{"x", TensorRole::input, "[T,H,D] q or k"},
               {"positions", TensorRole::input, "[T] i64 positions, laid out by the case (layout, pos0, pos_max)"},
               {"y", TensorRole::output, "[T,H,D]"}};
  s.coverage = coverage_axes();
  s.validate = validate;
  s.inputs = inputs;
  s.output_shapes = [](const Case& c) {
    return std::map<std::string, std::vector<int64_t>>{{"y", {c.integer("T"), c.integer("H"), c.integer("D")}}};
  };
  s.check_inputs = check_inputs;
  s.reference = [](const Case& c, const TensorMap& in, Tier tier, int64_t) {
    return RefOutputs{{"y", rope_reference(tier, rope_params(c), in.at("x"), in.at("positions")).y}};
  };
  s.certify = certify;
  s.measure = measure;
  s.positions = [](const Case& c) {
    return std::map<std::string, Positions>{{"y", Positions{rope_positions(c), c.integer("H") * c.integer("D")}}};
  };
  s.flops = [](const Case& c) {   // 4 products and 2 sums per pair, about 20 per pair's angle, sin and cos
    const RopeParams p = rope_params(c);
    return static_cast<double>(p.T * (p.d_rope / 2)) * (6.0 * static_cast<double>(p.H) + 20.0);
  };
  s.bytes = [](const Case& c, const Storage& st) {   // x in, y out, the positions
    const double n = static_cast<double>(c.integer("T") * c.integer("H") * c.integer("D"));
    return n * (st.input_bytes(c.dtype()) + st.output_bytes(c.dtype())) + 8.0 * static_cast<double>(c.integer("T"));
  };
  return s;
}

}  // namespace

DG_REGISTER_OP(rope, spec());

}  // namespace dg
