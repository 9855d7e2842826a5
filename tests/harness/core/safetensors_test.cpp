// Tests for harness/safetensors: round trips for every dtype, the writer's byte layout against the
// reference implementation's own test vectors, atomic writes, and one test per malformed-file error.
#include "harness/core/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/core/rng.h"

namespace dg {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file image: length prefix, header text as given (no padding added), buffer.
std::string image(const std::string& header, const std::string& buffer = "") {
  return le64(header.size()) + header + buffer;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("driftgate_safetensors_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string put(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  // Reads `path`, expecting a SafetensorsError; returns its message after checking it names the file.
  static std::string read_error(const std::string& path) {
    try {
      read_safetensors(path);
    } catch (const SafetensorsError& e) {
      const std::string msg = e.what();
      EXPECT_THAT(msg, HasSubstr(path));
      return msg;
    }
    ADD_FAILURE() << "read_safetensors(" << path << ") did not throw";
    return {};
  }
  std::string read_error_of(const std::string& header, const std::string& buffer = "") {
    return read_error(put("bad.safetensors", image(header, buffer)));
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// Fills a tensor's storage with arbitrary bytes (any bit pattern, NaNs included, must survive).
Tensor random_tensor(DType t, std::vector<int64_t> shape, uint64_t salt) {
  Tensor x(t, std::move(shape));
  const TensorRng rng(salt, "safetensors_test", name(t));
  for (size_t i = 0; i < x.nbytes(); ++i) x.bytes()[i] = static_cast<std::byte>(rng.bits(i));
  return x;
}

void expect_same(const Tensor& got, const Tensor& want, DType want_dtype, const std::string& what) {
  EXPECT_EQ(got.dtype(), want_dtype) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  if (want.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(got.bytes(), want.bytes(), want.nbytes()), 0) << what;
  }
}

// --- round trips -------------------------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  const DType all[] = {DType::f64, DType::f32, DType::tf32, DType::bf16, DType::f16,
                       DType::e4m3, DType::e5m2, DType::i64, DType::i32};
  TensorMap in;
  uint64_t salt = 0;
  for (DType t : all) {
    const std::string n(name(t));
    in[n + "_3x5"] = random_tensor(t, {3, 5}, salt++);
    in[n + "_odd"] = random_tensor(t, {1, 7, 1}, salt++);
    in[n + "_scalar"] = random_tensor(t, {}, salt++);        // 0-dim: one element
    in[n + "_empty"] = random_tensor(t, {0, 4}, salt++);     // no elements, no bytes
  }
  const std::map<std::string, std::string> meta = {
      {"case", "kda(T=63,H=2,K=60,V=100,regime=long_memory,dtype=bf16,seed=0)"},
      {"format", "pt"},
      {"unicode", "\xce\xb1\xce\xb2 \"quoted\" \\ \n"},
      {"", "empty key"}};
  const std::string path = (dir_ / "all.safetensors").string();
  write_safetensors(path, in, meta);
  const SafetensorsFile out = read_safetensors(path);
  EXPECT_EQ(out.metadata, meta);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [n, t] : in) {
    ASSERT_TRUE(out.tensors.count(n)) << n;
    // tf32 is stored as F32 (its bits are an f32 pattern) and comes back as f32.
    expect_same(out.tensors.at(n), t, t.dtype() == DType::tf32 ? DType::f32 : t.dtype(), n);
  }
}

TEST_F(SafetensorsTest, RoundTripNothing) {
  const std::string path = (dir_ / "none.safetensors").string();
  write_safetensors(path, {});
  const SafetensorsFile out = read_safetensors(path);
  EXPECT_TRUE(out.tensors.empty());
  EXPECT_TRUE(out.metadata.empty());
}

TEST_F(SafetensorsTest, RoundTripValues) {
  Tensor q(DType::bf16, {2, 2});
  const double v[] = {1.0, -0.5, 3.140625, 0.0};
  for (int i = 0; i < 4; ++i) q.set(i, v[i]);
  const std::string path = (dir_ / "q.safetensors").string();
  write_safetensors(path, {{"q", q}});
  const Tensor back = read_safetensors(path).tensors.at("q");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.get(i), v[i]);
}

