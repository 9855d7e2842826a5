#include "harness/report/report.h"

#include "harness/core/json_limits.h"
#include "harness/isolation/sandbox.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <thread>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "provenance.h"   // generated at build time: DRIFTGATE_GIT_COMMIT, DRIFTGATE_GIT_DIRTY
#ifndef DRIFTGATE_CXX_FLAGS
#define DRIFTGATE_CXX_FLAGS ""
#endif

namespace dg {
namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// JSON has no Inf/NaN: non-finite numbers become strings.
nlohmann::json num(double x) {
  if (std::isfinite(x)) return x + 0.0;   // no -0
  return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
}

}  // namespace

nlohmann::json run_context(const std::string& command_line) {
  return {{"driftgate_version", "0.1.0"},
          {"git_commit", DRIFTGATE_GIT_COMMIT},
          {"git_dirty", static_cast<bool>(DRIFTGATE_GIT_DIRTY)},
          {"compiler", fmt::format("gcc {}", __VERSION__)},
          {"flags", DRIFTGATE_CXX_FLAGS},
          {"cpu", cpu_model()},
          {"cores", std::thread::hardware_concurrency()},
          {"gpu", nullptr},
          {"command", command_line}};
}

nlohmann::json to_json(const Record& r) {
  nlohmann::json outs = nlohmann::json::object();
  for (const OutputResult& o : r.outputs) {
    const TensorMetrics& m = o.metrics;
    nlohmann::json j = {{"dtype", name(o.dtype)},
                        {"count", m.count},
                        {"nonfinite_mismatch", m.nonfinite_mismatch},
                        {"first_mismatch", m.first_mismatch},
                        {"max_abs", num(m.max_abs)},
                        {"max_rel", num(m.max_rel)},
                        {"rms_ratio", num(m.rms_ratio)},
                        {"bits", num(m.bits)},
                        {"cosine", num(m.cosine)},
                        {"ulp_max", num(m.ulp_max)},
                        {"ulp_p99", num(m.ulp_p99)},
                        {"ulp_mean", num(m.ulp_mean)},
                        {"ulp_rms_max", num(m.ulp_rms_max)},
                        {"ulp_dist_max", m.ulp_dist_max},
                        {"ref_max_abs", num(m.ref_max_abs)}};
    if (o.drift) {
      nlohmann::json buckets = nlohmann::json::array();
      for (const DriftBucket& b : o.drift->buckets)
        buckets.push_back({{"begin", b.begin}, {"end", b.end}, {"rms_ratio", num(b.rms_ratio)}});
      j["drift"] = {{"growth_exponent", num(o.drift->growth_exponent)}, {"buckets", buckets}};
    }
    outs[o.name] = j;
  }
  nlohmann::json j = {{"case", r.case_str},
                      {"op", r.op},
                      {"candidate", r.candidate},
                      {"ref_tier", tier_name(r.tier)},
                      {"disposition", disposition_name(r.disposition)},
                      {"reason", r.reason},
                      {"min_bits", r.min_bits},
                      {"seconds", r.seconds},
                      {"ref_seconds", r.ref_seconds},
                      {"flops", r.flops},
                      {"bytes", r.bytes},
                      {"outputs", outs},
                      {"reproduce", r.reproduce}};
  if (!r.confinement.empty()) j["confinement"] = r.confinement;
  if (!r.measures.empty()) {
    nlohmann::json ms = nlohmann::json::object();
    for (const OpMeasure& m : r.measures)
      ms[m.name] = {{"value", num(m.value)}, {"limit", num(m.limit)}, {"relative", m.relative},
                    {"floor", num(m.floor)}, {"detail", m.detail}};
    j["measures"] = ms;
  }
  if (r.cert)
    j["certification"] = {{"against", tier_name(r.cert->cert.against)},
                          {"sample", r.cert->cert.sample},
                          {"ref_bits", num(r.cert->cert.ref_bits)},
                          {"ref_bits_max_elem", num(r.cert->cert.ref_bits_max_elem)},
                          {"sufficient", r.cert->sufficient}};
  else
    j["certification"] = nullptr;
  return j;
}

