// .safetensors reading and writing.
//
// Layout (the format of huggingface/safetensors):
//   bytes [0, 8)        N, the header length, unsigned little-endian
//   bytes [8, 8 + N)    a UTF-8 JSON object, possibly padded with trailing spaces:
//                         {"__metadata__": {"k": "v", ...},            optional, strings only
//                          "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF)  the data buffer; offsets are relative to its start, tensors are row-major
//                       little-endian.
//
// Reading is as strict as the reference implementation (safetensors' Metadata::validate): the tensors,
// sorted by offset, must tile the data buffer exactly, with no overlap, no hole and no trailing bytes,
// and each tensor's byte range must equal numel * element size. On top of that we reject what the
// reference would silently accept or mangle: duplicate keys (JSON parsers keep one of them) and
// non-integer numbers. Every error names the file and the problem.
//
// Writing follows the reference layout: compact JSON, "__metadata__" first when present, the tensors in
// key order with contiguous offsets, the header padded with spaces to a multiple of 8 so that the data
// buffer starts 8-byte aligned. (The reference orders tensors by decreasing dtype alignment and then by
// name; with key order and no padding between tensors, a tensor's data is aligned only to the sizes
// before it. Readers never rely on either.) The file goes to a unique "<path>.tmp.XXXXXX" first and is
// renamed over `path` only once complete and fsync'ed, so `path` is always either the old file or the
// new one; a `path` that exists and is not a regular file is refused, never replaced.
#include "harness/core/safetensors.h"
#include "harness/core/json_limits.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dg {
namespace {

using nlohmann::json;

// The reference implementation's limit (MAX_HEADER_SIZE): a larger header is not a safetensors file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// A header is an object of objects holding arrays: depth 3. Anything much deeper is not a header.
constexpr int kMaxHeaderDepth = 8;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kSupported = "F64 F32 BF16 F16 F8_E4M3 F8_E5M2 I64 I32";

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw SafetensorsError(fmt::format("{}: {}", path, problem));
}

std::string errno_text(int err) { return std::strerror(err); }

std::string file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { close(); }
  int get() const { return fd_; }
  // Closes now and returns errno of a failed close (0 on success): a write error can surface here.
  int close() {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0) err = errno;
    fd_ = -1;
    return err;
  }

 private:
  int fd_;
};

// Reads exactly n bytes at `offset` into dst.
void read_exact(int fd, uint64_t offset, std::byte* dst, uint64_t n, const std::string& path) {
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, dst, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail(path, fmt::format("read failed at byte {}: {}", offset, errno_text(errno)));
    }
    if (got == 0) fail(path, fmt::format("file shrank while being read (end of file at byte {})", offset));
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

int plain_temp_make(std::string& tmpl) { return ::mkostemp(tmpl.data(), O_CLOEXEC); }
void plain_temp_forget(const std::string&) {}
std::atomic<TempFileMaker> g_temp_make{plain_temp_make};
std::atomic<TempFileForget> g_temp_forget{plain_temp_forget};

void write_all(int fd, const std::byte* src, uint64_t n, const std::string& path, const std::string& tmp) {
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t put = ::write(fd, src, chunk);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail(path, fmt::format("writing {} failed: {}", tmp, errno_text(errno)));
    }
    src += put;
    n -= static_cast<uint64_t>(put);
  }
}

// A JSON value's type, for messages: "a string", "a number", ...
std::string type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_number_float()) return "a non-integer number";
  if (v.is_number()) return "an integer";
  const std::string_view t = v.type_name();
  const bool vowel = !t.empty() && std::string_view("aeiou").find(t[0]) != std::string_view::npos;
  return fmt::format("{} {}", vowel ? "an" : "a", t);
}

std::string quote_json(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::string st_dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  uint64_t nbytes = 0;
};

// A JSON value for a message: at most ~80 characters. Values are only printed after the header passed
// the depth check, so dump() never recurses deeply.
std::string short_text(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}
std::string shape_text(const json& shape) { return short_text(shape); }

