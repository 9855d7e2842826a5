// SHA-256 digests (OpenSSL's libcrypto) of texts, files and the running driftgate binary, for the
// resume keys of `gate` and `verify`: a results file records what produced it, and a resumed run
// refuses a file produced by other options, another policy, another binary or edited by hand.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dg {

// Lower-case hex SHA-256 of the bytes of `text`.
std::string sha256_hex(const std::string& text);
// SHA-256 of a file's contents; empty when it cannot be read.
std::string file_sha256(const std::string& path);
// SHA-256 of /proc/self/exe (the binary this process runs), computed once per process and cached.
std::string self_exe_sha256();
// Digests of the plugin files and exec programs among worker args (--plugin PATH, --exec
// "name=command"): "plugin:PATH" -> SHA-256 of the library; "exec:NAME" -> SHA-256 of the command
// text followed by the SHA-256 of every word of the command that names a readable regular file
// (the script it runs, where known).
std::vector<std::pair<std::string, std::string>> outside_digests(const std::vector<std::string>& worker_args);

// The resume key's "outside" object: outside_digests as a JSON object.
nlohmann::json outside_json(const std::vector<std::string>& worker_args);

// The first difference between the resume key recorded in a results file and this run's, named for
// a person ("the reference tier differs (was \"dd\", now \"f64\")"); "" when they match. Keys:
// kind, base, patch, candidates, cases, tier, claim, timed, timeout, threads, runs, min_bits,
// certify, isolate, inputs, policy, binary_sha256, outside, shard (harness/cases/shard.h), max_time.
std::string resume_key_difference(const nlohmann::json& old_key, const nlohmann::json& key);

}  // namespace dg
