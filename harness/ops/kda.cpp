// OpSpecs of kda and kda_decode: parameters, tensors, constraints, reference and driver. kda_decode
// lives here, not in a file of its own: it is KDA's decode form, made by the same spec function
// (kda_spec(decode)) from the same parameters, reference and regimes (datasets/kda.cpp).
#include "harness/ops/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "harness/cases/registry.h"
#include "harness/core/threads.h"
#include "harness/ops/op_common.h"
#include "reference/kda.h"

namespace dg {

KdaParams kda_params(const Case& c) {
  KdaParams p;
  p.T = c.integer("T");
  p.B = c.integer("B");
  p.H = c.integer("H");
  p.HV = c.integer("HV") == 0 ? p.H : c.integer("HV");
  p.K = c.integer("K");
  p.V = c.integer("V");
  const std::string& gate = c.text("gate");
  p.gate = gate == "softplus" ? KdaGate::softplus : gate == "lower_bound" ? KdaGate::lower_bound : KdaGate::pregated;
  p.lower_bound = c.real("lb");
  p.use_A_log = c.boolean("a_log");
  const std::string& beta = c.text("beta");
  p.beta = beta == "sigmoid" ? KdaBeta::sigmoid : beta == "sigmoid2" ? KdaBeta::sigmoid2 : KdaBeta::given;
  p.qk_l2norm = c.boolean("l2norm");
  p.scale = c.real("scale");
  p.has_h0 = c.boolean("h0");
  p.state_v_first = c.text("layout") == "vfirst";
  if (c.op() == "kda") {
    std::vector<int64_t> lens = c.int_list("seqlens");
    if (!lens.empty()) {
      p.cu_seqlens.push_back(0);
      for (int64_t len : lens) {
        int64_t end = 0;   // kda_validate refuses a sum past T before any caller reads these
        if (__builtin_add_overflow(p.cu_seqlens.back(), len, &end)) end = INT64_MAX;
        p.cu_seqlens.push_back(end);
      }
      if (p.cu_seqlens.back() < p.T) p.cu_seqlens.push_back(p.T);   // the rest is one last segment
    }
  }
  return p;
}

// Copies token t of every sequence of a [B, T, ...] tensor into a [B, 1, ...] tensor.
Tensor token_slice(const Tensor& full, int64_t t) {
  std::vector<int64_t> shape = full.shape();
  int64_t B = shape[0], T = shape[1];
  shape[1] = 1;
  Tensor s(full.dtype(), shape);
  size_t row = s.nbytes() / static_cast<size_t>(B);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(s.bytes() + static_cast<size_t>(b) * row, full.bytes() + static_cast<size_t>(b * T + t) * row, row);
  return s;
}

std::vector<ParamSpec> kda_param_specs(bool varlen) {
  std::vector<ParamSpec> v = {
      {"T", ParamKind::integer, "1024", "tokens per sequence (kda_decode: decode steps); K/M suffixes: 64K, 1M", true},
      {"B", ParamKind::integer, "1", "sequences (kda_decode: sequences decoded together)"},
      {"H", ParamKind::integer, "1", "q/k heads", true},
      {"HV", ParamKind::integer, "0", "value heads (0: H); HV % H == 0 (GVA)"},
      {"K", ParamKind::integer, "128", "key head dim (<= 256)", true},
      {"V", ParamKind::integer, "128", "value head dim (<= 256)", true},
      {"gate", ParamKind::text, "pregated", "pregated: g is log-space; softplus: g = -exp(A_log) softplus(f + dt_bias); "
       "lower_bound: g = lb sigmoid(exp(A_log) (f + dt_bias))", false, {"pregated", "softplus", "lower_bound"}},
      {"lb", ParamKind::real, "-5", "lower bound of the lower_bound gate (< 0)"},
      {"a_log", ParamKind::boolean, "1", "gate uses A_log (lower_bound gate may omit it)"},
      {"beta", ParamKind::text, "given", "given | sigmoid: sigmoid(b) | sigmoid2: 2 sigmoid(b) (negative eigenvalues)",
       false, {"given", "sigmoid", "sigmoid2"}},
      {"l2norm", ParamKind::boolean, "1", "q, k <- x / sqrt(sum x^2 + 1e-6) inside the op"},
      {"scale", ParamKind::real, "0", "query scale (0: K^-1/2)"},
      {"h0", ParamKind::boolean, "0", "an initial state is given"},
      {"layout", ParamKind::text, "kfirst", "state layout of h0/ht: kfirst [K,V] or vfirst [V,K] per head", false,
       {"kfirst", "vfirst"}},
  };
  if (varlen)
    v.push_back({"seqlens", ParamKind::int_list, "",
                 "varlen: packed segment lengths, '/'-separated (B must be 1; tokens past their sum form one last segment)"});
  v.push_back({"regime", ParamKind::text, "kimi_linear", "input regime (driftgate list regimes)", true});
  v.push_back({"dtype", ParamKind::text, "bf16", "dtype of the stored q, k, v, g, beta", true, {"f64", "f32", "bf16", "f16"}});
  v.push_back({"seed", ParamKind::integer, "0", "RNG seed", true});
  return v;
}

std::vector<CoverageAxis> kda_coverage_axes(bool varlen) {
  auto pow2 = [](int64_t x) { return x > 0 && (x & (x - 1)) == 0; };
  std::vector<CoverageAxis> v = {
      // A wrong value-to-key head map shows only with H >= 2; ratios 2 and 4 are the production ones.
      {"GVA (HV/H, H >= 2)", {"none", "2", "4"},
       [](const Case& c) {
         const int64_t H = c.integer("H"), HV = c.integer("HV") == 0 ? H : c.integer("HV");
         if (HV == H) return std::vector<std::string>{"none"};
         return std::vector<std::string>{H >= 2 ? std::to_string(HV / H) : "H=1 only"};
       }},
      {"B", {"1", ">1"}, [](const Case& c) { return std::vector<std::string>{c.integer("B") > 1 ? ">1" : "1"}; }},
      {"head dims", {"powers of two", "odd"},
       [pow2](const Case& c) {
         return std::vector<std::string>{pow2(c.integer("K")) && pow2(c.integer("V")) ? "powers of two" : "odd"};
       }},
      {"scale", {"K^-1/2", "given"},
       [](const Case& c) { return std::vector<std::string>{c.real("scale") == 0 ? "K^-1/2" : "given"}; }},
  };
  if (!varlen) return v;   // decode ops: T counts steps
  // 16-bit position counters wrap past 2^16 tokens; a partial last chunk of 64 tokens.
  v.push_back({"T", {"T % 64 != 0", "> 2^16"}, [](const Case& c) {
                 std::vector<std::string> out;
                 if (c.integer("T") % 64 != 0) out.push_back("T % 64 != 0");
                 if (c.integer("T") > 65536) out.push_back("> 2^16");
                 if (c.integer("T") > 1048576) out.push_back("> 2^20");
                 return out;
               }});
    v.push_back({"varlen segments", {"none", "1 token", "empty", "several"}, [](const Case& c) {
                   const std::vector<int64_t> lens = c.int_list("seqlens");
                   std::vector<std::string> out;
                   if (lens.empty()) out.push_back("none");
                   for (int64_t n : lens) {
                     if (n == 1 && std::find(out.begin(), out.end(), "1 token") == out.end()) out.push_back("1 token");
                     if (n == 0 && std::find(out.begin(), out.end(), "empty") == out.end()) out.push_back("empty");
                   }
                   if (lens.size() > 1) out.push_back("several");
                   return out;
                 }});
  return v;
}

void kda_validate(const Case& c) {
  const std::string& op = c.op();
  auto fail = [&](const std::string& what) { throw InputError(fmt::format("{}: {}", op, what)); };
  for (const char* n : {"T", "B", "H", "K", "V"})
    if (c.integer(n) < 1) fail(fmt::format("{} must be >= 1, got {}", n, c.integer(n)));
  if (c.integer("HV") < 0) fail(fmt::format("HV must be >= 0, got {}", c.integer("HV")));
  // seqlens before kda_params reads them: every length >= 0 and the sum, in checked arithmetic, <= T.
  if (op == "kda") {
    const std::vector<int64_t> lens = c.int_list("seqlens");
    if (!lens.empty() && c.integer("B") != 1) fail(fmt::format("varlen (seqlens) needs B=1, got B={}", c.integer("B")));
    int64_t sum = 0;
    for (int64_t len : lens) {
      if (len < 0) fail(fmt::format("seqlens must be >= 0, got {}", len));
      if (__builtin_add_overflow(sum, len, &sum) || sum > c.integer("T"))
        fail(fmt::format("seqlens sum exceeds T={}", c.integer("T")));
    }
    if (lens.size() > static_cast<size_t>(c.integer("T")) + 1)
      fail(fmt::format("{} seqlens for T={}: at most T+1 segments", lens.size(), c.integer("T")));
  }
  KdaParams p = kda_params(c);
  if (p.HV % p.H != 0) fail(fmt::format("HV % H must be 0 (GVA), got HV={} H={}", p.HV, p.H));
  if (p.K > 256) fail(fmt::format("K must be <= 256, got K={}", p.K));
  if (p.V > 256) fail(fmt::format("V must be <= 256, got V={}", p.V));
  if (!(p.lower_bound < 0)) fail(fmt::format("lb must be < 0, got {}", p.lower_bound));
  if (p.scale < 0) fail(fmt::format("scale must be >= 0, got {}", p.scale));
  if (!p.use_A_log && p.gate == KdaGate::softplus) fail("a_log=0 is only allowed with gate=lower_bound");
  // Every element count and index product the op forms, in checked arithmetic (the memory check
  // then sizes the case: harness/cases/case_memory.h).
  checked_product(op + ": B*T*H*K", {p.B, p.T, p.H, p.K});
  checked_product(op + ": B*T*HV*V", {p.B, p.T, p.HV, p.V});
  checked_product(op + ": B*T*HV*K", {p.B, p.T, p.HV, p.K});
  checked_product(op + ": B*HV*K*V", {p.num_seqs(), p.HV, p.K, p.V});
}

// The state pools of the fused decode ops (kda.h).
void kda_to_slots(const Tensor& from, Tensor& pool, int64_t B, bool into_pool) {
  const int64_t per = from.numel() / B;
  std::vector<double> buf(static_cast<size_t>(per));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t slot = kda_decode_slot(b, B);
    if (into_pool) {
      from.read(b * per, buf);
      pool.write(slot * per, buf);
    } else {
      pool.read(slot * per, buf);
      const_cast<Tensor&>(from).write(b * per, buf);
    }
  }
}

