#include "harness/cases/case_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "harness/cases/registry.h"

namespace dg {
namespace {

long double elements(const std::vector<int64_t>& shape) {
  long double n = 1;
  for (int64_t d : shape) n *= static_cast<long double>(d);
  return n;
}

std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max") return std::nullopt;
  try {
    size_t used = 0;
    const unsigned long long v = std::stoull(word, &used);
    if (used != word.size()) return std::nullopt;
    return static_cast<uint64_t>(v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<uint64_t> meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::nullopt;
}

// The headroom of this process's memory cgroup, v2 or v1.
std::optional<uint64_t> cgroup_headroom() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    // "0::/path" (v2) or "N:memory:/path" (v1)
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::optional<uint64_t> limit, usage;
    if (controllers.empty()) {
      limit = read_number("/sys/fs/cgroup" + path + "/memory.max");
      usage = read_number("/sys/fs/cgroup" + path + "/memory.current");
      if (!limit) {   // inside a container the cgroup root is often mounted at /sys/fs/cgroup itself
        limit = read_number("/sys/fs/cgroup/memory.max");
        usage = read_number("/sys/fs/cgroup/memory.current");
      }
    } else if (controllers.find("memory") != std::string::npos) {
      limit = read_number("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      usage = read_number("/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
      if (limit && *limit >= (uint64_t{1} << 62)) limit.reset();   // v1's "no limit"
    }
    if (limit) return *limit > usage.value_or(0) ? *limit - usage.value_or(0) : 0;
  }
  return std::nullopt;
}

std::string gib(long double bytes) { return fmt::format("{:.1f} GiB", static_cast<double>(bytes / (1024.0L * 1024 * 1024))); }

}  // namespace

long double case_memory_bytes(const Case& c) {
  const OpSpec* op = find_op(c.op());
  long double bytes = 0;
  if (op->inputs)
    for (const auto& [name, spec] : op->inputs(c))
      bytes += 2 * elements(spec.shape) * static_cast<long double>(info(spec.dtype).storage_bytes);
  for (const auto& [name, shape] : op->output_shapes(c)) bytes += 16 * elements(shape);
  return bytes;
}

std::optional<uint64_t> available_memory_bytes() {
  std::optional<uint64_t> mem = meminfo_available(), cg = cgroup_headroom();
  if (mem && cg) return std::min(*mem, *cg);
  return mem ? mem : cg;
}

void check_cases_fit_memory(const std::vector<Case>& cases, const std::string& what) {
  const std::optional<uint64_t> avail = available_memory_bytes();
  if (!avail) return;
  for (const Case& c : cases) {
    const long double need = case_memory_bytes(c);
    if (need > static_cast<long double>(*avail))
      throw InputError(fmt::format("{}: case {} needs at least {} of memory (inputs, outputs and reference), but this "
                                   "machine has {} available",
                                   what, c.str(), gib(need), gib(static_cast<long double>(*avail))));
  }
}

}  // namespace dg