// A non-negative integer that fits int64 (shape dimensions) or uint64 (offsets).
uint64_t parse_count(const json& v, const std::string& path, const std::string& where, bool is_dim) {
  if (v.is_number_integer() && !v.is_number_unsigned())
    fail(path, fmt::format("{}: negative {} {}", where, is_dim ? "dimension" : "offset", v.get<int64_t>()));
  if (!v.is_number_unsigned()) fail(path, fmt::format("{}: {} is {}, not a non-negative integer", where, short_text(v), type_of(v)));
  const uint64_t x = v.get<uint64_t>();
  if (is_dim && x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, fmt::format("{}: dimension {} is too large", where, x));
  return x;
}

Entry parse_entry(const std::string& name, const json& v, const std::string& path) {
  const std::string tname = fmt::format("tensor {}", quote_json(name));
  if (!v.is_object()) fail(path, fmt::format("entry {} is not an object (it is {})", quote_json(name), type_of(v)));
  Entry e;
  e.name = name;

  const auto dt = v.find("dtype");
  if (dt == v.end()) fail(path, fmt::format("{} is missing \"dtype\"", tname));
  if (!dt->is_string()) fail(path, fmt::format("{}: \"dtype\" is {}, not a string", tname, type_of(*dt)));
  e.st_dtype = dt->get<std::string>();
  const std::optional<DType> dtype = parse_safetensors_dtype(e.st_dtype);
  if (!dtype)
    fail(path, fmt::format("{}: unknown dtype {} (driftgate reads {})", tname, quote_json(e.st_dtype), kSupported));
  e.dtype = *dtype;

  const auto sh = v.find("shape");
  if (sh == v.end()) fail(path, fmt::format("{} is missing \"shape\"", tname));
  if (!sh->is_array()) fail(path, fmt::format("{}: \"shape\" is {}, not an array", tname, type_of(*sh)));
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : *sh) {
    const uint64_t n = parse_count(d, path, fmt::format("{}: shape {}", tname, shape_text(*sh)), true);
    e.shape.push_back(static_cast<int64_t>(n));
    overflow |= __builtin_mul_overflow(numel, n, &numel);
  }
  const auto esize = static_cast<uint64_t>(info(e.dtype).storage_bytes);
  overflow |= __builtin_mul_overflow(numel, esize, &e.nbytes);
  if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, fmt::format("{}: shape {} has too many elements", tname, shape_text(*sh)));

  const auto off = v.find("data_offsets");
  if (off == v.end()) fail(path, fmt::format("{} is missing \"data_offsets\"", tname));
  if (!off->is_array() || off->size() != 2)
    fail(path, fmt::format("{}: \"data_offsets\" is {}, not an array [begin, end]", tname,
                           off->is_array() ? fmt::format("an array of {} values", off->size()) : type_of(*off)));
  const std::string where = fmt::format("{}: data_offsets {}", tname, short_text(*off));
  e.begin = parse_count((*off)[0], path, where, false);
  e.end = parse_count((*off)[1], path, where, false);
  if (e.begin > e.end) fail(path, fmt::format("{}: begin {} > end {}", where, e.begin, e.end));
  if (e.end - e.begin != e.nbytes)
    fail(path, fmt::format("{}: byte size mismatch: dtype {} with shape {} is {} elements of {} bytes, "
                           "expected {} bytes, actual {} bytes (data_offsets [{}, {}])",
                           tname, e.st_dtype, shape_text(*sh), numel, esize, e.nbytes, e.end - e.begin,
                           e.begin, e.end));
  return e;
}

