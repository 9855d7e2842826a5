// Plugin loader: dlopen a shared library built against driftgate/candidate_abi.h, check its ABI
// version, and register each candidate it lists with a run function that hands the harness's
// tensors to driftgate_run as descriptors (in a candidate process); or list it in a worker and
// register proxies (in the process that judges; plugin.h).
#include "harness/isolation/plugin.h"

#include <dlfcn.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "driftgate/candidate_abi.h"
#include "harness/core/json_limits.h"
#include "harness/report/report.h"
#include "harness/core/threads.h"
#include "harness/isolation/worker.h"

namespace dg {
namespace {

namespace fs = std::filesystem;

struct Plugin {
  std::string path;     // canonical
  dg_run_fn run = nullptr;
  std::mutex mutex;     // the ABI promises that driftgate_run is never called concurrently
  std::vector<CandidateInfo> infos;   // what it listed (its own names)
  std::set<std::string> prefixes;     // under which its candidates are registered ("" for none)
};

// Plugins listed in a worker (their specs, "PREFIX=canonical path" or the canonical path), and the
// proxies registered for them.
std::vector<std::string>& listed_plugins() {
  static std::vector<std::string> v;
  return v;
}
std::set<std::string>& proxy_names() {
  static std::set<std::string> v;
  return v;
}
std::map<std::string, std::string>& proxy_paths() {   // proxy name -> its plugin's canonical path
  static std::map<std::string, std::string> v;
  return v;
}

// Plugins are never unloaded: their candidates live in the registry until the process exits.
std::vector<std::unique_ptr<Plugin>>& plugins() {
  static std::vector<std::unique_ptr<Plugin>> v;
  return v;
}

std::optional<DType> from_abi(int32_t d) {
  switch (d) {
    case DG_F64: return DType::f64;
    case DG_F32: return DType::f32;
    case DG_TF32: return DType::tf32;
    case DG_BF16: return DType::bf16;
    case DG_F16: return DType::f16;
    case DG_F8_E4M3: return DType::e4m3;
    case DG_F8_E5M2: return DType::e5m2;
    case DG_I64: return DType::i64;
    case DG_I32: return DType::i32;
    default: return std::nullopt;
  }
}

dg_dtype to_abi(DType d) {
  switch (d) {
    case DType::f64: return DG_F64;
    case DType::f32: return DG_F32;
    case DType::tf32: return DG_TF32;
    case DType::bf16: return DG_BF16;
    case DType::f16: return DG_F16;
    case DType::e4m3: return DG_F8_E4M3;
    case DType::e5m2: return DG_F8_E5M2;
    case DType::i64: return DG_I64;
    case DType::i32: return DG_I32;
  }
  throw std::logic_error("to_abi: unknown dtype");
}

// Descriptors over a TensorMap, in key order: contiguous row-major strides, host memory.
struct Descriptors {
  std::vector<dg_tensor> tensors;
  std::vector<std::vector<int64_t>> strides;

