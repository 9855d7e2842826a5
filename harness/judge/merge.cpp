#include "harness/judge/merge.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "harness/cases/case.h"
#include "harness/core/digest.h"
#include "harness/core/json_limits.h"
#include "harness/core/output_path.h"
#include "harness/judge/gate_run.h"
#include "harness/report/report.h"
#include "harness/timing/machine.h"

namespace dg {

nlohmann::json this_machine_record() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return {{"cpu", this_cpu_model()}, {"cores", this_machine_cores()}, {"hostname", std::string(host)}};
}

nlohmann::json shard_record(const Shard& s, size_t cases_in_shard) {
  return {{"index", s.index}, {"count", s.count}, {"cases", cases_in_shard}, {"machine", this_machine_record()}};
}

nlohmann::json shard_key(const nlohmann::json& run_key, const Shard& s) {
  nlohmann::json k = run_key;
  k["shard"] = s.text();
  return k;
}

namespace {

// One shard's file, read and checked on its own.
struct ShardFile {
  std::string path, text, kind;
  nlohmann::json j;
  Shard shard;
  nlohmann::json run_key;              // its key without "shard"
  std::vector<std::string> plan;       // the whole run's cases, in order
  std::vector<std::string> row_cases;  // the case of each of its rows
};

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw InputError(fmt::format("merge: {}: {}", path, why));
}

// The kind of results file and its key; InputError for anything else.
std::pair<std::string, nlohmann::json> kind_and_key(const ShardFile& f) {
  const nlohmann::json& j = f.j;
  if (!j.is_object()) refuse(f.path, "not a driftgate results file (not a JSON object)");
  if (j.value("kind", "") == "gate") return {"gate", j.value("resume_key", nlohmann::json())};
  if (j.contains("driftgate_run_key")) return {"bench", j.at("driftgate_run_key")};
  if (j.contains("resume_key") && j.at("resume_key").is_object() && j.at("resume_key").value("kind", "") == "verify")
    return {"verify", j.at("resume_key")};
  refuse(f.path, "not a results file of driftgate verify --json, bench --json or gate (verdict.json)");
}

// Every row's case, after the file's own digest over its rows is checked.
std::vector<std::string> rows_checked(const ShardFile& f, const nlohmann::json& key) {
  std::vector<std::string> cases;
  try {
    if (f.kind == "gate") {
      for (const GateRow& r : gate_rows_from_json(f.text)) cases.push_back(r.case_str);
      return cases;
    }
    const nlohmann::json& rows = f.kind == "verify" ? f.j.at("records") : f.j.at("driftgate_rows");
    const std::string digest = f.kind == "verify" ? verify_rows_digest(rows, key) : bench_rows_digest(f.j, key);
    if (f.j.value(f.kind == "verify" ? "rows_digest" : "driftgate_rows_digest", "") != digest)
      throw std::invalid_argument("its rows do not match its rows digest (edited after driftgate wrote them)");
    for (const auto& r : rows) cases.push_back(r.at("case").get<std::string>());
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    refuse(f.path, fmt::format("its rows cannot be read ({})", e.what()));
  }
  return cases;
}

ShardFile read_shard_file(const std::string& path) {
  ShardFile f;
  f.path = path;
  f.text = read_regular_file("merge", path, size_t{1} << 30);
  try {
    f.j = parse_json_bounded(f.text);
  } catch (const std::exception& e) {
    refuse(path, fmt::format("not a driftgate results file ({})", e.what()));
  }
  nlohmann::json key;
  std::tie(f.kind, key) = kind_and_key(f);
  if (!key.is_object() || !key.contains("shard") || !f.j.contains("shard"))
    refuse(path, fmt::format("a {} run without --shard (not a shard); only the files of `--shard i/n` runs merge", f.kind));
  if (!key.at("shard").is_string()) refuse(path, "its key's \"shard\" is not \"i/n\"");
  f.shard = parse_shard(key.at("shard").get<std::string>(), "merge: " + path);
  const nlohmann::json& rec = f.j.at("shard");
  if (!rec.is_object() || rec.value("index", -1) != f.shard.index || rec.value("count", -1) != f.shard.count)
    refuse(path, fmt::format("its \"shard\" record does not say shard {} as its key does", f.shard.text()));
  f.row_cases = rows_checked(f, key);
  f.run_key = key;
  f.run_key.erase("shard");
  if (!f.run_key.contains("cases") || !f.run_key.at("cases").is_array()) refuse(path, "its key lists no cases");
  for (const auto& c : f.run_key.at("cases")) f.plan.push_back(c.get<std::string>());
  const std::set<std::string> planned(f.plan.begin(), f.plan.end());
  for (const std::string& c : f.row_cases)
    if (!planned.count(c) || shard_of(c, f.shard.count) != f.shard.index)
      refuse(path, fmt::format("its row of case {} is not a case of shard {} of its run", c, f.shard.text()));
  return f;
}