// Parses the header, rejecting duplicate keys at any depth (nlohmann keeps the last one silently).
json parse_header(const std::string& text, const std::string& path) {
  struct Level {
    std::set<std::string> keys;
    std::string owner;     // the key this object is the value of ("" for the header itself)
    std::string last_key;
  };
  std::vector<Level> levels;
  std::string duplicate;
  const json::parser_callback_t track = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        levels.push_back({{}, levels.empty() ? std::string() : levels.back().last_key, {}});
        break;
      case json::parse_event_t::object_end:
        if (!levels.empty()) levels.pop_back();
        break;
      case json::parse_event_t::key: {
        Level& l = levels.back();
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!l.keys.insert(k).second && duplicate.empty()) {
          if (levels.size() == 1 && k != kMetadataKey)
            duplicate = fmt::format("duplicate tensor name {} in the header", quote_json(k));
          else
            duplicate = levels.size() == 1
                            ? fmt::format("duplicate key {} in the header", quote_json(k))
                            : fmt::format("duplicate key {} in entry {} of the header", quote_json(k),
                                          quote_json(l.owner));
        }
        l.last_key = k;
        break;
      }
      default:
        break;
    }
    return true;
  };
  // Bounded first: a header nested 100,000 levels deep is refused before any JSON code walks it.
  if (json_nesting_depth(text, kMaxHeaderDepth) > kMaxHeaderDepth)
    fail(path, fmt::format("header nests arrays or objects deeper than {} levels: not a safetensors header",
                           kMaxHeaderDepth));
  json header;
  try {
    header = json::parse(text, track);
  } catch (const json::exception& e) {
    fail(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(path, fmt::format("header is not a JSON object (it is {})", type_of(header)));
  if (!duplicate.empty()) fail(path, duplicate);
  return header;
}

// The tensors sorted by offset must tile [0, buffer_bytes) exactly.
void check_layout(std::vector<Entry>& entries, uint64_t buffer_bytes, const std::string& path) {
  const auto last = std::max_element(entries.begin(), entries.end(),
                                     [](const Entry& a, const Entry& b) { return a.end < b.end; });
  if (last != entries.end() && last->end > buffer_bytes)
    fail(path, fmt::format("file is truncated: tensor {} ends at byte {} of the data buffer, which has only {} "
                           "bytes ({} bytes missing)",
                           quote_json(last->name), last->end, buffer_bytes, last->end - buffer_bytes));
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos)
      fail(path, fmt::format("tensors {} [{}, {}) and {} [{}, {}) overlap", quote_json(prev->name), prev->begin,
                             prev->end, quote_json(e.name), e.begin, e.end));
    if (e.begin > pos)
      fail(path, fmt::format("hole in the data buffer: bytes [{}, {}) belong to no tensor ({}before tensor {})",
                             pos, e.begin, prev ? fmt::format("after tensor {}, ", quote_json(prev->name)) : "",
                             quote_json(e.name)));
    pos = e.end;
    prev = &e;
  }
  if (pos < buffer_bytes)
    fail(path, fmt::format("{} trailing bytes: bytes [{}, {}) of the data buffer belong to no tensor",
                           buffer_bytes - pos, pos, buffer_bytes));
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. Only regular
  // files are read (the flag changes nothing for them).
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) fail(path, fmt::format("cannot open: {}", errno_text(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, fmt::format("cannot stat: {}", errno_text(errno)));
  if (!S_ISREG(st.st_mode))
    fail(path, fmt::format("cannot read: not a regular file (it is {})", file_kind(st.st_mode)));
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8)
    fail(path, fmt::format("file is {} bytes, shorter than the 8-byte header length", file_bytes));
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
#endif

  std::byte prefix[8];
  read_exact(fd.get(), 0, prefix, 8, path);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | static_cast<uint64_t>(prefix[i]);
  if (header_bytes > kMaxHeaderBytes)
    fail(path, fmt::format("header length {} is absurd (the limit is {} bytes): not a safetensors file?",
                           header_bytes, kMaxHeaderBytes));
  if (header_bytes > file_bytes - 8)
    fail(path, fmt::format("header length {} is larger than the file: only {} bytes follow the 8-byte prefix",
                           header_bytes, file_bytes - 8));

  std::string text(header_bytes, '\0');
  read_exact(fd.get(), 8, reinterpret_cast<std::byte*>(text.data()), header_bytes, path);
  const json header = parse_header(text, path);
  text = std::string();

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key != kMetadataKey) {
      entries.push_back(parse_entry(key, value, path));
      continue;
    }
    if (value.is_null()) continue;   // the reference reads a null __metadata__ as none
    if (!value.is_object())
      fail(path, fmt::format("__metadata__ is {}, not an object of strings", type_of(value)));
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string())
        fail(path, fmt::format("__metadata__ value for key {} is {}, not a string", quote_json(k), type_of(v)));
      out.metadata.emplace(k, v.get<std::string>());
    }
  }

  const uint64_t buffer_start = 8 + header_bytes;
  check_layout(entries, file_bytes - buffer_start, path);

  // Entries are now in file order: read each straight into its tensor's storage.
  for (const Entry& e : entries) {
    Tensor t(e.dtype, e.shape, Tensor::Uninitialized{});   // read_exact fills every byte or throws
    if (t.nbytes() != e.nbytes)
      fail(path, fmt::format("tensor {}: internal size mismatch ({} vs {} bytes)", quote_json(e.name), t.nbytes(), e.nbytes));
    if (e.nbytes > 0) read_exact(fd.get(), buffer_start + e.begin, t.bytes(), e.nbytes, path);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Header first: every problem with the tensors surfaces before a file is created.
  std::string header = "{";
  try {
    if (!metadata.empty()) header += fmt::format("\"{}\":{}", kMetadataKey, json(metadata).dump());
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
      if (name == kMetadataKey) fail(path, "\"__metadata__\" is reserved and cannot name a tensor");
      if (t.device() != Device::host) fail(path, fmt::format("tensor {} is not in host memory", quote_json(name)));
      uint64_t numel = 1;
      std::string dims;
      for (int64_t d : t.shape()) {
        if (d < 0) fail(path, fmt::format("tensor {} has a negative dimension in {}", quote_json(name), t.shape_str()));
        numel *= static_cast<uint64_t>(d);
        dims += fmt::format("{}{}", dims.empty() ? "" : ",", d);
      }
      const uint64_t nbytes = t.nbytes();
      if (numel != static_cast<uint64_t>(t.numel()) ||
          nbytes != numel * static_cast<uint64_t>(info(t.dtype()).storage_bytes) ||
          (nbytes > 0 && t.bytes() == nullptr))
        fail(path, fmt::format("tensor {} has no storage for its shape {}", quote_json(name), t.shape_str()));
      header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                            header.size() > 1 ? "," : "", json(name).dump(), info(t.dtype()).st_name, dims,
                            offset, offset + nbytes);
      offset += nbytes;
    }
  } catch (const json::exception& e) {
    fail(path, fmt::format("a tensor name or metadata string is not valid UTF-8 ({})", e.what()));
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  // Never over something that is not a regular file (as root, renaming over /dev/null replaces the
  // device node); checked before the temporary file exists, so a refusal leaves nothing behind.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(path, fmt::format("exists and is {}: driftgate will not replace it", file_kind(st.st_mode)));
  std::string tmp = path + ".tmp.XXXXXX";   // unique, beside `path` (a rename within one directory)
  FileDescriptor fd(g_temp_make.load()(tmp));
  if (fd.get() < 0) fail(path, fmt::format("cannot create temporary file {}: {}", tmp, errno_text(errno)));
  struct Forget {
    const std::string& t;
    ~Forget() { g_temp_forget.load()(t); }   // after the rename or the unlink below
  } forget{tmp};
  ::fchmod(fd.get(), 0644);
  try {
    std::byte prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<std::byte>(header.size() >> (8 * i));
    write_all(fd.get(), prefix, 8, path, tmp);
    write_all(fd.get(), reinterpret_cast<const std::byte*>(header.data()), header.size(), path, tmp);
    for (const auto& [name, t] : tensors) write_all(fd.get(), t.bytes(), t.nbytes(), path, tmp);
    if (::fsync(fd.get()) != 0) fail(path, fmt::format("fsync of {} failed: {}", tmp, errno_text(errno)));
    if (const int err = fd.close(); err != 0) fail(path, fmt::format("closing {} failed: {}", tmp, errno_text(err)));
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))   // appeared while we wrote
      fail(path, fmt::format("exists and is {}: driftgate will not replace it", file_kind(st.st_mode)));
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail(path, fmt::format("cannot rename {} over it: {}", tmp, ec.message()));
  } catch (...) {
    fd.close();
    ::unlink(tmp.c_str());
    throw;
  }
}

void set_safetensors_temp_hooks(TempFileMaker make, TempFileForget forget) {
  g_temp_make = make ? make : plain_temp_make;
  g_temp_forget = forget ? forget : plain_temp_forget;
}

}  // namespace dg
