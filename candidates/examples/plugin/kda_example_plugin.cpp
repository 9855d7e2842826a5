// An example driftgate plugin: one KDA candidate, kda_plugin_recurrent_f32, built against
// driftgate/candidate_abi.h alone (no driftgate internals, no other dependency).
//
// It is the plain f32 token loop of KDA, per (sequence b, value head hv), h = hv / (HV / H):
//
//   S = h0[b, hv] (K x V, f32) or 0
//   for each token t:
//     q, k <- x * (1 / sqrt(sum x^2 + 1e-6)) when l2norm=1;  q <- q * scale (0: K^-1/2)
//     g    <- g[t, hv]                                            gate=pregated
//             -exp(A_log[hv]) * softplus(g[t, hv] + dt_bias[hv])  gate=softplus
//     beta <- beta[t, hv]  (beta=given)  or  sigmoid(beta[t, hv])  (beta=sigmoid)
//     S *= exp(g)[:, None];  r = (v - S^T k) * beta;  S += k r^T;  o[t, hv] = S^T q
//   ht[b, hv] = S
//
// Supported: gate pregated|softplus, beta given|sigmoid, l2norm on or off, h0 given or not, GVA
// (HV a multiple of H), the K-first state layout, inputs in F32, F64, BF16 or F16, host memory, any
// strides. Not supported, each answered DG_NOT_SUPPORTED with a message naming it (a NOT_SUPPORTED
// row, skipped by the default gate policy): gate=lower_bound, beta=sigmoid2, layout=vfirst, varlen
// (seqlens), device tensors. Outputs other than F32 are an error.
//
// Build it on its own against an installed driftgate (CMakeLists.txt beside this file):
//   cmake -S candidates/examples/plugin -B build-plugin -DCMAKE_PREFIX_PATH=<driftgate prefix>
//   cmake --build build-plugin
//   driftgate verify --plugin build-plugin/libkda_example_plugin.so --candidate kda_plugin_recurrent_f32
//     --case "kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)"
#include <driftgate/candidate_abi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr const char* kName = "kda_plugin_recurrent_f32";

const dg_candidate_info kCandidates[] = {
    {kName, "kda", "recurrent", DG_F32, DG_F32, DG_F32,
     "example plugin: f32 token loop (pregated|softplus gate, given|sigmoid beta, kfirst, no varlen)"},
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(std::string(kName) + ": " + what); }

// A case this kernel does not implement (a gate mode, a layout, varlen, device tensors): answered
// with DG_NOT_SUPPORTED, so driftgate reports NOT_SUPPORTED instead of an error.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void unsupported(const std::string& what) { throw Unsupported(std::string(kName) + ": " + what); }