  explicit Descriptors(const TensorMap& map) {
    strides.reserve(map.size());   // no reallocation: tensors point into it
    for (const auto& [name, t] : map) {
      std::vector<int64_t>& s = strides.emplace_back(t.shape().size(), 1);
      for (int d = t.rank() - 2; d >= 0; --d) s[static_cast<size_t>(d)] = s[static_cast<size_t>(d) + 1] * t.dim(d + 1);
      dg_tensor desc{};
      desc.name = name.c_str();
      desc.dtype = to_abi(t.dtype());
      desc.rank = t.rank();
      desc.shape = t.shape().data();
      desc.strides = s.data();
      // Inputs are passed as writable pointers by the C ABI; the harness hashes them before and
      // after every run, so a candidate that writes them is caught.
      desc.data = const_cast<std::byte*>(t.bytes());
      desc.device = t.device() == Device::cuda ? DG_CUDA : DG_HOST;
      desc.device_index = 0;
      tensors.push_back(desc);
    }
  }
};

RunFn plugin_run(Plugin* plugin, std::string candidate) {
  return [plugin, candidate](const Case& c, const TensorMap& in, TensorMap& out) {
    nlohmann::ordered_json pj = case_json(c);
    pj["threads"] = num_threads();   // the thread budget (candidate_abi.h)
    const std::string params = pj.dump();
    Descriptors din(in), dout(out);
    std::vector<char> error(4096, '\0');
    int32_t rc = 0;
    {
      std::lock_guard<std::mutex> lock(plugin->mutex);
      try {
        rc = plugin->run(candidate.c_str(), params.c_str(), din.tensors.data(), static_cast<int32_t>(din.tensors.size()),
                         dout.tensors.data(), static_cast<int32_t>(dout.tensors.size()), error.data(), error.size());
      } catch (...) {
        throw std::runtime_error(fmt::format("{}: a C++ exception escaped driftgate_run (plugin {}); a plugin must "
                                             "catch its exceptions and return nonzero with a message",
                                             candidate, plugin->path));
      }
    }
    error.back() = '\0';
    if (rc == DG_NOT_SUPPORTED) {   // the candidate's documented "not this case": a NOT_SUPPORTED row
      std::string msg = error.data();
      throw NotSupported(msg.empty() ? fmt::format("{}: does not support this case (driftgate_run returned DG_NOT_SUPPORTED)", candidate)
                                     : msg);
    }
    if (rc != 0) {
      std::string msg = error.data();
      if (msg.empty()) msg = fmt::format("{}: driftgate_run failed without a message", candidate);
      throw std::runtime_error(fmt::format("{} (driftgate_run returned {})", msg, rc));
    }
  };
}

bool valid_name(const std::string& s) {
  if (s.empty()) return false;
  for (char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) return false;
  return true;
}

std::string op_names() {
  std::string s;
  for (const OpSpec* o : all_ops()) s += (s.empty() ? "" : ", ") + o->name;
  return s;
}

}  // namespace

nlohmann::ordered_json case_json(const Case& c) {
  const OpSpec* op = find_op(c.op());
  if (!op) throw std::logic_error("case_json: unknown op " + c.op());
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  for (const ParamSpec& p : op->params) {
    switch (p.kind) {
      case ParamKind::integer: params[p.name] = c.integer(p.name); break;
      case ParamKind::real: params[p.name] = c.real(p.name); break;
      case ParamKind::text: params[p.name] = c.text(p.name); break;
      case ParamKind::boolean: params[p.name] = c.boolean(p.name); break;
      case ParamKind::int_list: params[p.name] = c.int_list(p.name); break;
    }
  }
  nlohmann::ordered_json j;
  j["case"] = c.str();
  j["op"] = c.op();
  j["params"] = std::move(params);
  return j;
}

namespace {

// Reads n bytes at p without faulting on a bad pointer (process_vm_readv on this process): false
// when they are not all readable. Where the call is not allowed, reads directly (a fault then ends
// the listing worker, which the parent reports).
bool read_memory(const void* p, void* dst, size_t n) {
  if (n == 0) return true;
  if (!p) return false;
  iovec local{dst, n}, remote{const_cast<void*>(p), n};
  const ssize_t got = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  if (got == static_cast<ssize_t>(n)) return true;
  if (got < 0 && (errno == ENOSYS || errno == EPERM)) {
    std::memcpy(dst, p, n);
    return true;
  }
  return false;
}

// A NUL-terminated string of at most `max` characters at p; nullopt when p is null, unreadable or
// longer. `what` names it in the problem.
std::string read_string(const char* p, size_t max, const std::string& what) {
  if (!p) return "";
  std::string s;
  char chunk[64];
  for (;;) {
    // Never read past the page p + s.size() lies on, so a string that ends just before an
    // unmapped page is read.
    const auto addr = reinterpret_cast<uintptr_t>(p) + s.size();
    const size_t to_page = 4096 - addr % 4096;
    const size_t n = std::min(sizeof chunk, to_page);
    if (!read_memory(p + s.size(), chunk, n)) throw std::runtime_error(fmt::format("{} points to unreadable memory", what));
    const void* nul = std::memchr(chunk, '\0', n);
    s.append(chunk, nul ? static_cast<size_t>(static_cast<const char*>(nul) - chunk) : n);
    if (nul) break;
    if (s.size() > max) throw std::runtime_error(fmt::format("{} is longer than {} characters (or not NUL-terminated)", what, max));
  }
  if (s.size() > max) throw std::runtime_error(fmt::format("{} is longer than {} characters", what, max));
  return s;
}

// One listed entry as plain values, read safely.
struct RawEntry {
  std::string name, op, algorithm, doc;
  std::optional<DType> input, state, output;
  std::string dtype_text;   // "input 1, state 1, output 7" for messages
};

// Checks one entry (both in the listing worker and in the parent) and returns its CandidateInfo;
// throws std::runtime_error with the problem.
CandidateInfo check_entry(const RawEntry& e, int32_t i, const std::string& file, std::set<std::string>& names,
                          const std::string& prefix = "") {
  if (!valid_name(e.name) || e.name.size() > kMaxPluginNameChars)
    throw std::runtime_error(fmt::format("candidate {} has the name '{}'; names are letters, digits, '_', '-' and '.' "
                                         "(<op>_plugin_<algo>_<dtype>), at most {} characters",
                                         i, e.name.substr(0, 80), kMaxPluginNameChars));
  if (!find_op(e.op))
    throw std::runtime_error(fmt::format("candidate '{}' implements unknown op '{}' (ops: {})", e.name, e.op.substr(0, 80), op_names()));
  if (!e.input || !e.state || !e.output)
    throw std::runtime_error(fmt::format("candidate '{}' declares an unknown dtype ({})", e.name, e.dtype_text));
  for (auto [what, d] : {std::pair{"input", *e.input}, std::pair{"state", *e.state}, std::pair{"output", *e.output}})
    if (!info(d).is_float)
      throw std::runtime_error(fmt::format("candidate '{}' declares {} dtype {}, which is not a floating-point type; a "
                                           "candidate reads, keeps and writes floating-point tensors (F64 F32 TF32 "
                                           "BF16 F16 F8_E4M3 F8_E5M2)",
                                           e.name, what, name(d)));
  if (!e.algorithm.empty() && (!valid_name(e.algorithm) || e.algorithm.size() > kMaxPluginNameChars))
    throw std::runtime_error(fmt::format("candidate '{}' has the algorithm '{}'; letters, digits, '_', '-' and '.'",
                                         e.name, e.algorithm.substr(0, 80)));
  const std::string registered = prefixed_name(prefix, e.name);
  if (const Candidate* other = find_candidate(registered))
    throw std::runtime_error(fmt::format("candidate '{}' is already registered (backend {}){}", registered, other->info().backend,
                                         other->info().backend == "plugin"
                                             ? "; two builds of one plugin load under prefixes: --plugin main=A.so --plugin branch=B.so"
                                             : ""));
  if (!names.insert(e.name).second) throw std::runtime_error(fmt::format("candidate '{}' is listed twice", e.name));
  std::string doc = e.doc.substr(0, kMaxPluginDocChars);
  for (char& ch : doc)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';
  return CandidateInfo{registered, e.op, "plugin", e.algorithm, *e.input, *e.state, *e.output,
                       fmt::format("{}{}[{}]", doc, doc.empty() ? "" : " ", file)};
}

std::string spec_text(const PluginSpec& s, const std::string& canon) {
  return s.prefix.empty() ? canon : s.prefix + "=" + canon;
}

void check_path(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("plugin '{}': no such file", path));
  if (fs::is_directory(path, ec)) throw InputError(fmt::format("plugin '{}': is a directory, not a shared library", path));
}

std::string canonical_of(const std::string& path) {
  std::error_code ec;
  std::string canon = fs::canonical(path, ec).string();
  if (ec || canon.empty()) canon = fs::absolute(path).string();
  return canon;
}

Plugin* find_loaded(const std::string& canon) {
  for (const auto& p : plugins())
    if (p->path == canon) return p.get();
  return nullptr;
}

Plugin* open_plugin(const std::string& path, const std::string& canon);

}  // namespace

