// Output targets, checked before any measurement, and the lock that keeps two runs from writing the
// same results. Every check throws InputError (exit 2) naming the option, the path and the problem.
//
//   - A file target (verify --json, bench --json) that exists must be a regular file (a symlink to
//     one is fine): a directory, device node, FIFO or socket is refused, never replaced; its parent
//     must be an existing, writable directory.
//   - A directory target (gate --out, --save-failures) that exists must be a writable directory;
//     one that does not exist yet must have an existing, writable parent (it is created on first
//     write). Files driftgate writes inside it (verdict.json, ...) must be regular files if present.
//   - $TMPDIR, when set, must be an existing, writable directory.
//   - OutputLock: an exclusive flock on "<target>.lock", held until the process ends. A second run
//     on the same target gets exit 2 naming the run that holds it (its pid, written in the lock
//     file). The lock file stays behind, empty of meaning once nobody holds the lock.
#pragma once

#include <string>
#include <vector>

namespace dg {

void check_output_file(const std::string& option, const std::string& path);
// `files`: names driftgate writes inside the directory (each must be a regular file if present).
void check_output_dir(const std::string& option, const std::string& dir, const std::vector<std::string>& files = {});
void check_tmpdir();

// Takes the lock beside `target` for the life of the process (released at exit, also on a crash or
// kill: the kernel drops a flock with its last descriptor). Taking the same target twice in one
// process is a no-op.
void lock_output(const std::string& option, const std::string& target);

// The whole of a file a user names as input (a policy, a cache): refused with InputError naming
// `what` and the path unless it is a regular file of at most `max_bytes` (opened without blocking,
// so a FIFO is refused instead of waiting for a writer forever).
std::string read_regular_file(const std::string& what, const std::string& path, size_t max_bytes = size_t{64} << 20);

// The file name of a saved failure: "<case>__<candidate>.safetensors", sanitised; when that would
// pass 160 characters, both parts are cut to 80 and a hash of the full case string and candidate is
// appended, so that long case strings give short (< 200 characters), unique names.
std::string failure_file_name(const std::string& case_str, const std::string& candidate);

}  // namespace dg