// --- params_json: a small JSON reader, enough for the object driftgate passes -------------------
struct Json {
  enum Kind { null, boolean, number, string, array, object } kind = null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* get(const char* key) const {
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const char* text) : p_(text) {}
  Json parse() {
    Json v = value();
    skip();
    if (*p_) error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const char* what) { fail(std::string("params_json: ") + what); }
  void skip() { while (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r') ++p_; }
  bool literal(const char* s) {
    size_t n = std::strlen(s);
    if (std::strncmp(p_, s, n) != 0) return false;
    p_ += n;
    return true;
  }
  std::string text() {
    if (*p_++ != '"') error("expected a string");
    std::string s;
    while (*p_ && *p_ != '"') {
      if (*p_ == '\\') {
        ++p_;
        switch (*p_) {
          case 'n': s += '\n'; break;
          case 't': s += '\t'; break;
          case 'u': error("\\u escapes are not expected here");
          case '\0': error("unterminated string");
          default: s += *p_;   // \" \\ \/
        }
        ++p_;
      } else {
        s += *p_++;
      }
    }
    if (*p_++ != '"') error("unterminated string");
    return s;
  }
  Json value() {
    skip();
    Json v;
    if (*p_ == '{') {
      v.kind = Json::object;
      ++p_;
      skip();
      if (*p_ == '}') { ++p_; return v; }
      while (true) {
        skip();
        std::string key = text();
        skip();
        if (*p_++ != ':') error("expected ':'");
        v.members.emplace_back(std::move(key), value());
        skip();
        if (*p_ == ',') { ++p_; continue; }
        if (*p_++ != '}') error("expected ',' or '}'");
        return v;
      }
    }
    if (*p_ == '[') {
      v.kind = Json::array;
      ++p_;
      skip();
      if (*p_ == ']') { ++p_; return v; }
      while (true) {
        v.items.push_back(value());
        skip();
        if (*p_ == ',') { ++p_; continue; }
        if (*p_++ != ']') error("expected ',' or ']'");
        return v;
      }
    }
    if (*p_ == '"') { v.kind = Json::string; v.str = text(); return v; }
    if (literal("true")) { v.kind = Json::boolean; v.b = true; return v; }
    if (literal("false")) { v.kind = Json::boolean; return v; }
    if (literal("null")) return v;
    char* end = nullptr;
    v.num = std::strtod(p_, &end);
    if (end == p_) error("unexpected character");
    v.kind = Json::number;
    p_ = end;
    return v;
  }
  const char* p_;
};

// --- the case -----------------------------------------------------------------------------------
struct Params {
  int64_t B = 1, T = 1, H = 1, HV = 1, K = 1, V = 1;
  bool softplus = false, beta_sigmoid = false, l2norm = true, has_h0 = false;
  float scale = 1;
};

Params parse_params(const char* params_json) {
  Json root = JsonParser(params_json).parse();
  const Json* op = root.get("op");
  if (!op || op->str != "kda") fail("only op kda is supported, got " + (op ? op->str : std::string("none")));
  const Json* params = root.get("params");
  if (!params || params->kind != Json::object) fail("params_json has no \"params\" object");
  auto field = [&](const char* key, Json::Kind kind) -> const Json& {
    const Json* v = params->get(key);
    if (!v || v->kind != kind) fail(std::string("parameter '") + key + "' is missing or mistyped");
    return *v;
  };
  auto integer = [&](const char* key) { return static_cast<int64_t>(field(key, Json::number).num); };
  auto text = [&](const char* key) { return field(key, Json::string).str; };
  auto flag = [&](const char* key) { return field(key, Json::boolean).b; };

  Params p;
  p.B = integer("B");
  p.T = integer("T");
  p.H = integer("H");
  p.HV = integer("HV") == 0 ? p.H : integer("HV");
  p.K = integer("K");
  p.V = integer("V");
  const std::string gate = text("gate"), beta = text("beta"), layout = text("layout");
  if (gate != "pregated" && gate != "softplus") unsupported("gate=" + gate + " is not supported (pregated, softplus)");
  if (beta != "given" && beta != "sigmoid") unsupported("beta=" + beta + " is not supported (given, sigmoid)");
  if (layout != "kfirst") unsupported("layout=" + layout + " is not supported (kfirst)");
  if (!field("seqlens", Json::array).items.empty()) unsupported("varlen (seqlens) is not supported");
  p.softplus = gate == "softplus";
  if (p.softplus && !flag("a_log")) fail("gate=softplus needs a_log=1");
  p.beta_sigmoid = beta == "sigmoid";
  p.l2norm = flag("l2norm");
  p.has_h0 = flag("h0");
  const double scale = field("scale", Json::number).num;
  p.scale = static_cast<float>(scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(p.K)));
  if (p.B < 1 || p.T < 1 || p.H < 1 || p.K < 1 || p.V < 1 || p.HV % p.H != 0) fail("inconsistent shape parameters");
  return p;
}

// --- tensors ------------------------------------------------------------------------------------
float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  float mag;
  if (exp == 0) mag = std::ldexp(static_cast<float>(man), -24);                       // zero, subnormal
  else if (exp == 31) mag = man ? NAN : INFINITY;
  else mag = std::ldexp(static_cast<float>(man | 0x400u), exp - 25);
  uint32_t bits;
  std::memcpy(&bits, &mag, 4);
  bits |= sign;
  std::memcpy(&mag, &bits, 4);
  return mag;
}

// A tensor found by name, with its shape checked; element offsets through its strides.
struct View {
  const dg_tensor* t = nullptr;

  int64_t offset(std::initializer_list<int64_t> idx) const {
    int64_t off = 0, d = 0;
    for (int64_t i : idx) off += i * t->strides[d++];
    return off;
  }
  float load(int64_t off) const {
    switch (t->dtype) {
      case DG_F32:
      case DG_TF32: return static_cast<const float*>(t->data)[off];
      case DG_F64: return static_cast<float>(static_cast<const double*>(t->data)[off]);
      case DG_BF16: {
        uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(t->data)[off]) << 16;
        float x;
        std::memcpy(&x, &bits, 4);
        return x;
      }
      case DG_F16: return f32_from_f16(static_cast<const uint16_t*>(t->data)[off]);
      default: fail(std::string("tensor '") + t->name + "' has a dtype this plugin does not read");
    }
  }
  // x[i] = element at `base` + i * stride of the last dimension.
  void load_row(int64_t base, int64_t n, float* x) const {
    const int64_t s = t->strides[t->rank - 1];
    for (int64_t i = 0; i < n; ++i) x[i] = load(base + i * s);
  }
  void store_row(int64_t base, int64_t n, const float* x) const {
    const int64_t s = t->strides[t->rank - 1];
    float* d = static_cast<float*>(t->data);
    for (int64_t i = 0; i < n; ++i) d[base + i * s] = x[i];
  }
};

View find(const dg_tensor* ts, int32_t n, const char* name, std::initializer_list<int64_t> shape, bool required = true) {
  for (int32_t i = 0; i < n; ++i) {
    if (std::strcmp(ts[i].name, name) != 0) continue;
    const dg_tensor& t = ts[i];
    if (t.device != DG_HOST) unsupported(std::string("tensor '") + name + "' is not in host memory (device tensors are not supported)");
    bool ok = t.rank == static_cast<int32_t>(shape.size()) && t.data != nullptr;
    int64_t d = 0;
    for (int64_t want : shape) ok = ok && t.shape[d++] == want;
    if (!ok) fail(std::string("tensor '") + name + "' does not have the shape the case implies");
    return View{&t};
  }
  if (required) fail(std::string("tensor '") + name + "' is missing");
  return View{};
}

