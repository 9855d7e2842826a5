#include "harness/judge/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>

#include <fmt/format.h>

#include "harness/core/digest.h"
#include "harness/core/output_path.h"
#include "harness/core/safetensors.h"
#include "harness/isolation/worker.h"

namespace dg {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void save_failure(const std::string& dir, const Case& c, const Record& rec, const TensorMap& in,
                  const RefOutputs& ref, const TensorMap* out, const std::map<std::string, std::string>& extra = {}) {
  std::filesystem::create_directories(dir);
  TensorMap all = in;
  for (const auto& [name, values] : ref) {
    Tensor t(DType::f64, {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), t.data<double>());
    all["ref." + name] = t;
  }
  if (out)
    for (const auto& [name, t] : *out) all["out." + name] = t;
  std::map<std::string, std::string> meta = {{"case", c.str()},
                                             {"candidate", rec.candidate},
                                             {"tier", std::string(tier_name(rec.tier))},
                                             {"disposition", std::string(disposition_name(rec.disposition))},
                                             {"reason", rec.reason}};
  for (const auto& [k, v] : extra) meta[k] = v;
  write_safetensors(dir + "/" + failure_file_name(c.str(), rec.candidate), all, meta);
}

}  // namespace

std::string_view disposition_name(Disposition d) {
  switch (d) {
    case Disposition::PASSED: return "PASSED";
    case Disposition::INCORRECT: return "INCORRECT";
    case Disposition::ERRORED: return "ERRORED";
    case Disposition::INVALID: return "INVALID";
    case Disposition::NOT_SUPPORTED: return "NOT_SUPPORTED";
    case Disposition::SKIPPED: return "SKIPPED";
  }
  return "?";
}

const OutputResult* primary_output(const Record& r) {
  for (const char* name : {"o", "y"})
    for (const OutputResult& x : r.outputs)
      if (x.name == name) return &x;
  return r.outputs.empty() ? nullptr : &r.outputs.front();
}

const OutputResult* state_output(const Record& r) {
  for (const char* name : {"ht", "state"})
    for (const OutputResult& x : r.outputs)
      if (x.name == name) return &x;
  return nullptr;
}

double verify_floor_bits(DType format) { return default_policy().min_bits_for(format); }

double candidate_floor_bits(const Policy& policy, const CandidateInfo& ci) {
  return std::min({policy.min_bits_for(ci.input_dtype), policy.min_bits_for(ci.state_dtype),
                   policy.min_bits_for(ci.output_dtype)});
}

namespace {

// " --threads N" when the worker args carry a thread budget, for reproduce commands.
std::string threads_text(const std::vector<std::string>& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--threads") return " --threads " + args[i + 1];
  return {};
}

}  // namespace

std::string outside_args_text(const std::vector<std::string>& args) {
  std::string s;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--plugin" && args[i] != "--exec") continue;
    std::string q;
    for (char ch : args[i + 1]) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    s += " " + args[i] + " '" + q + "'";
  }
  return s;
}

TensorMap generate_inputs(const Case& c) {
  const Regime* r = find_regime(c.op(), c.text("regime"));
  if (!r) throw InputError(fmt::format("{}: unknown regime '{}'", c.op(), c.text("regime")));
  TensorMap in;
  r->generate(c, in);
  return in;
}

TensorMap run_candidate(const Candidate& cand, const Case& c, const TensorMap& in) {
  const OpSpec* op = find_op(c.op());
  TensorMap out;
  for (const auto& [name, shape] : op->output_shapes(c)) out[name] = Tensor(output_dtype(name, cand.info()), shape);
  if (op->drive)
    op->drive(cand, c, in, out);
  else
    cand.run(c, in, out);
  return out;
}

