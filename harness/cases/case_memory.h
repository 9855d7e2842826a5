// How much memory a case needs, estimated from its OpSpec before anything is allocated, and the
// check that refuses a case this machine cannot hold (exit 2 naming the case, the estimate and
// what the machine has) instead of an allocation failure or the OOM killer in the middle of a sweep.
//
// The estimate is a lower bound of what `verify` and `gate` hold at once for one case:
//   2 x the stored inputs (the harness's copy and the worker's), at their exact dtypes (OpSpec::inputs)
//   + 16 bytes per output element (the reference's doubles and a candidate's outputs, at most f64)
// computed in long double, so no shape can overflow it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/cases/case.h"

namespace dg {

// Bytes of the estimate above (long double: never overflows).
long double case_memory_bytes(const Case& c);

// The memory this process may still use: the smallest of MemAvailable (/proc/meminfo) and the
// headroom of its cgroup (v2 memory.max - memory.current, or v1 memory.limit_in_bytes - usage);
// nullopt when none of them can be read.
std::optional<uint64_t> available_memory_bytes();

// Throws InputError for the first case whose estimate exceeds available_memory_bytes() (`what` is
// the verb, for the message). Does nothing when the available memory cannot be read.
void check_cases_fit_memory(const std::vector<Case>& cases, const std::string& what);

}  // namespace dg
