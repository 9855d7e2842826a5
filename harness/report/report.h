// Renderers: Records in, a console table and versioned JSON out. Renderers read Records and
// nothing else.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/judge/verify.h"

namespace dg {

inline constexpr int kSchemaVersion = 1;

// Provenance of a run: git commit and dirty flag, compiler, flags, CPU, seed, command line.
nlohmann::json run_context(const std::string& command_line);

nlohmann::json to_json(const Record& r);
// The inverse of to_json, for resuming from a results file (certification is not read back).
Record record_from_json(const nlohmann::json& j);
nlohmann::json records_json(const std::vector<Record>& records, const std::string& command_line);

// The drift table: one row per (case, candidate): bits, max ULP, rms_ratio, drift growth exponent,
// ref_bits when certified, disposition.
std::string drift_table(const std::vector<Record>& records);

// Writes text to a unique temporary file beside `path`, fsyncs it and renames it into place: a reader
// sees the old file or the new one. Refuses (InputError, nothing written) a `path` that exists and is
// not a regular file; the temporary file is removed on every failure.
void write_file_atomic(const std::string& path, const std::string& text);

// Text escaped for XML and HTML (&, <, >, ", '): junit.xml, the report's HTML and SVG.
std::string xml_escape(const std::string& s);

}  // namespace dg
