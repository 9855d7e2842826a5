#include "harness/core/digest.h"
#include "harness/isolation/plugin.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <map>

#include <fmt/format.h>
#include <openssl/evp.h>

namespace dg {
namespace {

std::string hex(const unsigned char* p, unsigned n) {
  std::string s;
  for (unsigned i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

}  // namespace

std::string sha256_hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!EVP_Digest(text.data(), text.size(), md, &n, EVP_sha256(), nullptr))
    throw std::runtime_error("sha256: EVP_Digest failed");
  return hex(md, n);
}

std::string file_sha256(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return {};
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 16);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(f.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  return hex(md, n);
}

std::string self_exe_sha256() {
  static std::once_flag once;
  static std::string digest;
  std::call_once(once, [] { digest = file_sha256("/proc/self/exe"); });
  return digest;
}

std::vector<std::pair<std::string, std::string>> outside_digests(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--plugin") {
      out.push_back({"plugin:" + args[i + 1], file_sha256(parse_plugin_spec(args[i + 1]).path)});
    } else if (args[i] == "--exec") {
      const std::string& spec = args[i + 1];
      size_t eq = spec.find('=');
      std::string name = eq == std::string::npos ? spec : spec.substr(0, eq);
      std::string d = sha256_hex(spec);
      std::istringstream words(eq == std::string::npos ? std::string() : spec.substr(eq + 1));
      for (std::string w; words >> w;)
        if (std::string f = file_sha256(w); !f.empty()) d += " " + w + ":" + f;
      out.push_back({"exec:" + name, d});
    }
  }
  return out;
}

// The first difference between the resume key of a results file and this run's, named for a person;
// "" when they match.
std::string resume_key_difference(const nlohmann::json& old_key, const nlohmann::json& key) {
  static const std::map<std::string, std::string> what = {
      {"base", "the base"}, {"patch", "the patch"}, {"cases", "the case list"}, {"tier", "the reference tier"},
      {"claim", "--claim"}, {"timed", "--no-time"}, {"timeout", "--timeout"}, {"threads", "--threads"},
      {"policy", "the policy's contents"}, {"binary_sha256", "the driftgate binary"},
      {"outside", "the plugins or exec programs (paths or contents)"}, {"isolate", "--in-process"},
      {"runs", "--runs"}, {"min_bits", "--min-bits"}, {"certify", "--certify"}, {"candidates", "--candidate"},
      {"inputs", "--inputs"}, {"kind", "the command"}, {"shard", "--shard"}, {"max_time", "--max-time"}};
  if (!old_key.is_object()) return "the file has no resume key";
  for (const auto& [k, v] : key.items()) {
    if (!old_key.contains(k)) return fmt::format("the file does not record {}", what.count(k) ? what.at(k) : k);
    if (old_key.at(k) != v) {
      std::string name = what.count(k) ? what.at(k) : k;
      std::string was = old_key.at(k).dump(), now = v.dump();
      if (was.size() > 120 || now.size() > 120) return name + " differs";
      return fmt::format("{} differs (was {}, now {})", name, was, now);
    }
  }
  for (const auto& [k, v] : old_key.items())
    if (!key.contains(k)) return fmt::format("the file records '{}', which this run does not have", k);
  return {};
}

nlohmann::json outside_json(const std::vector<std::string>& worker_args) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [k, v] : outside_digests(worker_args)) o[k] = v;
  return o;
}

}  // namespace dg