bool is_plugin_proxy(const Candidate& c) { return proxy_names().count(c.name()) > 0; }

std::string plugin_path_of(const std::string& candidate) {
  const auto it = proxy_paths().find(candidate);
  return it == proxy_paths().end() ? std::string() : it->second;
}

bool same_plugin_file(const std::string& a, const std::string& b) { return canonical_of(a) == canonical_of(b); }

void load_plugin(const std::string& spec_arg) {
  const PluginSpec spec = parse_plugin_spec(spec_arg);
  const std::string& path = spec.path;
  check_path(path);
  const std::string canon = canonical_of(path);
  Plugin* loaded = find_loaded(canon);
  if (!loaded) loaded = open_plugin(path, canon);
  if (!loaded->prefixes.insert(spec.prefix).second) return;
  // Under a prefix, a name may clash with nothing already registered either.
  std::set<std::string> names;
  for (const CandidateInfo& info : loaded->infos)
    if (const Candidate* other = find_candidate(prefixed_name(spec.prefix, info.name)))
      throw InputError(fmt::format("plugin '{}': candidate '{}' is already registered (backend {})", spec_arg,
                                   other->name(), other->info().backend));
  for (const CandidateInfo& listed : loaded->infos) {
    CandidateInfo info = listed;
    info.name = prefixed_name(spec.prefix, listed.name);
    register_candidate(std::move(info), plugin_run(loaded, listed.name));
  }
}

