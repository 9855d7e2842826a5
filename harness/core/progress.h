// Progress of long runs (verify, bench, gate, mutants) on stderr: a line as each case starts and as
// it ends, with its position, the time it took, the time so far and an estimate of the time left
// (the mean time of the cases measured so far times the cases left).
//
// Printed when stderr is a terminal, so that an agent that reads stdout or JSON, or a log of
// stderr, gets none unless it asks: the global options --progress (always) and --quiet (never)
// override it. Progress lines are never part of a result.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

namespace dg {

enum class ProgressMode { automatic, on, off };
void set_progress_mode(ProgressMode mode);
// --progress: on; --quiet: off; else whether stderr is a terminal.
bool progress_enabled();

class Progress {
 public:
  // `total` cases; `enabled` defaults to progress_enabled().
  explicit Progress(size_t total);
  Progress(size_t total, bool enabled);
  // "[i/n] WHAT ..." (i counts from 0 here, printed from 1).
  void begin(size_t i, const std::string& what);
  // "[i/n] OUTCOME WHAT in 1.2s; elapsed 3.4s, ETA 5s" ("" as the outcome leaves it out). A case
  // skipped without being measured (resumed) passes measured = false: it does not enter the ETA.
  void end(size_t i, const std::string& what, const std::string& outcome, bool measured = true);
  bool enabled() const { return enabled_; }
  // begin() now, and end(i, what, "") when the returned object is destroyed (every way out of a
  // case's loop body).
  class Scope {
   public:
    Scope(Progress& p, size_t i, std::string what) : p_(p), i_(i), what_(std::move(what)) { p_.begin(i_, what_); }
    ~Scope() { p_.end(i_, what_, ""); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Progress& p_;
    size_t i_;
    std::string what_;
  };

 private:
  double since(std::chrono::steady_clock::time_point t) const;
  size_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_, case_start_;
  size_t measured_ = 0, ended_ = 0;
  double measured_seconds_ = 0;
};

}  // namespace dg