namespace {
double from_num(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  std::string t = j.get<std::string>();
  return t == "nan" ? std::nan("") : t == "inf" ? HUGE_VAL : -HUGE_VAL;
}
}  // namespace

Record record_from_json(const nlohmann::json& j) {
  Record r;
  r.case_str = j.at("case");
  r.op = j.at("op");
  r.candidate = j.at("candidate");
  auto tier = parse_tier(j.at("ref_tier").get<std::string>());
  if (tier) r.tier = *tier;
  std::string d = j.at("disposition");
  for (Disposition x : {Disposition::PASSED, Disposition::INCORRECT, Disposition::ERRORED, Disposition::INVALID,
                        Disposition::NOT_SUPPORTED, Disposition::SKIPPED})
    if (disposition_name(x) == d) r.disposition = x;
  r.reason = j.at("reason");
  r.min_bits = j.at("min_bits");
  r.seconds = j.at("seconds");
  r.ref_seconds = j.at("ref_seconds");
  r.flops = j.at("flops");
  r.bytes = j.at("bytes");
  r.reproduce = j.at("reproduce");
  r.confinement = j.value("confinement", "");
  for (const auto& [name, o] : j.at("outputs").items()) {
    OutputResult out;
    out.name = name;
    out.dtype = parse_dtype(o.at("dtype").get<std::string>()).value_or(DType::f32);
    TensorMetrics& m = out.metrics;
    m.count = json_integer<int64_t>(o.at("count"));
    m.nonfinite_mismatch = json_integer<int64_t>(o.at("nonfinite_mismatch"));
    m.first_mismatch = json_integer<int64_t>(o.at("first_mismatch"));
    m.max_abs = from_num(o.at("max_abs"));
    m.max_rel = from_num(o.at("max_rel"));
    m.rms_ratio = from_num(o.at("rms_ratio"));
    m.bits = from_num(o.at("bits"));
    m.cosine = from_num(o.at("cosine"));
    m.ulp_max = from_num(o.at("ulp_max"));
    m.ulp_p99 = from_num(o.at("ulp_p99"));
    m.ulp_mean = from_num(o.at("ulp_mean"));
    if (o.contains("ulp_rms_max")) m.ulp_rms_max = from_num(o.at("ulp_rms_max"));
    m.ulp_dist_max = json_integer<int64_t>(o.at("ulp_dist_max"));
    if (o.contains("ref_max_abs")) m.ref_max_abs = from_num(o.at("ref_max_abs"));
    if (o.contains("drift")) {
      DriftCurve dc;
      dc.growth_exponent = from_num(o.at("drift").at("growth_exponent"));
      for (const auto& b : o.at("drift").at("buckets")) {
        DriftBucket bk;
        bk.begin = json_integer<int64_t>(b.at("begin"));
        bk.end = json_integer<int64_t>(b.at("end"));
        bk.rms_ratio = from_num(b.at("rms_ratio"));
        dc.buckets.push_back(bk);
      }
      out.drift = dc;
    }
    r.outputs.push_back(std::move(out));
  }
  if (j.contains("measures"))
    for (const auto& [name, o] : j.at("measures").items())
      r.measures.push_back({name, from_num(o.at("value")), from_num(o.at("limit")), o.at("relative").get<bool>(),
                            from_num(o.at("floor")), o.at("detail").get<std::string>()});
  return r;
}

nlohmann::json records_json(const std::vector<Record>& records, const std::string& command_line) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Record& r : records) rows.push_back(to_json(r));
  return {{"schema_version", kSchemaVersion}, {"context", run_context(command_line)}, {"records", rows}};
}

