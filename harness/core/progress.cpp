#include "harness/core/progress.h"

#include <unistd.h>

#include <atomic>
#include <iostream>

#include <fmt/format.h>

namespace dg {
namespace {
std::atomic<ProgressMode> g_mode{ProgressMode::automatic};
}  // namespace

void set_progress_mode(ProgressMode mode) { g_mode.store(mode); }

bool progress_enabled() {
  switch (g_mode.load()) {
    case ProgressMode::on: return true;
    case ProgressMode::off: return false;
    case ProgressMode::automatic: break;
  }
  return ::isatty(STDERR_FILENO) == 1;
}

Progress::Progress(size_t total) : Progress(total, progress_enabled()) {}

Progress::Progress(size_t total, bool enabled)
    : total_(total), enabled_(enabled), start_(std::chrono::steady_clock::now()), case_start_(start_) {}

double Progress::since(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void Progress::begin(size_t i, const std::string& what) {
  case_start_ = std::chrono::steady_clock::now();
  if (enabled_) std::cerr << fmt::format("[{}/{}] {} ...\n", i + 1, total_, what) << std::flush;
}

void Progress::end(size_t i, const std::string& what, const std::string& outcome, bool measured) {
  const double took = since(case_start_);
  ++ended_;
  if (measured) ++measured_, measured_seconds_ += took;
  if (!enabled_) return;
  const size_t left = total_ > i + 1 ? total_ - i - 1 : 0;
  const double eta = measured_ ? measured_seconds_ / static_cast<double>(measured_) * static_cast<double>(left) : 0.0;
  std::cerr << fmt::format("[{}/{}] {}{}{} in {:.1f}s; elapsed {:.1f}s, ETA {:.0f}s\n", i + 1, total_, outcome,
                           outcome.empty() ? "" : " ", what, took, since(start_), eta)
            << std::flush;
}

}  // namespace dg
