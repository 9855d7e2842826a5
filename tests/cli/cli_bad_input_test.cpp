// Bad input on the command line, end to end: every case exits 2 before any work, with a message
// naming the problem, leaves no output file (and no temporary file) behind, and loses nothing a
// previous run had written. Each test is one attack of README's "Bad input" section.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness/core/safetensors.h"
#include "tests/run_driftgate.h"

namespace dg {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;
using Result = testing::CliResult;
using testing::slurp;

// A fresh, empty directory of this test.
std::string fresh_dir(const std::string& name) {
  std::string p = ::testing::TempDir() + "/dg_bad_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Runs driftgate through /bin/sh with a 60 s limit (a hang is a failure, rc 124), `env` before it
// and `cwd` as the working directory when given.
Result run(const std::string& args, const std::string& env = "", const std::string& cwd = "") {
  std::string err = ::testing::TempDir() + "/dg_bad_stderr." + std::to_string(::getpid()) + ".txt";
  std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + env + " timeout 60 " + DRIFTGATE_EXE + " " + args +
                    " 2>" + err;
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, slurp(err)};
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

#define EXPECT_BAD_INPUT(result, message)                                   \
  do {                                                                      \
    const Result& r_ = (result);                                            \
    EXPECT_EQ(r_.rc, 2) << r_.out << r_.err;                                \
    EXPECT_THAT(r_.err, HasSubstr(message)) << r_.out;                      \
    EXPECT_THAT(r_.err, ::testing::Not(HasSubstr("internal error")));       \
  } while (0)

const std::string kSmall = "kda(T=16,H=1,K=8,V=8,regime=long_memory,dtype=bf16,seed=0)";

// --- case parameters ------------------------------------------------------------------------------

TEST(CliBadInput, SeqlensWhoseSumOverflowsAreRefused) {
  // Before: the sum wrapped around, passed validation and corrupted the heap (SIGSEGV).
  std::string dir = fresh_dir("seqlens");
  const std::string json = dir + "/r.json";
  EXPECT_BAD_INPUT(run("verify --case 'kda(T=8,H=1,K=8,V=8,seqlens=9223372036854775807/9223372036854775807)' --json " + json),
                   "seqlens sum exceeds T=8");
  EXPECT_BAD_INPUT(run("verify --case 'kda(T=8,H=1,K=8,V=8,seqlens=4/9223372036854775807/-9223372036854775807)'"),
                   "seqlens");
  EXPECT_BAD_INPUT(run("export --case 'kda(T=8,H=1,K=8,V=8,seqlens=9223372036854775807/2)' --out " + dir + "/x.safetensors"),
                   "seqlens sum exceeds T=8");
  EXPECT_TRUE(listing(dir).empty());
}

TEST(CliBadInput, ShapeProductsThatOverflowAreRefused) {
  EXPECT_BAD_INPUT(run("verify --case 'kda(T=1M,B=4611686018427387904,H=4,K=128,V=128)'"), "does not fit in 64 bits");
  EXPECT_BAD_INPUT(run("verify --case 'kda_decode(T=4,B=4611686018427387904,H=4,K=128,V=128)'"), "does not fit in 64 bits");
  EXPECT_BAD_INPUT(run("verify --case 'causal_conv1d(T=4611686018427387904,B=4,D=256)'"), "does not fit in 64 bits");
  EXPECT_BAD_INPUT(run("verify --case 'rmsnorm_gated(N=4611686018427387904,D=128)'"), "does not fit in 64 bits");
}

TEST(CliBadInput, DecodeLayerKindsAndShapesAreChecked) {
  const std::string shape = "T=2,B=1,D=32,H=1,K=8,E=4,I=16";
  EXPECT_BAD_INPUT(run("verify --case 'decode_layer(kind=mla,T=2,B=1,D=32,H=200,K=8,E=4,I=16,k=2)'"),
                   "H (query heads) must be at most 128");
  EXPECT_BAD_INPUT(run("verify --case 'decode_layer(kind=mla," + shape + ",k=2,dc=2048)'"), "dc must be in [1, 1024]");
  EXPECT_BAD_INPUT(run("verify --case 'decode_layer(kind=mla," + shape + ",k=2,regime=long_memory)'"),
                   "the long_memory regime is the KDA layer's");
  EXPECT_BAD_INPUT(run("verify --case 'decode_layer(kind=dense," + shape + ",k=2)'"), "kind must be linear or mla");
  EXPECT_BAD_INPUT(run("verify --case 'decode_layer(kind=linear," + shape + ",k=8)'"), "need 1 <= k <= E");
  EXPECT_BAD_INPUT(run("verify --case 'decode_layer(kind=linear,T=2,B=1,D=32,H=1,K=512,E=4,k=2,I=16)'"), "K must be in [1, 256]");
}

TEST(CliBadInput, CasesLargerThanTheMachineAreRefusedBeforeAllocating) {
  // Before: exit 3 (std::bad_alloc) or an attempt to allocate terabytes.
  std::string dir = fresh_dir("huge");
  const std::string huge = "kda(T=64M,B=64,H=64,K=256,V=256,regime=long_memory,dtype=f32,seed=0)";
  EXPECT_BAD_INPUT(run("verify --case '" + huge + "' --json " + dir + "/r.json"), "of memory");
  EXPECT_BAD_INPUT(run("export --case '" + huge + "' --out " + dir + "/x.safetensors"), "of memory");
  EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + huge + "' --out " + dir + "/g"),
                   "of memory");
  EXPECT_BAD_INPUT(run("bench --candidate kda_cpu_chunk_f32 --case '" + huge + "' --json " + dir + "/b.json"), "of memory");
  EXPECT_TRUE(listing(dir).empty());
}