// The shards are of one run, one count, each given once; the indices of those missing.
std::vector<int> check_together(const std::vector<ShardFile>& fs) {
  const ShardFile& a = fs.front();
  std::map<int, std::string> seen;
  for (const ShardFile& f : fs) {
    if (f.kind != a.kind) refuse(f.path, fmt::format("a {} shard, and {} a {} shard: shards of one run are of one kind", f.kind, a.path, a.kind));
    if (f.shard.count != a.shard.count)
      refuse(f.path, fmt::format("shard {} of {}, and {} shard {} of {}: shards of different counts", f.shard.index,
                                 f.shard.count, a.path, a.shard.index, a.shard.count));
    if (seen.count(f.shard.index))
      refuse(f.path, fmt::format("shard {} is given twice (also {})", f.shard.text(), seen.at(f.shard.index)));
    seen[f.shard.index] = f.path;
    if (std::string d = resume_key_difference(a.run_key, f.run_key); !d.empty())
      refuse(f.path, fmt::format("not a shard of the same run as {}: {} (was: {}, now: this file)", a.path, d, a.path));
  }
  std::vector<int> missing;
  for (int i = 0; i < a.shard.count; ++i)
    if (!seen.count(i)) missing.push_back(i);
  return missing;
}

// "shards": the files merged, the missing indices, and each distinct machine with its shards, all
// in shard order.
nlohmann::json shards_json(const std::vector<ShardFile>& fs, const std::vector<int>& missing) {
  nlohmann::json merged = nlohmann::json::array(), machines = nlohmann::json::array();
  std::vector<const ShardFile*> by_index;
  for (const ShardFile& f : fs) by_index.push_back(&f);
  std::sort(by_index.begin(), by_index.end(), [](const ShardFile* x, const ShardFile* y) { return x->shard.index < y->shard.index; });
  for (const ShardFile* fp : by_index) {
    const ShardFile& f = *fp;
    const nlohmann::json m = f.j.at("shard").value("machine", nlohmann::json());
    merged.push_back({{"index", f.shard.index}, {"path", std::filesystem::absolute(f.path).string()},
                      {"sha256", sha256_hex(f.text)}, {"run_id", f.j.value("run_id", "")}, {"machine", m},
                      {"rows", f.row_cases.size()}});
    auto it = std::find_if(machines.begin(), machines.end(), [&](const nlohmann::json& x) { return x["machine"] == m; });
    if (it == machines.end()) machines.push_back({{"machine", m}, {"shards", {f.shard.index}}});
    else (*it)["shards"].push_back(f.shard.index);
  }
  return {{"count", fs.front().shard.count}, {"merged", merged}, {"missing", missing}, {"machines", machines}};
}

std::string missing_text(const std::vector<int>& missing, int count) {
  std::string s;
  for (int i : missing) s += (s.empty() ? "" : ", ") + fmt::format("{}/{}", i, count);
  return s;
}


// The files a merged gate writes: `out`, and its Markdown and JUnit beside it.
std::pair<std::string, std::string> gate_sidecars(const std::string& out) {
  const std::filesystem::path p(out);
  if (p.filename() == "verdict.json") return {(p.parent_path() / "verdict.md").string(), (p.parent_path() / "junit.xml").string()};
  std::filesystem::path stem = p;
  stem.replace_extension();
  return {stem.string() + ".md", stem.string() + ".junit.xml"};
}

// A shard that stopped before its own cases were done.
std::string incomplete_shards_text(const std::vector<ShardFile>& fs) {
  std::string s;
  for (const ShardFile& f : fs)
    if (f.kind == "gate" && !f.j.value("complete", true))
      s += fmt::format("shard {} ({}) is itself INCOMPLETE ({} of {} of its cases): complete it with gate --resume, then "
                       "merge again\n",
                       f.shard.text(), f.path, f.row_cases.size(), f.j.value("planned", 0));
  return s;
}