// --- writer layout -----------------------------------------------------------------------------

TEST_F(SafetensorsTest, WriterSortsKeysPadsHeaderAndPacksOffsets) {
  TensorMap in;
  in["zeta"] = random_tensor(DType::f16, {3}, 1);      // 6 bytes
  in["alpha"] = random_tensor(DType::f64, {2}, 2);     // 16 bytes
  in["mid"] = random_tensor(DType::e4m3, {5}, 3);      // 5 bytes
  const std::string path = (dir_ / "layout.safetensors").string();
  write_safetensors(path, in, {{"k", "v"}});
  const std::string bytes = slurp(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 16 + 6 + 5);
  const std::string header = bytes.substr(8, n);
  // Reference layout: compact JSON, "__metadata__" first, then spaces to the 8-byte boundary.
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"k\":\"v\"},\"alpha\":", 0), 0u) << header;
  const size_t close = header.find_last_of('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << header;
  EXPECT_LT(header.size() - close - 1, 8u);
  const nlohmann::json j = nlohmann::json::parse(header);
  EXPECT_EQ(j["alpha"]["data_offsets"], nlohmann::json::parse("[0,16]"));
  EXPECT_EQ(j["mid"]["data_offsets"], nlohmann::json::parse("[16,21]"));
  EXPECT_EQ(j["zeta"]["data_offsets"], nlohmann::json::parse("[21,27]"));
  EXPECT_EQ(j["mid"]["dtype"], "F8_E4M3");
  EXPECT_LT(header.find("\"alpha\""), header.find("\"mid\""));
  EXPECT_LT(header.find("\"mid\""), header.find("\"zeta\""));
}

// huggingface/safetensors' own serialization test vectors (safetensors/src/tensor.rs:
// test_serialization, test_empty): for one tensor, or none, our writer produces the same bytes.
TEST_F(SafetensorsTest, WriterMatchesReferenceBytesForOneTensor) {
  Tensor attn(DType::f32, {1, 2, 3});
  for (int i = 0; i < 6; ++i) attn.set(i, i);
  const std::string path = (dir_ / "attn.safetensors").string();
  write_safetensors(path, {{"attn.0", attn}});
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);   // already a multiple of 8: no padding
  std::string data;
  for (float f : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) data.append(reinterpret_cast<const char*>(&f), 4);
  EXPECT_EQ(slurp(path), image(header, data));
}

TEST_F(SafetensorsTest, WriterMatchesReferenceBytesForEmptyFiles) {
  const std::string path = (dir_ / "empty.safetensors").string();
  write_safetensors(path, {});
  EXPECT_EQ(slurp(path), image("{}      "));
  write_safetensors(path, {}, {{"framework", "pt"}});
  EXPECT_EQ(slurp(path), image(R"({"__metadata__":{"framework":"pt"}})" "     "));
}

// A file laid out the way the Python reference (safetensors.torch.save_file) writes
// {"a": bf16[3], "b": f32[2]} with metadata {"format": "pt"}: "__metadata__" first, tensors ordered
// by decreasing dtype alignment (so "b" comes before "a", and key order is not offset order), compact
// separators, header padded with spaces to a multiple of 8.
TEST_F(SafetensorsTest, ReadsReferenceLayout) {
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  ASSERT_EQ(header.size() % 8, 0u);
  const std::string buffer = std::string("\x00\x00\xc0\x3f", 4) +        // f32 1.5
                             std::string("\x00\x00\x00\xc0", 4) +        // f32 -2
                             std::string("\x80\x3f\x40\xc0\x00\x00", 6);  // bf16 1, -3, 0
  const std::string path = put("ref.safetensors", image(header, buffer));
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f.tensors.size(), 2u);
  const Tensor& a = f.tensors.at("a");
  const Tensor& b = f.tensors.at("b");
  EXPECT_EQ(a.dtype(), DType::bf16);
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(b.dtype(), DType::f32);
  EXPECT_EQ(b.shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(b.get(0), 1.5);
  EXPECT_EQ(b.get(1), -2.0);
  EXPECT_EQ(a.get(0), 1.0);
  EXPECT_EQ(a.get(1), -3.0);
  EXPECT_EQ(a.get(2), 0.0);
}