namespace {

std::map<std::string, std::vector<int64_t>> kda_output_shapes(const Case& c) {
  KdaParams p = kda_params(c);
  std::vector<int64_t> state = p.state_v_first ? std::vector<int64_t>{p.num_seqs(), p.HV, p.V, p.K}
                                               : std::vector<int64_t>{p.num_seqs(), p.HV, p.K, p.V};
  return {{"o", {p.B, p.T, p.HV, p.V}}, {"ht", state}};
}

// The stored inputs: q, k, v, g, beta in the case's dtype; A_log, dt_bias and h0 in f32;
// cu_seqlens (varlen cases) in i64 (datasets/kda.cpp writes exactly these).
std::map<std::string, InputSpec> kda_inputs(const Case& c) {
  KdaParams p = kda_params(c);
  const DType dt = c.dtype();
  std::map<std::string, InputSpec> want = {
      {"q", {dt, {p.B, p.T, p.H, p.K}}}, {"k", {dt, {p.B, p.T, p.H, p.K}}}, {"v", {dt, {p.B, p.T, p.HV, p.V}}},
      {"g", {dt, {p.B, p.T, p.HV, p.K}}}, {"beta", {dt, {p.B, p.T, p.HV}}}};
  if (p.gate != KdaGate::pregated) {
    if (p.use_A_log) want["A_log"] = {DType::f32, {p.HV}};
    want["dt_bias"] = {DType::f32, {p.HV * p.K}};
  }
  if (p.has_h0) want["h0"] = {DType::f32, kda_output_shapes(c).at("ht")};
  if (!p.cu_seqlens.empty()) want["cu_seqlens"] = {DType::i64, {static_cast<int64_t>(p.cu_seqlens.size())}};
  return want;
}

// Every stored input exactly as kda_inputs says, finite; cu_seqlens consistent with the case.
void kda_check_inputs(const Case& c, const TensorMap& in) {
  KdaParams p = kda_params(c);
  check_inputs_exact(c, in, kda_inputs(c));
  auto cu = in.find("cu_seqlens");
  if (cu != in.end()) {
    const Tensor& t = cu->second;
    if (t.rank() != 1 || t.numel() < 2)
      throw InputError(fmt::format("cu_seqlens must be a 1-D tensor of N+1 offsets, got shape {}", t.shape_str()));
    std::vector<int64_t> offs;
    for (int64_t i = 0; i < t.numel(); ++i) offs.push_back(t.data<int64_t>()[i]);   // i64: checked above
    if (offs.front() != 0) throw InputError(fmt::format("cu_seqlens must start at 0, got {}", offs.front()));
    for (size_t i = 1; i < offs.size(); ++i)
      if (offs[i] < offs[i - 1])
        throw InputError(fmt::format("cu_seqlens out of order at index {}: {} < {}", i, offs[i], offs[i - 1]));
    if (offs.back() != p.T)
      throw InputError(fmt::format("cu_seqlens ends at {}, expected T={}", offs.back(), p.T));
    if (offs != p.cu_seqlens)
      throw InputError("cu_seqlens in the inputs disagrees with the case's seqlens");
  }
}

RefOutputs kda_ref(const Case& c, const TensorMap& in, Tier tier, int64_t max_tokens) {
  KdaReferenceOptions opt;
  opt.max_tokens = max_tokens;
  opt.threads = num_threads();
  KdaReferenceResult r = kda_reference(tier, kda_params(c), in, opt);
  RefOutputs out;
  out["o"] = std::move(r.o);
  out["ht"] = std::move(r.ht);
  return out;
}

// The certification budget: about 2^18 dd token-heads of the case's K and V (a few seconds).
Certification kda_certify(const Case& c, const TensorMap& in, Tier tier) {
  return certify_kda(tier, kda_params(c), in, int64_t{1} << 18);
}

std::map<std::string, Positions> kda_positions(const Case& c) {
  KdaParams p = kda_params(c);
  Positions pos;
  pos.inner = p.HV * p.V;
  pos.token_position.resize(static_cast<size_t>(p.B * p.T));
  for (int64_t n = 0; n < p.num_seqs(); ++n)
    for (int64_t t = p.seq_begin(n); t < p.seq_end(n); ++t)
      pos.token_position[static_cast<size_t>(t)] = t - p.seq_begin(n);
  return {{"o", pos}};
}

double kda_flops(const Case& c) {
  KdaParams p = kda_params(c);
  return p.flops_per_token_head() * static_cast<double>(p.B * p.T * p.HV);
}

// Inputs and outputs once, plus the state: prefill writes it once (and reads h0); a decode case
// reads and writes every sequence's state at every step, in the candidate's state dtype.
double kda_bytes(const Case& c, const Storage& s) {
  KdaParams p = kda_params(c);
  double tokens = static_cast<double>(p.B * p.T);
  double in = tokens * s.input_bytes(c.dtype()) * static_cast<double>(2 * p.H * p.K + p.HV * p.V + p.HV * p.K + p.HV);
  double out = tokens * s.output_bytes(c.dtype()) * static_cast<double>(p.HV * p.V);
  double state = static_cast<double>(p.num_seqs() * p.HV * p.K * p.V) * s.state_bytes();
  if (c.op() == "kda_decode") return in + out + 2.0 * state * static_cast<double>(p.T);
  return in + out + state * (p.has_h0 ? 2.0 : 1.0);
}

// kda_decode: the state pool lives in the candidate's state dtype between steps; sequence b uses
// pool slot kda_decode_slot(b). After T steps, ht is the pool read back in sequence order.
void kda_decode_drive(const Candidate& cand, const Case& c, const TensorMap& in, TensorMap& out) {
  KdaParams p = kda_params(c);
  Tensor& o = out.at("o");
  Tensor& ht = out.at("ht");
  int64_t per_seq = p.HV * p.K * p.V;
  Tensor pool(cand.info().state_dtype, ht.shape());
  if (p.has_h0) {
    const Tensor& h0 = in.at("h0");
    std::vector<double> buf(static_cast<size_t>(per_seq));
    for (int64_t b = 0; b < p.B; ++b) {
      h0.read(b * per_seq, buf);
      pool.write(kda_decode_slot(b, p.B) * per_seq, buf);
    }
  }
  if (pool_device(cand.info()) != Device::host) pool = pool.to(pool_device(cand.info()));
  Tensor indices(DType::i64, {p.B});
  for (int64_t b = 0; b < p.B; ++b) indices.data<int64_t>()[b] = kda_decode_slot(b, p.B);
  Case step = c.with("T", "1");
  TensorMap step_in;
  step_in["state_indices"] = indices;
  for (const char* name : {"A_log", "dt_bias"})
    if (in.count(name)) step_in[name] = in.at(name);
  size_t o_row = static_cast<size_t>(p.HV * p.V) * static_cast<size_t>(info(o.dtype()).storage_bytes);
  for (int64_t t = 0; t < p.T; ++t) {
    for (const char* name : {"q", "k", "v", "g", "beta"}) step_in[name] = token_slice(in.at(name), t);
    TensorMap step_out;
    step_out["o"] = Tensor(o.dtype(), {p.B, 1, p.HV, p.V});
    step_out["state"] = pool;   // shared storage: updated in place by the candidate
    cand.run(step, step_in, step_out);
    for (int64_t b = 0; b < p.B; ++b)
      std::memcpy(o.bytes() + static_cast<size_t>(b * p.T + t) * o_row, step_out["o"].bytes() + static_cast<size_t>(b) * o_row, o_row);
  }
  if (pool.device() != Device::host) pool = pool.to(Device::host);
  std::vector<double> buf(static_cast<size_t>(per_seq));
  for (int64_t b = 0; b < p.B; ++b) {
    pool.read(kda_decode_slot(b, p.B) * per_seq, buf);
    ht.write(b * per_seq, buf);
  }
}

OpSpec kda_spec(bool decode) {
  OpSpec s;
  s.name = decode ? "kda_decode" : "kda";
  s.doc = decode ? "KDA decode: T steps of one token for B sequences against a paged state pool kept in the candidate's state dtype"
                 : "KDA prefill: Kimi Delta Attention over whole sequences (o and the final state)";
  s.params = kda_param_specs(!decode);
  s.coverage = kda_coverage_axes(!decode);
  s.tensors = {
      {"q", TensorRole::input, "[B,T,H,K]"}, {"k", TensorRole::input, "[B,T,H,K]"},
      {"v", TensorRole::input, "[B,T,HV,V]"}, {"g", TensorRole::input, "[B,T,HV,K] log-space g, or raw f for in-op gates"},
      {"beta", TensorRole::input, "[B,T,HV] beta, or its logit"}, {"A_log", TensorRole::input, "[HV] f32 (in-op gates)"},
      {"dt_bias", TensorRole::input, "[HV*K] f32 (in-op gates)"}, {"h0", TensorRole::input, "[N,HV,K,V] f32 initial state"},
      {"o", TensorRole::output, "[B,T,HV,V]"}, {"ht", TensorRole::output, "[N,HV,K,V] final state (state dtype)"}};
  if (!decode) s.tensors.push_back({"cu_seqlens", TensorRole::input, "[N+1] i64 varlen offsets"});
  s.validate = kda_validate;
  s.output_shapes = kda_output_shapes;
  s.inputs = kda_inputs;
  s.check_inputs = kda_check_inputs;
  s.reference = kda_ref;
  s.certify = kda_certify;
  s.positions = kda_positions;
  if (decode) s.drive = kda_decode_drive;
  s.flops = kda_flops;
  s.bytes = kda_bytes;
  return s;
}

}  // namespace

DG_REGISTER_OP(kda, kda_spec(false));
DG_REGISTER_OP(kda_decode, kda_spec(true));

}  // namespace dg