MergeOutcome merge_gates(const std::vector<ShardFile>& fs, const MergeOutcome& o0, const nlohmann::json& shards,
                         const std::string& out, const std::string& command) {
  const auto [md_path, junit_path] = gate_sidecars(out);
  for (const std::string& p : {out, md_path, junit_path}) check_output_file("merge --out", p);
  std::map<std::string, GateRow> rows;
  for (const ShardFile& f : fs)
    for (GateRow& r : gate_rows_from_json(f.text)) rows[r.case_str] = std::move(r);
  const nlohmann::json& head = fs.front().j;
  GateReport rep;
  rep.base = head.value("base", "");
  rep.patch = head.value("patch", "");
  rep.policy_source = head.value("policy", "");
  rep.suite = head.value("suite", nlohmann::json()).is_string() ? head.at("suite").get<std::string>() : "";
  if (head.value("claim", nlohmann::json()).is_number()) rep.claim = head.at("claim").get<double>();
  rep.timed = head.value("timed", true);
  rep.baseline = head.value("baseline", nlohmann::json());
  rep.coverage_gaps = head.value("coverage_gaps", std::vector<std::string>{});
  rep.planned = fs.front().plan;
  rep.resume_key = fs.front().run_key;
  rep.command = command;
  rep.run_id = new_run_id();
  rep.started_at = head.value("started_at", "");
  for (const ShardFile& f : fs) {
    rep.started_at = std::min(rep.started_at, f.j.value("started_at", rep.started_at));
    rep.finished_at = std::max(rep.finished_at, f.j.value("finished_at", std::string()));
    rep.seconds += f.j.value("seconds", 0.0);
  }
  for (const std::string& c : rep.planned)
    if (rows.count(c)) rep.rows.push_back(rows.at(c));
  rep.shards = shards;
  rep.missing_shards = o0.missing;
  rep.verdict = gate_verdict(rep);
  std::filesystem::path dir = std::filesystem::path(out).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  write_file_atomic(md_path, gate_markdown(rep));   // verdict JSON last, as gate_run.h writes them
  write_file_atomic(junit_path, gate_junit(rep));
  write_file_atomic(out, gate_json(rep));
  MergeOutcome o = o0;
  o.exit_code = verdict_exit_code(rep.verdict);
  o.text = gate_markdown(rep) + incomplete_shards_text(fs) +
           fmt::format("\nwrote {}, {}, {} from {} shard file{}\nverdict: {} (exit {})\n", md_path, junit_path, out, fs.size(),
                       fs.size() == 1 ? "" : "s", verdict_text(rep), o.exit_code);
  return o;
}

// Rows of every shard, grouped by case, in the run's order (the rows of a case keep their order).
nlohmann::json rows_in_plan_order(const std::vector<ShardFile>& fs, const char* field) {
  std::map<std::string, nlohmann::json> by_case;
  for (const ShardFile& f : fs)
    for (const auto& r : f.j.at(field)) {
      nlohmann::json& list = by_case[r.at("case").get<std::string>()];
      if (list.is_null()) list = nlohmann::json::array();
      list.push_back(r);
    }
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& c : fs.front().plan)
    if (by_case.count(c))
      for (const auto& r : by_case.at(c)) rows.push_back(r);
  return rows;
}

MergeOutcome merge_verifies(const std::vector<ShardFile>& fs, const MergeOutcome& o0, const nlohmann::json& shards,
                            const std::string& out, const std::string& command) {
  check_output_file("merge --out", out);
  const nlohmann::json records = rows_in_plan_order(fs, "records");
  const nlohmann::json& key = fs.front().run_key;
  nlohmann::json j = {{"schema_version", kSchemaVersion}, {"context", run_context(command)}, {"records", records},
                      {"resume_key", key},           {"rows_digest", verify_rows_digest(records, key)}, {"shards", shards}};
  write_file_atomic(out, j.dump(2) + "\n");
  std::vector<Record> recs;
  int failed = 0, passed = 0;
  for (const auto& r : records) {
    recs.push_back(record_from_json(r));
    const Disposition d = recs.back().disposition;
    passed += d == Disposition::PASSED;
    failed += d == Disposition::INCORRECT || d == Disposition::ERRORED || d == Disposition::INVALID;
  }
  MergeOutcome o = o0;
  o.exit_code = !o.missing.empty() ? 5 : failed ? 1 : 0;
  o.text = drift_table(recs) + fmt::format("{} passed, {} failed, {} rows{}\nwrote {} from {} shard file{}\n", passed, failed,
                                           recs.size(), o.missing.empty() ? "" : " (INCOMPLETE: shards missing)", out,
                                           fs.size(), fs.size() == 1 ? "" : "s");
  return o;
}