TEST_F(SafetensorsTest, ReadsTheReferenceTestVector) {
  // The exact bytes of safetensors' doc example: I32 [2,2], header length 60 ('<'), no padding.
  const std::string header = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  ASSERT_EQ(header.size(), 60u);
  const std::string path = put("doc.safetensors", image(header, std::string(16, '\0')));
  const SafetensorsFile f = read_safetensors(path);
  const Tensor& t = f.tensors.at("test");
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(f.metadata.empty());
}

TEST_F(SafetensorsTest, AcceptsNullMetadataAndExtraEntryFields) {
  // The reference reads a null "__metadata__" as none and ignores unknown fields in an entry.
  const std::string path = put("extra.safetensors",
                               image(R"({"__metadata__":null,"x":{"dtype":"I32","shape":[],"data_offsets":[0,4],"note":1}})",
                                     std::string(4, '\x01')));
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(f.tensors.at("x").numel(), 1);
}

// --- atomic writes -----------------------------------------------------------------------------

TEST_F(SafetensorsTest, WriteLeavesOnlyTheFile) {
  const std::string path = (dir_ / "out.safetensors").string();
  write_safetensors(path, {{"x", random_tensor(DType::f32, {4, 4}, 9)}});
  EXPECT_EQ(listing(), std::vector<std::string>{"out.safetensors"});
  // Overwriting replaces the old contents, again with no temporary left behind.
  write_safetensors(path, {{"y", random_tensor(DType::bf16, {2}, 10)}});
  EXPECT_EQ(listing(), std::vector<std::string>{"out.safetensors"});
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.tensors.count("x"), 0u);
  EXPECT_EQ(f.tensors.count("y"), 1u);
}

TEST_F(SafetensorsTest, NonRegularTargetsAreRefusedAndLeaveNothing) {
  // A directory, a FIFO and (where this process may create one) a device node: refused before any
  // temporary file exists, and left as they were.
  const fs::path target = dir_ / "occupied";
  fs::create_directories(target / "inner");
  std::vector<std::pair<fs::path, std::string>> targets = {{target, "a directory"}};
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  targets.push_back({dir_ / "fifo", "a FIFO"});
  if (::mknod((dir_ / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) targets.push_back({dir_ / "null", "a character device"});
  const std::vector<std::string> before = listing();
  for (const auto& [path, kind] : targets) {
    try {
      write_safetensors(path.string(), {{"x", random_tensor(DType::f32, {8}, 11)}});
      ADD_FAILURE() << "write over " << kind << " did not throw";
    } catch (const SafetensorsError& e) {
      EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr(path.string()), HasSubstr("exists and is " + kind)));
    }
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_FALSE(S_ISREG(st.st_mode)) << kind << " was replaced";
  }
  EXPECT_EQ(listing(), before);
  EXPECT_TRUE(fs::is_directory(target / "inner"));
}