void l2norm(float* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float rstd = 1.0f / std::sqrt(sum + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= rstd;
}

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void kda_recurrent(const Params& p, const dg_tensor* in, int32_t n_in, dg_tensor* out, int32_t n_out) {
  const int64_t B = p.B, T = p.T, H = p.H, HV = p.HV, K = p.K, V = p.V;
  const View q = find(in, n_in, "q", {B, T, H, K}), k = find(in, n_in, "k", {B, T, H, K});
  const View v = find(in, n_in, "v", {B, T, HV, V}), g = find(in, n_in, "g", {B, T, HV, K});
  const View beta = find(in, n_in, "beta", {B, T, HV});
  const View h0 = find(in, n_in, "h0", {B, HV, K, V}, p.has_h0);
  const View a_log = find(in, n_in, "A_log", {HV}, p.softplus);
  const View dt_bias = find(in, n_in, "dt_bias", {HV * K}, false);
  const View o = find(out, n_out, "o", {B, T, HV, V}), ht = find(out, n_out, "ht", {B, HV, K, V});
  for (const View* w : {&o, &ht})
    if (w->t->dtype != DG_F32) fail(std::string("output '") + w->t->name + "' must be F32");

  std::vector<float> S(static_cast<size_t>(K * V)), qt(K), kt(K), gt(K), bias(K, 0.0f), vt(V), r(V), ot(V);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / (HV / H);
      for (int64_t d = 0; d < K; ++d)
        if (p.has_h0) h0.load_row(h0.offset({b, hv, d, 0}), V, &S[static_cast<size_t>(d * V)]);
        else std::fill(S.begin() + d * V, S.begin() + (d + 1) * V, 0.0f);
      float a = 0;
      if (p.softplus) {
        a = std::exp(a_log.load(a_log.offset({hv})));
        if (dt_bias.t)
          for (int64_t d = 0; d < K; ++d) bias[static_cast<size_t>(d)] = dt_bias.load(dt_bias.offset({hv * K + d}));
      }
      for (int64_t t = 0; t < T; ++t) {
        q.load_row(q.offset({b, t, h, 0}), K, qt.data());
        k.load_row(k.offset({b, t, h, 0}), K, kt.data());
        v.load_row(v.offset({b, t, hv, 0}), V, vt.data());
        g.load_row(g.offset({b, t, hv, 0}), K, gt.data());
        float bt = beta.load(beta.offset({b, t, hv}));
        if (p.l2norm) {
          l2norm(qt.data(), K);
          l2norm(kt.data(), K);
        }
        for (float& x : qt) x *= p.scale;
        if (p.softplus)
          for (int64_t d = 0; d < K; ++d) gt[d] = -a * softplus(gt[d] + bias[d]);
        if (p.beta_sigmoid) bt = sigmoid(bt);
        std::fill(r.begin(), r.end(), 0.0f);
        for (int64_t d = 0; d < K; ++d) {   // S *= exp(g); r = S^T k
          const float decay = std::exp(gt[d]);
          float* row = &S[static_cast<size_t>(d * V)];
          for (int64_t j = 0; j < V; ++j) {
            row[j] *= decay;
            r[j] += kt[d] * row[j];
          }
        }
        for (int64_t j = 0; j < V; ++j) r[j] = (vt[j] - r[j]) * bt;
        std::fill(ot.begin(), ot.end(), 0.0f);
        for (int64_t d = 0; d < K; ++d) {   // S += k r^T; o = S^T q
          float* row = &S[static_cast<size_t>(d * V)];
          for (int64_t j = 0; j < V; ++j) {
            row[j] += kt[d] * r[j];
            ot[j] += qt[d] * row[j];
          }
        }
        o.store_row(o.offset({b, t, hv, 0}), V, ot.data());
      }
      for (int64_t d = 0; d < K; ++d) ht.store_row(ht.offset({b, hv, d, 0}), V, &S[static_cast<size_t>(d * V)]);
    }
  }
}

}  // namespace

DRIFTGATE_EXPORT int32_t driftgate_abi_version(void) { return DRIFTGATE_ABI_VERSION; }

DRIFTGATE_EXPORT int32_t driftgate_list(const dg_candidate_info** out, int32_t* count) {
  *out = kCandidates;
  *count = static_cast<int32_t>(sizeof(kCandidates) / sizeof(kCandidates[0]));
  return 0;
}

DRIFTGATE_EXPORT int32_t driftgate_run(const char* candidate, const char* params_json, const dg_tensor* inputs,
                                       int32_t n_inputs, dg_tensor* outputs, int32_t n_outputs, char* error,
                                       size_t error_size) {
  try {
    if (std::strcmp(candidate, kName) != 0) fail(std::string("unknown candidate '") + candidate + "'");
    kda_recurrent(parse_params(params_json), inputs, n_inputs, outputs, n_outputs);
    return 0;
  } catch (const Unsupported& e) {
    if (error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return DG_NOT_SUPPORTED;
  } catch (const std::exception& e) {
    if (error_size > 0) std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}