// --- stored inputs ----------------------------------------------------------------------------------

class StoredInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("stored");
    golden_ = dir_ + "/golden.safetensors";
    Result e = run("export --case '" + kSmall + "' --ref-tier f64 --out " + golden_);
    ASSERT_EQ(e.rc, 0) << e.err;
    file_ = read_safetensors(golden_);
  }
  std::string write(const std::string& name, const TensorMap& t) {
    std::string p = dir_ + "/" + name;
    write_safetensors(p, t, file_.metadata);
    return p;
  }
  std::string dir_, golden_;
  SafetensorsFile file_;
};

TEST_F(StoredInputs, AnExportedFileIsAccepted) {
  // The reference tensors `export` writes beside the inputs (o, ht: the op's outputs) are not inputs.
  Result v = run("verify --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --inputs " + golden_);
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  Result r = run("run --candidate kda_cpu_chunk_f32 --in " + golden_ + " --out " + dir_ + "/out.safetensors");
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(StoredInputs, AnotherDtypeThanTheCaseSaysIsRefused) {
  // Before: q stored as f16 or f64 for a bf16 case was silently converted and accepted.
  for (DType wrong : {DType::f16, DType::f64, DType::f32}) {
    TensorMap t = file_.tensors;
    Tensor q(wrong, t.at("q").shape());
    std::vector<double> values(static_cast<size_t>(q.numel()));
    t.at("q").read(0, values);
    q.write(0, values);
    t["q"] = q;
    const std::string p = write("q_" + std::string(name(wrong)) + ".safetensors", t);
    const std::string msg = "input tensor 'q' is stored as " + std::string(name(wrong)) + ", but " + kSmall + " reads it as bf16";
    EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --inputs " + p + " --json " + dir_ + "/r.json"), msg);
    EXPECT_BAD_INPUT(run("run --candidate kda_cpu_chunk_f32 --in " + p + " --out " + dir_ + "/o.safetensors"), msg);
  }
  // f32-only inputs (A_log, dt_bias, h0) are held to f32 the same way: here h0 as bf16.
  const std::string c = "kda(T=16,H=1,K=8,V=8,h0=1,regime=long_memory,dtype=bf16,seed=0)";
  ASSERT_EQ(run("export --case '" + c + "' --out " + dir_ + "/h0.safetensors").rc, 0);
  SafetensorsFile f = read_safetensors(dir_ + "/h0.safetensors");
  f.tensors["h0"] = Tensor(DType::bf16, f.tensors.at("h0").shape());
  write_safetensors(dir_ + "/h0_bf16.safetensors", f.tensors, f.metadata);
  EXPECT_BAD_INPUT(run("verify --case '" + c + "' --inputs " + dir_ + "/h0_bf16.safetensors"),
                   "input tensor 'h0' is stored as bf16");
  EXPECT_FALSE(fs::exists(dir_ + "/r.json"));
  EXPECT_FALSE(fs::exists(dir_ + "/o.safetensors"));
}

TEST_F(StoredInputs, ExtraTensorsAreRefusedByName) {
  // Before: ignored.
  TensorMap t = file_.tensors;
  t["q_backup"] = t.at("q");
  t["zzz"] = Tensor(DType::f32, {2});
  const std::string p = write("extra.safetensors", t);
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --inputs " + p), "unexpected input tensor(s) 'q_backup', 'zzz'");
  EXPECT_BAD_INPUT(run("run --candidate kda_cpu_chunk_f32 --in " + p + " --out " + dir_ + "/o.safetensors"),
                   "unexpected input tensor(s) 'q_backup', 'zzz'");
  EXPECT_FALSE(fs::exists(dir_ + "/o.safetensors"));
}

TEST_F(StoredInputs, AHeaderNestedDeeplyIsRefused) {
  // Before: SIGSEGV (a recursive dump of the nested value in the error message).
  std::string header = "{\"q\":{\"dtype\":\"F32\",\"shape\":" + std::string(100000, '[') + std::string(100000, ']') +
                       ",\"data_offsets\":[0,0]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(header.size() >> (8 * i));
  const std::string p = dir_ + "/deep.safetensors";
  std::ofstream(p, std::ios::binary) << bytes << header;
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --inputs " + p), "deeper than");
  EXPECT_BAD_INPUT(run("run --candidate kda_cpu_chunk_f32 --in " + p + " --out " + dir_ + "/o.safetensors"), "deeper than");
}

TEST_F(StoredInputs, AFifoIsRefusedInsteadOfWaitingForever) {
  // Before: verify --inputs FIFO hung forever.
  const std::string fifo = dir_ + "/in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --inputs " + fifo), "a FIFO");
  EXPECT_BAD_INPUT(run("run --candidate kda_cpu_chunk_f32 --in " + fifo + " --out " + dir_ + "/o.safetensors"), "a FIFO");
  EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + kSmall + "' --policy " + fifo),
                   "a FIFO");
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --inputs " + dir_), "a directory");
}