namespace {

// dlopens the plugin, checks its ABI and list, and keeps it (its candidates not yet registered).
Plugin* open_plugin(const std::string& path, const std::string& canon) {

  void* handle = dlopen(canon.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw InputError(fmt::format("plugin '{}': cannot load it: {}", path, why ? why : "unknown dlopen error"));
  }
  // Until its candidates are registered, a failing plugin is unloaded again.
  auto fail = [&](const std::string& problem) {
    dlclose(handle);
    return InputError(fmt::format("plugin '{}': {}", path, problem));
  };
  auto entry = [&](const char* symbol) {
    dlerror();
    void* s = dlsym(handle, symbol);
    if (!s)
      throw fail(fmt::format("missing entry point {}() (a driftgate plugin exports driftgate_abi_version, "
                             "driftgate_list and driftgate_run, declared in driftgate/candidate_abi.h)",
                             symbol));
    return s;
  };
  auto version_fn = reinterpret_cast<dg_abi_version_fn>(entry("driftgate_abi_version"));
  auto list_fn = reinterpret_cast<dg_list_fn>(entry("driftgate_list"));
  auto run_fn = reinterpret_cast<dg_run_fn>(entry("driftgate_run"));

  const int32_t version = version_fn();
  if (version != DRIFTGATE_ABI_VERSION)
    throw fail(fmt::format("built for candidate ABI version {}, but this driftgate speaks version {}; rebuild it "
                           "against this driftgate's driftgate/candidate_abi.h",
                           version, DRIFTGATE_ABI_VERSION));
  const dg_candidate_info* list = nullptr;
  int32_t count = 0;
  if (int32_t rc = list_fn(&list, &count); rc != 0) throw fail(fmt::format("driftgate_list returned {}", rc));
  if (count < 0 || count > kMaxPluginCandidates || (count > 0 && !list))
    throw fail(fmt::format("driftgate_list returned {} candidates{} (at most {})", count, list ? "" : " and no array",
                           kMaxPluginCandidates));

  // Every entry is checked before any is registered: a plugin loads whole or not at all. The array
  // and its strings are read without trusting a pointer.
  const std::string file = fs::path(canon).filename().string();
  std::vector<CandidateInfo> infos;
  std::set<std::string> names;
  for (int32_t i = 0; i < count; ++i) {
    dg_candidate_info e{};
    if (!read_memory(list + i, &e, sizeof e))
      throw fail(fmt::format("driftgate_list's array of {} candidates is not readable at entry {}", count, i));
    try {
      RawEntry r;
      r.name = read_string(e.name, kMaxPluginNameChars, fmt::format("candidate {}'s name", i));
      r.op = read_string(e.op, kMaxPluginNameChars, fmt::format("candidate {}'s op", i));
      r.algorithm = read_string(e.algorithm, kMaxPluginNameChars, fmt::format("candidate {}'s algorithm", i));
      r.doc = read_string(e.doc, kMaxPluginDocChars, fmt::format("candidate {}'s doc", i));
      r.input = from_abi(e.input_dtype);
      r.state = from_abi(e.state_dtype);
      r.output = from_abi(e.output_dtype);
      r.dtype_text = fmt::format("input {}, state {}, output {}", static_cast<int>(e.input_dtype),
                                 static_cast<int>(e.state_dtype), static_cast<int>(e.output_dtype));
      infos.push_back(check_entry(r, i, file, names));
    } catch (const std::runtime_error& err) {
      throw fail(err.what());
    }
  }

  auto plugin = std::make_unique<Plugin>();
  plugin->path = canon;
  plugin->run = run_fn;
  plugin->infos = infos;
  plugins().push_back(std::move(plugin));
  return plugins().back().get();
}

}  // namespace

int plugin_list_main(const std::string& path, const std::string& report) {
  exit_with_parent();
  if (!parse_plugin_spec(path).prefix.empty()) throw InputError("plugin-list: --library takes a path, not a prefix");
  load_plugin(path);
  const Plugin* p = find_loaded(canonical_of(path));
  if (!p) throw std::logic_error("plugin-list: the plugin did not register");
  nlohmann::json rows = nlohmann::json::array();
  for (const CandidateInfo& i : p->infos)
    rows.push_back({{"name", i.name}, {"op", i.op}, {"algorithm", i.algorithm}, {"input_dtype", name(i.input_dtype)},
                    {"state_dtype", name(i.state_dtype)}, {"output_dtype", name(i.output_dtype)}, {"doc", i.doc}});
  write_file_atomic(report, nlohmann::json{{"path", p->path}, {"candidates", rows}}.dump() + "\n");
  return 0;
}