TEST_F(SafetensorsTest, UnwritableDirectoryFailsCleanly) {
  const std::string path = (dir_ / "no_such_dir" / "out.safetensors").string();
  try {
    write_safetensors(path, {{"x", random_tensor(DType::f32, {2}, 12)}});
    ADD_FAILURE() << "write into a missing directory did not throw";
  } catch (const SafetensorsError& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr(path), HasSubstr("cannot create temporary file")));
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, InvalidTensorIsRejectedBeforeTouchingTheFile) {
  const std::string path = (dir_ / "keep.safetensors").string();
  write_safetensors(path, {{"x", random_tensor(DType::f32, {3}, 13)}});
  const std::string before = slurp(path);
  // A default-constructed Tensor has no storage for its (scalar) shape.
  EXPECT_THROW(write_safetensors(path, {{"a", random_tensor(DType::f32, {3}, 14)}, {"b", Tensor()}}),
               SafetensorsError);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", random_tensor(DType::f32, {3}, 15)}}), SafetensorsError);
  EXPECT_THROW(write_safetensors(path, {{"\xff\xfe", random_tensor(DType::f32, {3}, 16)}}), SafetensorsError);
  EXPECT_EQ(slurp(path), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.safetensors"});
}

// --- malformed files: one test per error, each message naming the problem ----------------------

TEST_F(SafetensorsTest, MissingFile) {
  EXPECT_THAT(read_error((dir_ / "absent.safetensors").string()),
              AllOf(HasSubstr("cannot open"), HasSubstr("No such file")));
}

TEST_F(SafetensorsTest, DirectoryIsNotAFile) {
  EXPECT_THAT(read_error(dir_.string()), HasSubstr("not a regular file"));
}

TEST_F(SafetensorsTest, FifoIsRefusedWithoutWaiting) {
  // Opened without blocking: before, reading a FIFO waited for a writer forever.
  const std::string fifo = (dir_ / "in.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(read_error(fifo), HasSubstr("not a regular file (it is a FIFO)"));
}

TEST_F(SafetensorsTest, DeeplyNestedHeaderIsRefused) {
  // 100,000 levels: before, printing the value in the error message overflowed the stack.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(read_error_of("{\"x\":{\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,0]}}"),
              HasSubstr("deeper than 8 levels"));
  EXPECT_THAT(read_error_of("{\"__metadata__\":" + std::string(50, '{') + std::string(50, '}') + "}"),
              HasSubstr("deeper than 8 levels"));
  // Brackets inside strings do not count; a value nested a little is named, and its text is cut short.
  const std::string nested = "[[[[1]]]]";
  EXPECT_THAT(read_error_of("{\"x\":{\"dtype\":\"F32\",\"shape\":[" + nested + "],\"data_offsets\":[0,0]},"
                            "\"__metadata__\":{\"k\":\"[[[[[[[[[[[[\"}}"),
              HasSubstr("not a non-negative integer"));
  const std::string wide = "[" + std::string(2000, '1') + "]";
  const std::string msg = read_error_of("{\"x\":{\"dtype\":\"F32\",\"shape\":[\"" + std::string(5000, 'a') +
                                        "\"],\"data_offsets\":[0,0]}}");
  EXPECT_LT(msg.size(), 600u);
}

TEST_F(SafetensorsTest, ShorterThanEightBytes) {
  EXPECT_THAT(read_error(put("short.safetensors", std::string("\x05\x00\x00", 3))),
              AllOf(HasSubstr("3 bytes"), HasSubstr("shorter than the 8-byte header length")));
  EXPECT_THAT(read_error(put("zero.safetensors", "")), HasSubstr("0 bytes"));
}

TEST_F(SafetensorsTest, HeaderLengthLargerThanFile) {
  EXPECT_THAT(read_error(put("long.safetensors", le64(100) + "{}")),
              AllOf(HasSubstr("header length 100 is larger than the file"), HasSubstr("only 2 bytes")));
}

TEST_F(SafetensorsTest, AbsurdHeaderLength) {
  EXPECT_THAT(read_error(put("absurd.safetensors", le64(0x4000000000ull) + "{}")),
              AllOf(HasSubstr("header length 274877906944 is absurd"), HasSubstr("100000000")));
  EXPECT_THAT(read_error(put("absurd2.safetensors", le64(~0ull) + "{}")), HasSubstr("absurd"));
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  EXPECT_THAT(read_error_of("{\"a\": "), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(read_error_of("        "), HasSubstr("header is not valid JSON"));
  // Invalid UTF-8 inside a string.
  EXPECT_THAT(read_error_of("{\"\xff\":{}}"), HasSubstr("header is not valid JSON"));
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  EXPECT_THAT(read_error_of("[1,2]   "), HasSubstr("header is not a JSON object (it is an array)"));
  EXPECT_THAT(read_error_of("42"), HasSubstr("header is not a JSON object"));
}

TEST_F(SafetensorsTest, EntryNotAnObject) {
  EXPECT_THAT(read_error_of(R"({"w":[0,4]})"), HasSubstr("entry \"w\" is not an object (it is an array)"));
}

TEST_F(SafetensorsTest, MissingFields) {
  EXPECT_THAT(read_error_of(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("tensor \"w\" is missing \"dtype\""));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"),
              HasSubstr("tensor \"w\" is missing \"shape\""));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"),
              HasSubstr("tensor \"w\" is missing \"data_offsets\""));
}

TEST_F(SafetensorsTest, WrongTypedFields) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("\"dtype\" is an integer, not a string"));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "abcd"),
              HasSubstr("\"shape\" is a string, not an array"));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("1.5 is a non-integer number, not a non-negative integer"));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "abcd"),
              HasSubstr("\"data_offsets\" is an array of 3 values, not an array [begin, end]"));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"b":0}}})", "abcd"),
              HasSubstr("\"data_offsets\" is an object"));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", "abcd"),
              HasSubstr("\"4\" is a string"));
}