// --- output targets ----------------------------------------------------------------------------------

// Special files of each kind in `dir`: a FIFO, a socket, a directory and (where this process may
// create one) a character device with /dev/null's numbers.
std::vector<std::pair<std::string, std::string>> special_files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  ::mkfifo((dir + "/fifo").c_str(), 0600);
  out.push_back({dir + "/fifo", "a FIFO"});
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock = dir + "/sock";
  if (sock.size() < sizeof addr.sun_path) {
    std::strcpy(addr.sun_path, sock.c_str());
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) out.push_back({sock, "a socket"});
  }
  ::close(s);
  fs::create_directories(dir + "/subdir");
  out.push_back({dir + "/subdir", "a directory"});
  if (::mknod((dir + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) out.push_back({dir + "/null", "a character device"});
  return out;
}

TEST(CliBadInput, FileTargetsThatAreNotRegularFilesAreRefusedNeverReplaced) {
  // Before: as root, `verify --json /dev/null` renamed a JSON file over the device node.
  std::string dir = fresh_dir("targets");
  const auto specials = special_files(dir);
  ASSERT_GE(specials.size(), 2u);
  const std::vector<std::string> before = listing(dir);
  for (const auto& [path, kind] : specials) {
    const std::string msg = "exists and is " + kind + ", not a regular file";
    EXPECT_BAD_INPUT(run("verify --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + path), msg);
    EXPECT_BAD_INPUT(run("bench --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + path), msg);
    EXPECT_BAD_INPUT(run("export --case '" + kSmall + "' --out " + path), msg);
    EXPECT_BAD_INPUT(run("run --candidate kda_cpu_chunk_f32 --in /nonexistent --out " + path), msg);
  }
  EXPECT_EQ(listing(dir), before);   // nothing replaced, no temporary file, no lock file
  for (const auto& [path, kind] : specials) {
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0);
    EXPECT_FALSE(S_ISREG(st.st_mode)) << path << " was replaced";
  }
  if (fs::exists(dir + "/subdir")) {
    EXPECT_TRUE(listing(dir + "/subdir").empty());
  }
}

TEST(CliBadInput, MissingOrUnwritableParentsAreRefused) {
  std::string dir = fresh_dir("parents");
  std::ofstream(dir + "/plain") << "x";
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --json " + dir + "/nope/r.json"), "does not exist");
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --json " + dir + "/plain/r.json"), "not a directory");
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "' --save-failures " + dir + "/plain"), "not a directory");
  EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + kSmall + "' --out " + dir + "/plain"),
                   "not a directory");
  EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + kSmall + "' --out " + dir +
                       "/plain/sub"),
                   "not a directory");
  fs::create_directories(dir + "/g/verdict.json");
  EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + kSmall + "' --out " + dir + "/g"),
                   "verdict.json' exists and is a directory");
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "'", "TMPDIR=" + dir + "/nope"), "TMPDIR");
  EXPECT_BAD_INPUT(run("verify --case '" + kSmall + "'", "TMPDIR=" + dir + "/plain"), "TMPDIR");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"g", "plain"}));
  EXPECT_EQ(listing(dir + "/g"), std::vector<std::string>{"verdict.json"});
}