void list_plugin_in_worker(const std::string& spec_arg) {
  const PluginSpec spec = parse_plugin_spec(spec_arg);
  const std::string& path = spec.path;
  check_path(path);
  const std::string canon = canonical_of(path);
  for (const std::string& l : listed_plugins())
    if (l == spec_text(spec, canon)) return;
  WorkerLimits lim;
  lim.wall_seconds = 60;
  lim.memory_bytes = int64_t{4} << 30;
  std::string report;
  WorkerResult w = run_worker_args({"plugin-list", "--library", canon}, lim, {}, &report);
  if (w.status != WorkerStatus::ok) {
    // The worker's own refusal (exit 2) carries load_plugin's message: pass it on as it is.
    const std::string tail = last_lines(w.stderr_tail, 600);
    const std::string prefix = "driftgate: error: ";
    if (w.status == WorkerStatus::bad_exit && w.exit_code == 2) {
      const size_t at = w.stderr_tail.rfind(prefix);
      if (at != std::string::npos) {
        std::string msg = w.stderr_tail.substr(at + prefix.size());
        msg = msg.substr(0, msg.find('\n'));
        throw InputError(msg);
      }
    }
    throw InputError(fmt::format("plugin '{}': listing its candidates failed ({}: {}); its constructors and "
                                 "driftgate_list run in a worker when it is loaded{}",
                                 path, worker_status_name(w.status), w.message, tail.empty() ? "" : "; output: " + tail));
  }
  // The list came from a process that ran plugin code: every field is checked again here.
  std::vector<CandidateInfo> infos;
  try {
    const nlohmann::json j = parse_json_bounded(report);
    const nlohmann::json& list = j.at("candidates");
    if (!list.is_array() || list.size() > static_cast<size_t>(kMaxPluginCandidates))
      throw std::runtime_error("the candidate list is not an array of at most 4096 entries");
    std::set<std::string> names;
    const std::string file = fs::path(canon).filename().string();
    int32_t i = 0;
    for (const auto& e : list) {
      RawEntry r;
      r.name = e.at("name").get<std::string>();
      r.op = e.at("op").get<std::string>();
      r.algorithm = e.at("algorithm").get<std::string>();
      r.doc = e.at("doc").get<std::string>();
      // The worker appended " [file]" to the doc; it is added again below.
      const std::string tag = "[" + file + "]";
      if (r.doc.size() >= tag.size() && r.doc.compare(r.doc.size() - tag.size(), tag.size(), tag) == 0) {
        r.doc.resize(r.doc.size() - tag.size());
        if (!r.doc.empty() && r.doc.back() == ' ') r.doc.pop_back();
      }
      r.input = parse_dtype(e.at("input_dtype").get<std::string>());
      r.state = parse_dtype(e.at("state_dtype").get<std::string>());
      r.output = parse_dtype(e.at("output_dtype").get<std::string>());
      r.dtype_text = fmt::format("input {}, state {}, output {}", e.at("input_dtype").dump(), e.at("state_dtype").dump(),
                                 e.at("output_dtype").dump());
      infos.push_back(check_entry(r, i++, file, names, spec.prefix));
    }
  } catch (const std::exception& e) {
    throw InputError(fmt::format("plugin '{}': {}", spec_arg, e.what()));
  }
  for (CandidateInfo& info : infos) {
    const std::string name = info.name;
    proxy_names().insert(name);
    proxy_paths()[name] = canon;
    register_candidate(std::move(info), [name, path](const Case&, const TensorMap&, TensorMap&) {
      throw std::logic_error(fmt::format("{} is a candidate of plugin '{}' and runs only in a worker process; driftgate "
                                         "does not load plugins into the process that holds the reference and the results",
                                         name, path));
    });
  }
  listed_plugins().push_back(spec_text(spec, canon));
}

std::vector<std::string> loaded_plugins() {
  std::vector<std::string> v = listed_plugins();
  for (const auto& p : plugins())
    for (const std::string& prefix : p->prefixes) v.push_back(spec_text({prefix, p->path}, p->path));
  return v;
}

}  // namespace dg
