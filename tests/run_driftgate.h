// Runs the driftgate executable (DRIFTGATE_EXE, set by CMake) for command-line tests.
#pragma once

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace dg::testing {

struct CliResult {
  int rc;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `args` go through /bin/sh; stdout is captured through a pipe, stderr through a file of this
// process's own (ctest runs the tests of one binary in parallel processes).
// `env`: "VAR=value ..." set for driftgate alone (through env(1)); empty: none.
inline CliResult run_driftgate_env(const std::string& env, const std::string& args) {
  std::string err_path = ::testing::TempDir() + "/dg_cli_stderr." + std::to_string(::getpid()) + ".txt";
  std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(DRIFTGATE_EXE) + " " + args + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, slurp(err_path)};
}

inline CliResult run_driftgate(const std::string& args) { return run_driftgate_env("", args); }

}  // namespace dg::testing
