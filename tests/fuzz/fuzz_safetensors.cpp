// libFuzzer target: read_safetensors on arbitrary bytes. Every input must either read or throw
// SafetensorsError; a tensor that was read must have exactly the bytes its dtype and shape say.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "harness/core/safetensors.h"

namespace {

// One in-memory file, rewritten for every input and read back through its /proc path.
int file_fd() {
  static const int fd = [] {
    const int f = ::memfd_create("fuzz_safetensors", MFD_CLOEXEC);
    if (f < 0) std::abort();
    return f;
  }();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = file_fd();
  if (::ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t put = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (put <= 0) std::abort();
    done += static_cast<size_t>(put);
  }
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    dg::SafetensorsFile f = dg::read_safetensors(path);
    uint64_t total = 0;
    for (const auto& [name, t] : f.tensors) {
      if (t.numel() < 0) std::abort();
      if (t.nbytes() != static_cast<size_t>(t.numel()) * static_cast<size_t>(dg::info(t.dtype()).storage_bytes)) std::abort();
      total += t.nbytes();
    }
    if (total > size) std::abort();   // every byte read came from the file
  } catch (const dg::SafetensorsError&) {
  }
  return 0;
}
