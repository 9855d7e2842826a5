// Plugin loader: dlopen a shared library built against driftgate/candidate_abi.h, check its ABI
// version, and register each candidate it lists with a run function that hands the harness's
// tensors to driftgate_run as descriptors.
#include "harness/plugin.h"

#include <dlfcn.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "driftgate/candidate_abi.h"

namespace dg {
namespace {

namespace fs = std::filesystem;

struct Plugin {
  std::string path;     // canonical
  dg_run_fn run = nullptr;
  std::mutex mutex;     // the ABI promises that driftgate_run is never called concurrently
};

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
    const std::string params = case_json(c).dump();
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

void load_plugin(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("plugin '{}': no such file", path));
  if (fs::is_directory(path, ec)) throw InputError(fmt::format("plugin '{}': is a directory, not a shared library", path));
  std::string canon = fs::canonical(path, ec).string();
  if (ec || canon.empty()) canon = fs::absolute(path).string();
  for (const auto& p : plugins())
    if (p->path == canon) return;

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
  if (count < 0 || (count > 0 && !list))
    throw fail(fmt::format("driftgate_list returned {} candidates{}", count, list ? "" : " and no array"));

  // Every entry is checked before any is registered: a plugin loads whole or not at all.
  const std::string file = fs::path(canon).filename().string();
  std::vector<CandidateInfo> infos;
  std::set<std::string> names;
  for (int32_t i = 0; i < count; ++i) {
    const dg_candidate_info& e = list[i];
    std::string name = e.name ? e.name : "";
    if (!valid_name(name))
      throw fail(fmt::format("candidate {} has the name '{}'; names are letters, digits, '_', '-' and '.' "
                             "(<op>_plugin_<algo>_<dtype>)", i, name));
    std::string op = e.op ? e.op : "";
    if (!find_op(op)) throw fail(fmt::format("candidate '{}' implements unknown op '{}' (ops: {})", name, op, op_names()));
    auto in = from_abi(e.input_dtype), state = from_abi(e.state_dtype), outd = from_abi(e.output_dtype);
    if (!in || !state || !outd)
      throw fail(fmt::format("candidate '{}' declares an unknown dtype (input {}, state {}, output {})", name,
                             static_cast<int>(e.input_dtype), static_cast<int>(e.state_dtype),
                             static_cast<int>(e.output_dtype)));
    if (const Candidate* other = find_candidate(name))
      throw fail(fmt::format("candidate '{}' is already registered (backend {})", name, other->info().backend));
    if (!names.insert(name).second) throw fail(fmt::format("candidate '{}' is listed twice", name));
    std::string doc = e.doc ? e.doc : "";
    infos.push_back(CandidateInfo{name, op, "plugin", e.algorithm ? e.algorithm : "", *in, *state, *outd,
                                  fmt::format("{}{}[{}]", doc, doc.empty() ? "" : " ", file)});
  }

  auto plugin = std::make_unique<Plugin>();
  plugin->path = canon;
  plugin->run = run_fn;
  for (CandidateInfo& info : infos) {
    std::string name = info.name;
    register_candidate(std::move(info), plugin_run(plugin.get(), name));
  }
  plugins().push_back(std::move(plugin));
}

std::vector<std::string> loaded_plugins() {
  std::vector<std::string> v;
  for (const auto& p : plugins()) v.push_back(p->path);
  return v;
}

}  // namespace dg