TEST(CliBadInput, LongCaseStringsGiveShortUniqueFailureFiles) {
  // Before: the file name passed NAME_MAX and the sweep ended with exit 3 (File name too long).
  std::string dir = fresh_dir("long");
  std::string lens;
  for (int i = 0; i < 150; ++i) lens += (i ? "/" : "") + std::string("1");
  const std::string a = "kda(T=160,H=1,K=8,V=8,seqlens=" + lens + ",regime=long_memory,dtype=f32,seed=0)";
  const std::string b = "kda(T=160,H=1,K=8,V=8,seqlens=" + lens + ",regime=long_memory,dtype=f32,seed=1)";
  for (const std::string& c : {a, b}) {
    Result r = run("verify --candidate kda_null_zeros_f32 --case '" + c + "' --save-failures " + dir + "/saved");
    EXPECT_EQ(r.rc, 1) << r.out << r.err;   // the null candidate fails, and its row is saved
  }
  const std::vector<std::string> files = listing(dir + "/saved");
  ASSERT_EQ(files.size(), 2u);
  for (const std::string& f : files) {
    EXPECT_LT(f.size(), 200u) << f;
    SafetensorsFile s = read_safetensors(dir + "/saved/" + f);
    EXPECT_TRUE(s.metadata.at("case") == a || s.metadata.at("case") == b);
  }
}

// --- two runs, one target ----------------------------------------------------------------------------

// Holds the lock a running driftgate would hold on `target`, with `pid` in the lock file.
struct HeldLock {
  explicit HeldLock(const std::string& target) : fd(::open((target + ".lock").c_str(), O_RDWR | O_CREAT, 0644)) {
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const std::string pid = "4242\n";
    EXPECT_EQ(::pwrite(fd, pid.data(), pid.size(), 0), static_cast<ssize_t>(pid.size()));
  }
  ~HeldLock() { ::close(fd); }
  int fd;
};

