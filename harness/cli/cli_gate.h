// The command-line verbs of judging: gate, bench, machine, calibrate and selftest. main.cpp adds
// them to the app and runs whichever was chosen.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace dg {

struct GateCommands;
std::shared_ptr<GateCommands> add_gate_commands(CLI::App& app);
// Runs the chosen verb and returns its exit code; -1 when none of these verbs was chosen. gate's is
// verdict_exit_code (harness/judge/gate.h): 0 MERGE, 1 REJECT, 4 CANNOT_JUDGE, 5 INCOMPLETE.
int run_gate_commands(GateCommands& g, const std::string& command_line);

}  // namespace dg
