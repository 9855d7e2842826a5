// Plugins: candidates from a shared library built against include/driftgate/candidate_abi.h.
// `driftgate --plugin lib.so` loads one before the verb runs; its candidates then appear in the
// registry (backend "plugin") beside the built-in ones and run through the same verify path.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/case.h"
#include "harness/registry.h"

namespace dg {

// Loads the plugin at `path` (dlopen RTLD_NOW | RTLD_LOCAL; never unloaded), checks its ABI
// version and registers every candidate it lists. A candidate's run builds tensor descriptors over
// the harness's tensors, calls driftgate_run and throws std::runtime_error with the plugin's
// message when it fails. Throws InputError naming the plugin and the problem: no such file, not
// loadable, a missing entry point, another ABI version, a bad candidate entry (unknown op or
// dtype), or a name already registered. Loading the same file twice is a no-op.
void load_plugin(const std::string& path);

// The plugin files loaded so far, in order (a worker process loads the same ones).
std::vector<std::string> loaded_plugins();

// A case as the ABI's params_json: {"case": str, "op": op, "params": {name: value, ...}} with
// every parameter of the op typed (integers and reals as numbers, booleans, strings, int lists as
// arrays). Shared with exec candidates, which put it in the input file's __metadata__.
nlohmann::ordered_json case_json(const Case& c);

}  // namespace dg