TEST(CliBadInput, ASecondRunOnTheSameResultsIsRefusedAndLosesNothing) {
  std::string dir = fresh_dir("lock");
  const std::string json = dir + "/r.json";
  Result first = run("verify --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + json);
  ASSERT_EQ(first.rc, 0) << first.err;
  const std::string measured = slurp(json);
  {
    HeldLock other(json);
    EXPECT_BAD_INPUT(run("verify --candidate kda_cpu_recurrent_f32 --case '" + kSmall + "' --json " + json),
                     "another driftgate run (pid 4242) is writing");
    EXPECT_BAD_INPUT(run("bench --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + json),
                     "another driftgate run (pid 4242) is writing");
    HeldLock gate(dir + "/g");
    EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --no-time --case '" + kSmall +
                         "' --out " + dir + "/g"),
                     "another driftgate run (pid 4242) is writing");
  }
  EXPECT_EQ(slurp(json), measured);   // the first run's rows are intact
  EXPECT_FALSE(fs::exists(dir + "/g"));
  // Once the other run is gone, the lock is free again.
  Result again = run("verify --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + json);
  EXPECT_EQ(again.rc, 0) << again.err;
}

TEST(CliBadInput, TwoConcurrentRunsNeverInterleave) {
  // A real second driftgate while the first runs: exactly one of them writes the file.
  std::string dir = fresh_dir("race");
  const std::string json = dir + "/r.json";
  const std::string slow = "kda(T=20000,H=2,K=64,V=64,regime=long_memory,dtype=f32,seed=0)";
  std::string bg = std::string("timeout 120 ") + DRIFTGATE_EXE + " verify --candidate kda_cpu_chunk_f32 --case '" + slow +
                   "' --json " + json + " >/dev/null 2>&1 & echo $!";
  FILE* p = popen(bg.c_str(), "r");
  char pid_text[32] = {};
  ASSERT_NE(fgets(pid_text, sizeof pid_text, p), nullptr);
  pclose(p);
  // Wait until the first run holds its lock (it writes its pid into the lock file).
  for (int i = 0; i < 200 && slurp(json + ".lock").empty(); ++i) ::usleep(50'000);
  Result second = run("verify --candidate kda_cpu_recurrent_f32 --case '" + kSmall + "' --json " + json);
  EXPECT_BAD_INPUT(second, "is writing");
  EXPECT_THAT(second.err, HasSubstr("pid "));
  const pid_t first = std::stoi(pid_text);
  for (int i = 0; i < 2400 && ::kill(first, 0) == 0; ++i) ::usleep(50'000);
  ASSERT_TRUE(fs::exists(json));
  EXPECT_THAT(slurp(json), AllOf(HasSubstr("kda_cpu_chunk_f32"), ::testing::Not(HasSubstr("kda_cpu_recurrent_f32"))));
}

// --- numbers -------------------------------------------------------------------------------------------

TEST(CliBadInput, MeaninglessNumbersAreUsageErrors) {
  std::string dir = fresh_dir("numbers");
  const std::string json = dir + "/r.json";
  ASSERT_EQ(run("verify --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + json).rc, 0);
  const std::string measured = slurp(json);
  const std::string v = "verify --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' --json " + json + " ";
  for (const char* t : {"nan", "inf", "-1", "0"}) EXPECT_BAD_INPUT(run(v + "--timeout " + t), "verify --timeout must be in (0, 86400], got");
  EXPECT_BAD_INPUT(run(v + "--runs 0"), "verify --runs must be in [1, 100], got 0");
  EXPECT_BAD_INPUT(run(v + "--runs -3"), "verify --runs");
  EXPECT_BAD_INPUT(run(v + "--threads -1"), "verify --threads must be in [0, 4096], got -1");
  EXPECT_BAD_INPUT(run(v + "--min-bits nan"), "verify --min-bits must be in [0, 64], got nan");
  EXPECT_BAD_INPUT(run(v + "--min-bits -5"), "verify --min-bits");
  EXPECT_BAD_INPUT(run(v + "--min-bits inf"), "verify --min-bits");
  EXPECT_EQ(slurp(json), measured);   // nothing the first run measured is lost
  const std::string g = "gate --base kda_cpu_recurrent_f32 --patch kda_cpu_chunk_f32 --case '" + kSmall + "' ";
  EXPECT_BAD_INPUT(run(g + "--threads -2"), "gate --threads");
  const std::string b = "bench --candidate kda_cpu_chunk_f32 --case '" + kSmall + "' ";
  for (const char* t : {"nan", "inf", "0", "-2"}) EXPECT_BAD_INPUT(run(b + "--max-time " + t), "bench --max-time");
  EXPECT_BAD_INPUT(run("selftest --timeout nan"), "selftest --timeout");
  EXPECT_BAD_INPUT(run("selftest --timeout 0"), "selftest --timeout");
  const std::string c = "calibrate --candidate kda_cpu_chunk_f32 ";
  EXPECT_BAD_INPUT(run(c + "--trials 0"), "calibrate --trials");
  EXPECT_BAD_INPUT(run(c + "--slowdown nan"), "calibrate --slowdown");
  EXPECT_BAD_INPUT(run(c + "--slowdown -0.5"), "calibrate --slowdown");
  EXPECT_BAD_INPUT(run(c + "--max-time inf"), "calibrate --max-time");
  EXPECT_BAD_INPUT(run(c + "--max-time -2"), "calibrate --max-time");
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"r.json", "r.json.lock"}));
}

TEST(CliBadInput, PoliciesThatWouldMergeANullCandidateAreRefused) {
  // Before: slack = inf (or nan, or a negative min_bits) let kda_null_zeros_f32 MERGE with exit 0.
  std::string dir = fresh_dir("policy");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[precision]\nslack = inf\n", "'precision.slack' must be a finite number"},
      {"[precision]\nslack = nan\n", "'precision.slack' must be a finite number"},
      {"[precision]\nslack = 1e9\n", "'precision.slack' must be in [0, 2]"},
      {"[precision]\nnaive_factor = 1e30\n", "'precision.naive_factor' must be in [0, 4]"},
      {"[precision]\nfloor_ulps = 1e12\n", "'precision.floor_ulps' must be in [0, 16]"},
      {"[precision]\ntail_factor = inf\n", "'precision.tail_factor' must be a finite number"},
      {"[precision.min_bits]\nf32 = -4\n", "'precision.min_bits.f32' must be in [1, 24]"},
      {"[precision]\nmetrics = []\n", "at least one metric"},
      {"[naive]\n\"kda.f32\" = \"kda_null_zeros_f32\"\n", "null or cheating candidate"},
      {"[throughput]\nmin_effect = 0.9\n", "'throughput.min_effect' must be in [0, 0.5]"},
  };
  int i = 0;
  for (const auto& [text, msg] : bad) {
    const std::string p = dir + "/p" + std::to_string(i++) + ".toml";
    std::ofstream(p) << text;
    EXPECT_BAD_INPUT(run("gate --base kda_cpu_recurrent_f32 --patch kda_null_zeros_f32 --no-time --case '" + kSmall +
                         "' --policy " + p + " --out " + dir + "/out"),
                     msg);
  }
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

TEST(CliBadInput, MachineCachesThatCannotBeTrustedAreNotUsed) {
  // A cache that is not a regular file: refused (exit 2), never read or replaced.
  std::string dir = fresh_dir("machine");
  fs::create_directories(dir + "/results/machine.json");
  EXPECT_BAD_INPUT(run("machine", "", dir), "machine.json: cannot read the file: it is a directory");
  fs::remove_all(dir + "/results/machine.json");
  // A forged cache for this very machine (its CPU model and core count, so only the figures can
  // make it suspect) with impossible peaks, which would let any time pass the physical-bound rule,
  // or zero peaks: measured again and replaced.
  Result real = run("machine --json", "", dir);
  ASSERT_EQ(real.rc, 0) << real.err;
  const nlohmann::json measured = nlohmann::json::parse(real.out);
  for (double forged : {1e9, 0.0}) {
    nlohmann::json j = measured;
    j["f32_fma_gflops_core"] = forged;
    j["f32_fma_gflops_all"] = forged;
    j["measured_at"] = "forged";
    std::ofstream(dir + "/results/machine.json") << j.dump();
    Result r = run("machine --json", "", dir);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("forged")));
    EXPECT_NE(nlohmann::json::parse(r.out)["f32_fma_gflops_core"].get<double>(), forged);
  }
}

}  // namespace
}  // namespace dg