MergeOutcome merge_benches(const std::vector<ShardFile>& fs, const MergeOutcome& o0, const nlohmann::json& shards,
                           const std::string& out, const std::string& command) {
  check_output_file("merge --out", out);
  const nlohmann::json rows = rows_in_plan_order(fs, "driftgate_rows");
  // Google Benchmark's rows are named "<candidate>/<case>": grouped by case in the run's order too.
  std::map<std::string, nlohmann::json> by_case;
  nlohmann::json context;
  for (const ShardFile& f : fs)
    for (const auto& b : f.j.value("benchmarks", nlohmann::json::array())) {
      const std::string name = b.value("run_name", b.value("name", std::string()));
      nlohmann::json& list = by_case[name.substr(name.find('/') + 1)];
      if (list.is_null()) list = {{"context", f.j.value("context", nlohmann::json())}, {"rows", nlohmann::json::array()}};
      list["rows"].push_back(b);
    }
  nlohmann::json benchmarks = nlohmann::json::array();
  for (const std::string& c : fs.front().plan)
    if (by_case.count(c)) {
      if (context.is_null()) context = by_case.at(c).at("context");   // the first timed case's, as unsharded
      for (const auto& b : by_case.at(c).at("rows")) benchmarks.push_back(b);
    }
  const nlohmann::json& key = fs.front().run_key;
  nlohmann::json j = {{"context", context.is_null() ? run_context(command) : context},
                      {"benchmarks", benchmarks},
                      {"driftgate_rows", rows},
                      {"driftgate_run_key", key},
                      {"shards", shards}};
  j["driftgate_rows_digest"] = bench_rows_digest(j, key);
  write_file_atomic(out, j.dump(2) + "\n");
  int failed = 0;
  for (const auto& r : rows) failed += r.value("flag", "") != "PASSED" && r.value("flag", "") != "not timed: NOT_SUPPORTED";
  MergeOutcome o = o0;
  o.exit_code = !o.missing.empty() ? 5 : failed ? 1 : 0;
  o.text = fmt::format("{} rows ({} not PASSED) of {} cases{}\nwrote {} from {} shard file{}\n", rows.size(), failed,
                       fs.front().plan.size(), o.missing.empty() ? "" : " (INCOMPLETE: shards missing)", out, fs.size(),
                       fs.size() == 1 ? "" : "s");
  return o;
}

}  // namespace

std::string bench_rows_digest(const nlohmann::json& bench, const nlohmann::json& key) {
  return sha256_hex("driftgate bench rows v1\n" + key.dump() + "\n" + bench.value("driftgate_rows", nlohmann::json()).dump() +
                    "\n" + bench.value("benchmarks", nlohmann::json()).dump());
}

MergeOutcome merge_shard_files(const std::vector<std::string>& files, const std::string& out, const std::string& command) {
  if (files.empty()) throw InputError("merge: give the shards' files (merge SHARD.json... --out RUN.json)");
  std::vector<ShardFile> fs;
  for (const std::string& p : files) fs.push_back(read_shard_file(p));
  MergeOutcome o;
  o.kind = fs.front().kind;
  o.missing = check_together(fs);
  check_output_file("merge --out", out);
  lock_output("merge --out", out);   // held until this process ends, as gate's and verify's
  const nlohmann::json shards = shards_json(fs, o.missing);
  if (o.kind == "gate") o = merge_gates(fs, o, shards, out, command);
  else if (o.kind == "verify") o = merge_verifies(fs, o, shards, out, command);
  else o = merge_benches(fs, o, shards, out, command);
  if (!o.missing.empty())
    o.text += fmt::format("shards missing: {} (merge again with their files; the run is not complete)\n",
                          missing_text(o.missing, fs.front().shard.count));
  return o;
}

}  // namespace dg