std::vector<Record> verify_case(const Case& c, const std::vector<const Candidate*>& candidates,
                                const VerifyOptions& opt, const TensorMap* stored) {
  const OpSpec* op = find_op(c.op());
  TensorMap in = stored ? *stored : generate_inputs(c);
  op->check_inputs(c, in);

  // The reference runs on its own thread while the candidates run: on a one-head case each of them
  // uses one core. Candidates never see it.
  double ref_seconds = 0;
  std::future<RefOutputs> ref_future = std::async(std::launch::async, [&] {
    auto t0 = std::chrono::steady_clock::now();
    RefOutputs r = op->reference(c, in, opt.tier, -1);
    ref_seconds = seconds_since(t0);
    return r;
  });
  std::optional<RefOutputs> ref_value;
  auto reference = [&]() -> const RefOutputs& {
    if (!ref_value) ref_value = ref_future.get();
    return *ref_value;
  };

  std::optional<Certification> cert;
  if (opt.certify) cert = op->certify(c, in, opt.tier);

  std::vector<Record> records;
  const std::map<std::string, Positions> positions = op->positions(c);
  std::optional<WorkerInputs> worker_inputs;   // written once, at the first isolated run
  for (const Candidate* cand : candidates) {
    Record rec;
    rec.case_str = c.str();
    rec.op = c.op();
    rec.candidate = cand->name();
    rec.tier = opt.tier;
    rec.flops = op->flops(c);
    rec.bytes = op->bytes(c, cand->info().storage());
    rec.reproduce = fmt::format("driftgate verify --candidate {} --case '{}' --ref-tier {}{}{}{}{}{}", cand->name(), c.str(),
                                tier_name(opt.tier), opt.certify ? " --certify" : "",
                                opt.min_bits ? fmt::format(" --min-bits {}", *opt.min_bits) : "",
                                opt.isolate && opt.worker_runs != 1 ? fmt::format(" --runs {}", opt.worker_runs) : "",
                                opt.isolate && opt.wall_seconds != 600 ? fmt::format(" --timeout {}", opt.wall_seconds) : "",
                                threads_text(opt.worker_args) + outside_args_text(opt.worker_args));
    // A candidate is held to the floor of the narrowest format it declares (a bf16 state limits o).
    const CandidateInfo& ci = cand->info();
    rec.min_bits =
        opt.min_bits.value_or(candidate_floor_bits(opt.floor_policy ? *opt.floor_policy : default_policy(), ci));
    if (cert) rec.cert = Certificate{*cert, certified_for(cert->ref_bits, ci.output_dtype)};
    if (cand->info().op != c.op()) {
      rec.disposition = Disposition::SKIPPED;
      rec.reason = fmt::format("candidate implements {}, not {}", cand->info().op, c.op());
      records.push_back(rec);
      continue;
    }
    TensorMap out;
    auto t1 = std::chrono::steady_clock::now();
    if (opt.isolate) {
      // The candidate runs in its own process; the reference and the results never live there.
      if (!worker_inputs) worker_inputs.emplace(in, c.str());
      WorkerRequest req;
      req.candidate = cand->name();
      req.case_str = c.str();
      req.shared_inputs = &*worker_inputs;
      req.runs = opt.worker_runs;
      req.limits.wall_seconds = opt.wall_seconds;
      req.limits.memory_bytes = opt.memory_bytes;
      req.extra_args = opt.worker_args;
      WorkerResult w = run_in_worker(req);
      rec.seconds = w.seconds;
      rec.confinement = w.confinement;
      std::string why;
      if (std::optional<Disposition> d = worker_disposition(w, &why)) {
        rec.disposition = *d;
        rec.reason = why;
        if (!opt.save_failures_dir.empty())
          save_failure(opt.save_failures_dir, c, rec, in, reference(), w.outputs.empty() ? nullptr : &w.outputs);
        records.push_back(rec);
        continue;
      }
      out = std::move(w.outputs);
    } else {
      try {
        out = run_candidate(*cand, c, in);
      } catch (const NotSupported& e) {
        rec.disposition = Disposition::NOT_SUPPORTED;
        rec.reason = e.what();
        records.push_back(rec);
        continue;
      } catch (const std::exception& e) {
        rec.seconds = seconds_since(t1);
        rec.disposition = Disposition::ERRORED;
        rec.reason = fmt::format("threw: {}", e.what());
        if (!opt.save_failures_dir.empty()) save_failure(opt.save_failures_dir, c, rec, in, reference(), nullptr);
        records.push_back(rec);
        continue;
      }
      rec.seconds = seconds_since(t1);
    }

    std::vector<std::string> problems;
    for (const auto& [name, values] : reference()) {
      const Tensor& t = out.at(name);
      if (!info(t.dtype()).is_float || measured_only(*op, name)) continue;   // a set: the op's measures judge it
      std::vector<double> cv(static_cast<size_t>(t.numel()));
      t.read(0, cv);
      OutputResult r;
      r.name = name;
      r.dtype = t.dtype();
      // The drift curve is a second pass over the same elements: it runs beside compare().
      auto p = positions.find(name);
      std::future<DriftCurve> drift;
      if (p != positions.end())
        drift = std::async(std::launch::async, [&, &ref_values = values] {   // clang 14 captures no bindings
          return drift_curve(ref_values, cv, p->second.token_position, p->second.inner);
        });
      r.metrics = compare(values, cv, t.dtype());
      if (drift.valid()) r.drift = drift.get();
      if (r.metrics.nonfinite_mismatch > 0)
        problems.push_back(fmt::format("{}: {} NaN/Inf positions differ from the reference (first at flat index {})",
                                       name, r.metrics.nonfinite_mismatch, r.metrics.first_mismatch));
      else if (r.metrics.bits < rec.min_bits)
        problems.push_back(fmt::format("{}: {:.1f} bits < floor {:.0f} (rms_ratio {:.3g})", name, r.metrics.bits,
                                       rec.min_bits, r.metrics.rms_ratio));
      rec.outputs.push_back(std::move(r));
    }
    if (op->measure) {
      rec.measures = op->measure(c, cand->info(), in, reference(), out);
      for (const OpMeasure& m : rec.measures)
        if (!(m.value <= m.limit) && !std::isnan(m.limit))
          problems.push_back(fmt::format("{}: {:.3g} > limit {:.3g} ({})", m.name, m.value, m.limit, m.detail));
    }
    rec.disposition = problems.empty() ? Disposition::PASSED : Disposition::INCORRECT;
    for (const std::string& s : problems) rec.reason += (rec.reason.empty() ? "" : "; ") + s;
    if ((rec.disposition != Disposition::PASSED || opt.save_every_row) && !opt.save_failures_dir.empty())
      save_failure(opt.save_failures_dir, c, rec, in, reference(), &out, opt.save_meta);
    records.push_back(std::move(rec));
  }
  reference();   // joins the reference thread (and rethrows its error) before its time is read
  for (Record& r : records) r.ref_seconds = ref_seconds;
  return records;
}

std::string verify_rows_digest(const nlohmann::json& records, const nlohmann::json& key) {
  return sha256_hex("driftgate verify rows v1\n" + key.dump() + "\n" + records.dump());
}

}  // namespace dg
