#include "harness/core/output_path.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "harness/cases/case.h"

namespace dg {
namespace {

std::string kind_of(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "a special file";
}

std::string parent_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

void check_writable_dir(const std::string& option, const std::string& dir, const std::string& role) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw InputError(fmt::format("{}: {} '{}' does not exist ({})", option, role, dir, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw InputError(fmt::format("{}: {} '{}' is {}, not a directory", option, role, dir, kind_of(st.st_mode)));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw InputError(fmt::format("{}: {} '{}' is not writable ({})", option, role, dir, std::strerror(errno)));
}

// Does nothing when `path` does not exist; refuses it when it exists and is not a regular file.
void check_regular_if_present(const std::string& option, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return;   // the parent's check names the problem
    throw InputError(fmt::format("{}: cannot inspect '{}': {}", option, path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    throw InputError(fmt::format("{}: '{}' exists and is {}, not a regular file: driftgate will not replace it", option,
                                 path, kind_of(st.st_mode)));
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

void check_output_file(const std::string& option, const std::string& path) {
  if (path.empty()) throw InputError(fmt::format("{}: empty path", option));
  check_regular_if_present(option, path);
  check_writable_dir(option, parent_of(path), "directory");
}

void check_output_dir(const std::string& option, const std::string& dir, const std::vector<std::string>& files) {
  if (dir.empty()) throw InputError(fmt::format("{}: empty path", option));
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    check_writable_dir(option, dir, "output directory");
    for (const std::string& f : files) check_regular_if_present(option, dir + "/" + f);
    return;
  }
  if (errno != ENOENT && errno != ENOTDIR)
    throw InputError(fmt::format("{}: cannot inspect '{}': {}", option, dir, std::strerror(errno)));
  // Created on first write (create_directories): its nearest existing ancestor must be a writable
  // directory.
  std::filesystem::path p = std::filesystem::path(dir).parent_path();
  while (!p.empty() && ::stat(p.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) p = p.parent_path();
  check_writable_dir(option, p.empty() ? "." : p.string(), "parent directory");
}

void check_tmpdir() {
  const char* env = std::getenv("TMPDIR");
  if (env && *env) check_writable_dir("TMPDIR", env, "directory");
}

void lock_output(const std::string& option, const std::string& target) {
  static std::map<std::string, int> held;   // lock path -> descriptor, open until the process ends
  std::string t = target;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  const std::string lock = t + ".lock";
  std::error_code ec;
  const std::string key = std::filesystem::weakly_canonical(lock, ec).string();
  if (held.count(ec ? lock : key)) return;
  check_regular_if_present(option, lock);
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) throw InputError(fmt::format("{}: cannot create the lock file '{}': {}", option, lock, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    std::string who = "another driftgate run";
    if (n > 0) {
      std::string pid(buf, static_cast<size_t>(n));
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      if (!pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos)
        who = fmt::format("another driftgate run (pid {})", pid);
    }
    if (err == EWOULDBLOCK)
      throw InputError(fmt::format("{}: {} is writing '{}' (it holds {}); wait for it to finish or choose another path",
                                   option, who, target, lock));
    throw InputError(fmt::format("{}: cannot lock '{}': {}", option, lock, std::strerror(err)));
  }
  const std::string pid = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds without the pid; a second run's message just cannot name us.
  }
  held[ec ? lock : key] = fd;
}

std::string read_regular_file(const std::string& what, const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw InputError(fmt::format("{} {}: cannot read the file: {}", what, path, std::strerror(errno)));
  struct stat st {};
  std::string text;
  try {
    if (::fstat(fd, &st) != 0) throw InputError(fmt::format("{} {}: cannot stat: {}", what, path, std::strerror(errno)));
    if (!S_ISREG(st.st_mode))
      throw InputError(fmt::format("{} {}: cannot read the file: it is {}, not a regular file", what, path, kind_of(st.st_mode)));
    if (static_cast<uint64_t>(st.st_size) > max_bytes)
      throw InputError(fmt::format("{} {}: {} bytes, more than the {} a {} may have", what, path, st.st_size, max_bytes, what));
    text.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t got = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw InputError(fmt::format("{} {}: read failed: {}", what, path, std::strerror(errno)));
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    text.resize(done);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

std::string failure_file_name(const std::string& case_str, const std::string& candidate) {
  auto sanitize = [](const std::string& s) {
    std::string out;
    for (char ch : s) out += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') ? ch : '_';
    return out;
  };
  std::string c = sanitize(case_str), k = sanitize(candidate);
  // Short names stay as they always were: the sanitised case, "__", the candidate.
  if (c.size() + k.size() <= 160) return fmt::format("{}__{}.safetensors", c, k);
  constexpr size_t kKeep = 80;   // of each part: file names stay far below NAME_MAX (255)
  if (c.size() > kKeep) c.resize(kKeep);
  if (k.size() > kKeep) k.resize(kKeep);
  return fmt::format("{}__{}__{:016x}.safetensors", c, k, fnv1a(case_str + '\n' + candidate));
}

}  // namespace dg