std::string drift_table(const std::vector<Record>& records) {
  std::string s;
  std::string last_case;
  size_t w = 24;   // the candidate column: as wide as the longest name (add_rmsnorm_cpu_blocked_bf16)
  for (const Record& r : records) w = std::max(w, r.candidate.size());
  s += fmt::format("{:<{}} {:>6} {:>9} {:>9} {:>7} {:>6} {:>8} {:>8}  {}\n", "candidate", w + 2, "bits", "ULP@rms",
                   "rms_ratio", "growth", "ht.bits", "ref_bits", "time s", "disposition");
  for (const Record& r : records) {
    if (r.case_str != last_case) {
      s += r.case_str + "\n";
      last_case = r.case_str;
    }
    const OutputResult* o = primary_output(r);
    const OutputResult* ht = state_output(r);
    std::string ref_bits = r.cert ? fmt::format("{:.1f}{}", r.cert->cert.ref_bits, r.cert->sufficient ? "" : "!") : "-";
    // A reference that is not 20 bits better than the output format cannot support a verdict.
    std::string verdict = r.cert && !r.cert->sufficient
                              ? fmt::format("UNCERTIFIED ({})", disposition_name(r.disposition))
                              : std::string(disposition_name(r.disposition));
    if (o)
      s += fmt::format("  {:<{}} {:>6.1f} {:>9.3g} {:>9.2e} {:>7} {:>6} {:>8} {:>8.3f}  {}\n", r.candidate, w,
                       o->metrics.bits + 0.0, o->metrics.ulp_rms_max, o->metrics.rms_ratio,
                       o->drift ? fmt::format("{:.3f}", o->drift->growth_exponent) : std::string("-"),
                       ht ? fmt::format("{:.1f}", ht->metrics.bits + 0.0) : std::string("-"), ref_bits, r.seconds, verdict);
    else
      s += fmt::format("  {:<{}} {:>6} {:>9} {:>9} {:>7} {:>6} {:>8} {:>8.3f}  {}\n", r.candidate, w, "-", "-", "-", "-",
                       "-", ref_bits, r.seconds, verdict);
    if (!o && !r.measures.empty()) {   // an op judged by its measures alone (a set): they are its row
      std::string line;
      for (const OpMeasure& m : r.measures) line += fmt::format("{}{} {:.3g}", line.empty() ? "" : ", ", m.name, m.value);
      s += "      " + line + "\n";
    }
    if (!r.reason.empty() && r.disposition != Disposition::SKIPPED) s += "      " + r.reason + "\n";
  }
  bool uncertified = false;
  for (const Record& r : records)
    if (r.cert && !r.cert->sufficient) uncertified = true;
  if (uncertified)
    s += "! reference is not 20 bits better than the candidate's output format: its verdict is not trusted\n";
  return s;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  // Never over something that is not a regular file: renaming over /dev/null (as root) or a FIFO
  // would replace it. Checked before the temporary file exists, so a refused target leaves nothing.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw InputError(fmt::format("'{}' exists and is not a regular file: driftgate will not replace it", path));
  // The temporary file is unique, in the target's directory (so the rename is atomic), and removed
  // on every failure.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = create_temp_file(tmp);   // registered: a SIGINT/SIGTERM meanwhile removes it (sandbox.h)
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create a temporary file beside {}: {}", path, std::strerror(errno)));
  struct Unregister {
    const std::string& p;
    ~Unregister() { unregister_temp_file(p); }
  } unregister{tmp};
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("{} {}: {}", what, tmp, std::strerror(err)));
  };
  ::fchmod(fd, 0644);
  for (size_t done = 0; done < text.size();) {
    const ssize_t put = ::write(fd, text.data() + done, text.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) fail("cannot write");
    done += static_cast<size_t>(put);
  }
  if (::fsync(fd) != 0) fail("cannot fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot close {}: {}", tmp, std::strerror(err)));
  }
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {   // appeared while we wrote
    ::unlink(tmp.c_str());
    throw InputError(fmt::format("'{}' exists and is not a regular file: driftgate will not replace it", path));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(err)));
  }
}

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

}  // namespace dg
