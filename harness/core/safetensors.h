// .safetensors read and write: an 8-byte little-endian header length N, N bytes of JSON header
// ({"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}),
// then the tensor bytes. Reading validates strictly and every error names the problem.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "harness/core/tensor.h"

namespace dg {

// Thrown for every malformed or unreadable file; what() names the file and the problem.
struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct SafetensorsFile {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;
};

// Dtypes F64 F32 BF16 F16 F8_E4M3 F8_E5M2 I64 I32 (tf32 is written as F32).
SafetensorsFile read_safetensors(const std::string& path);
// Writes to a temporary file beside `path`, then renames: a reader never sees a half-written file.
// Refuses a `path` that exists and is not a regular file (a directory, a device node, a FIFO).
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// How write_safetensors makes its temporary file (mkostemp of a "...XXXXXX" template, the open
// descriptor or -1 with errno) and forgets it once renamed or removed. The default is plain
// mkostemp; install_signal_cleanup (harness/isolation/sandbox.h) installs its create_temp_file and
// unregister_temp_file, so a SIGINT or SIGTERM while a file is being written removes the partial
// temporary file too.
using TempFileMaker = int (*)(std::string& tmpl);
using TempFileForget = void (*)(const std::string& path);
void set_safetensors_temp_hooks(TempFileMaker make, TempFileForget forget);

}  // namespace dg