TEST_F(SafetensorsTest, UnknownDtype) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", "abcd"),
              AllOf(HasSubstr("tensor \"w\": unknown dtype \"U8\""), HasSubstr("F8_E4M3")));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("unknown dtype \"f32\""));
}

TEST_F(SafetensorsTest, NegativeDimension) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[2,-2],"data_offsets":[0,4]}})", "abcd"),
              AllOf(HasSubstr("tensor \"w\""), HasSubstr("negative dimension -2")));
}

TEST_F(SafetensorsTest, NegativeOffset) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"),
              HasSubstr("negative offset -4"));
}

TEST_F(SafetensorsTest, ShapeTooLarge) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})"),
              HasSubstr("has too many elements"));
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F64","shape":[18446744073709551615],"data_offsets":[0,8]}})"),
              HasSubstr("is too large"));
}

TEST_F(SafetensorsTest, BeginAfterEnd) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, 'x')),
              AllOf(HasSubstr("tensor \"w\""), HasSubstr("begin 8 > end 4")));
}

TEST_F(SafetensorsTest, ByteSizeMismatch) {
  EXPECT_THAT(read_error_of(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", std::string(12, 'x')),
              AllOf(HasSubstr("tensor \"w\""), HasSubstr("byte size mismatch"), HasSubstr("expected 16 bytes"),
                    HasSubstr("actual 12 bytes")));
}

TEST_F(SafetensorsTest, TruncatedFile) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F64","shape":[2],"data_offsets":[8,24]}})";
  EXPECT_THAT(read_error_of(header, std::string(13, 'x')),
              AllOf(HasSubstr("truncated"), HasSubstr("tensor \"b\""), HasSubstr("11 bytes missing")));
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  EXPECT_THAT(read_error_of(header, std::string(16, 'x')),
              AllOf(HasSubstr("\"a\" [0, 16)"), HasSubstr("\"b\" [8, 16)"), HasSubstr("overlap")));
}

TEST_F(SafetensorsTest, HoleBetweenTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})";
  EXPECT_THAT(read_error_of(header, std::string(16, 'x')),
              AllOf(HasSubstr("hole in the data buffer: bytes [8, 12)"), HasSubstr("after tensor \"a\""),
                    HasSubstr("before tensor \"b\"")));
}

TEST_F(SafetensorsTest, HoleBeforeFirstTensor) {
  EXPECT_THAT(read_error_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
              HasSubstr("hole in the data buffer: bytes [0, 4)"));
}

