// Plugins: candidates from a shared library built against include/driftgate/candidate_abi.h.
// `driftgate --plugin lib.so` makes its candidates appear in the registry (backend "plugin") beside
// the built-in ones; they run through the same worker path.
//
// Trust: a plugin is candidate code, and no candidate code runs in the process that holds the
// reference, the results or the verdict. That process (every verb but the hidden worker verbs and
// `run`) never dlopens a plugin: list_plugin_in_worker runs `driftgate plugin-list` in a worker
// (harness/isolation/worker.h: own process group, wall and memory limits), which dlopens the library (its
// constructors run there), calls driftgate_list, validates the list there (count bounded, every
// pointer readable, strings bounded, names valid, ops and dtypes known, float dtypes) and writes
// it as JSON. The parent validates that JSON again (it came from a process that ran plugin code)
// and registers proxy candidates carrying the listed info, whose run function refuses to run (a
// plugin candidate runs only in a worker, which loads the library itself with load_plugin). A
// plugin whose constructor or list function crashes, hangs or returns garbage is exit 2 naming the
// plugin and what happened.
#pragma once

#include <cctype>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "harness/cases/case.h"
#include "harness/cases/registry.h"

namespace dg {

// A --plugin argument: "PATH", or "PREFIX=PATH" (PREFIX: letters, digits, '_', '-', '.'; at most
// 64). Under a prefix every candidate the library lists is registered as PREFIX/NAME, so two builds
// of one plugin (main's and a branch's, listing the same names) load side by side:
// --plugin main=build-main/libk.so --plugin branch=build-branch/libk.so gives main/kda_plugin_x_f32
// and branch/kda_plugin_x_f32. A PATH that itself holds '=' after such characters needs a
// directory part first (./a=b.so). Throws InputError for "PREFIX=" with nothing after it.
struct PluginSpec {
  std::string prefix;   // "" for none
  std::string path;
};
inline std::string prefixed_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

inline PluginSpec parse_plugin_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) return {"", spec};
  const std::string prefix = spec.substr(0, eq);
  for (char ch : prefix)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.')) return {"", spec};
  if (eq + 1 == spec.size()) throw InputError(fmt::format("--plugin '{}': no library after the prefix '{}='", spec, prefix));
  if (prefix.size() > 64) throw InputError(fmt::format("--plugin '{}': the prefix is longer than 64 characters", spec));
  return {prefix, spec.substr(eq + 1)};
}


// Loads the plugin of a spec (dlopen RTLD_NOW | RTLD_LOCAL; never unloaded), checks its ABI
// version and registers every candidate it lists, under the spec's prefix. A candidate's run builds
// tensor descriptors over the harness's tensors, calls driftgate_run with the plugin's own name
// for it and throws std::runtime_error with the plugin's message when it fails. Throws InputError
// naming the plugin and the problem: no such file, not loadable, a missing entry point, another ABI
// version, a bad candidate entry (unknown op or dtype), or a name already registered. Loading the
// same file under the same prefix twice is a no-op; two different files load as two libraries (two
// builds of one plugin: each needs its own prefix, as their names are the same).
void load_plugin(const std::string& spec);

// The parent's way in (see the top): lists the plugin's candidates in a worker and registers
// proxies for them, under the spec's prefix. Throws InputError naming the plugin and the problem
// (everything load_plugin refuses, plus: the listing worker crashed, hung or exited without a
// list). Listing the same spec twice is a no-op. Proxy candidates throw std::logic_error when run
// in this process.
void list_plugin_in_worker(const std::string& spec);

// The worker side (`driftgate plugin-list --library PATH --report FILE`): loads the library in this
// process, validates its list and writes {"path": canonical path, "candidates": [{name, op,
// algorithm, input_dtype, state_dtype, output_dtype, doc}]} (dtypes as names) to `report`.
int plugin_list_main(const std::string& path, const std::string& report);

// Limits of what a plugin may list, checked in the listing worker and again in the parent.
inline constexpr int kMaxPluginCandidates = 4096;
inline constexpr size_t kMaxPluginNameChars = 256;
inline constexpr size_t kMaxPluginDocChars = 4096;

// True for a candidate registered as a proxy of a plugin listed in a worker.
bool is_plugin_proxy(const Candidate& c);
// The canonical path of the plugin that lists `candidate` ("" for any other candidate), and whether
// two paths name the same file.
std::string plugin_path_of(const std::string& candidate);
bool same_plugin_file(const std::string& a, const std::string& b);

// The plugin specs loaded or listed so far ("PREFIX=canonical path" or the canonical path), in
// order (a worker process loads the same ones).
std::vector<std::string> loaded_plugins();

// A case as the ABI's params_json: {"case": str, "op": op, "params": {name: value, ...}} with
// every parameter of the op typed (integers and reals as numbers, booleans, strings, int lists as
// arrays). Shared with exec candidates, which put it in the input file's __metadata__.
nlohmann::ordered_json case_json(const Case& c);

}  // namespace dg