TEST_F(SafetensorsTest, TrailingBytes) {
  EXPECT_THAT(read_error_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(7, 'x')),
              AllOf(HasSubstr("3 trailing bytes"), HasSubstr("[4, 7)")));
  EXPECT_THAT(read_error_of("{}", "x"), HasSubstr("1 trailing bytes"));
}

TEST_F(SafetensorsTest, MetadataValueNotString) {
  EXPECT_THAT(read_error_of(R"({"__metadata__":{"ok":"x","n":3}})"),
              HasSubstr("__metadata__ value for key \"n\" is an integer, not a string"));
  EXPECT_THAT(read_error_of(R"({"__metadata__":{"o":{"x":"y"}}})"),
              HasSubstr("__metadata__ value for key \"o\" is an object"));
}

TEST_F(SafetensorsTest, MetadataNotAnObject) {
  EXPECT_THAT(read_error_of(R"({"__metadata__":["a"]})"), HasSubstr("__metadata__ is an array, not an object"));
}

TEST_F(SafetensorsTest, DuplicateTensorName) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_THAT(read_error_of(header, std::string(8, 'x')), HasSubstr("duplicate tensor name \"a\""));
  EXPECT_THAT(read_error_of(R"({"__metadata__":{},"__metadata__":{}})"),
              HasSubstr("duplicate key \"__metadata__\" in the header"));
}

TEST_F(SafetensorsTest, DuplicateKeyInsideAnEntry) {
  EXPECT_THAT(read_error_of(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("duplicate key \"dtype\" in entry \"a\""));
  EXPECT_THAT(read_error_of(R"({"__metadata__":{"k":"1","k":"2"}})"),
              HasSubstr("duplicate key \"k\" in entry \"__metadata__\""));
}

// A larger tensor goes straight into its storage and back, byte for byte.
TEST_F(SafetensorsTest, LargeTensorRoundTrip) {
  const Tensor big = random_tensor(DType::f32, {1024, 4096}, 99);   // 16 MiB
  const std::string path = (dir_ / "big.safetensors").string();
  write_safetensors(path, {{"big", big}, {"small", random_tensor(DType::bf16, {3}, 98)}});
  const SafetensorsFile f = read_safetensors(path);
  expect_same(f.tensors.at("big"), big, DType::f32, "big");
}

// The temporary file goes through the installed hooks (driftgate's main installs the signal
// cleanup's, which register it): made once, forgotten once it has been renamed into place; a write
// that cannot make one forgets nothing; the defaults come back with null hooks.
std::vector<std::string> g_made, g_forgotten;
TEST_F(SafetensorsTest, TheTemporaryFileGoesThroughTheHooks) {
  set_safetensors_temp_hooks(
      [](std::string& tmpl) {
        const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC);
        g_made.push_back(tmpl);
        return fd;
      },
      [](const std::string& p) { g_forgotten.push_back(p + (fs::exists(p) ? " (still there)" : "")); });
  const std::string path = (dir_ / "hooked.safetensors").string();
  write_safetensors(path, {{"x", random_tensor(DType::f32, {4}, 1)}});
  ASSERT_EQ(g_made.size(), 1u);
  EXPECT_THAT(g_made[0], HasSubstr("hooked.safetensors.tmp."));
  EXPECT_EQ(g_forgotten, std::vector<std::string>{g_made[0]});   // and gone: renamed
  EXPECT_TRUE(fs::exists(path));
  const std::string bad = (dir_ / "sub" / "x.safetensors").string();   // no such directory
  EXPECT_THROW(write_safetensors(bad, {{"x", random_tensor(DType::f32, {4}, 1)}}), SafetensorsError);
  EXPECT_EQ(g_made.size(), 2u);   // mkostemp was asked and failed: nothing to forget
  EXPECT_EQ(g_forgotten.size(), 1u);
  set_safetensors_temp_hooks(nullptr, nullptr);
  write_safetensors(path, {{"x", random_tensor(DType::f32, {4}, 2)}});
  EXPECT_EQ(g_made.size(), 2u);
}

}  // namespace
}  // namespace dg
