// A Case is an op name plus typed parameters; its canonical string is its one identity: the CLI
// filter, the JSON key, the replay command and the RNG key all use it. Parsing the canonical string
// gives back the same Case.
//
//   kda(T=65536,H=4,K=128,V=128,regime=long_memory,dtype=bf16,seed=0)
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/core/dtype.h"

namespace dg {

// Bad input from a person or a file: malformed case strings, shapes that break a constraint,
// unknown names. The CLI maps it to exit code 2 with what() as the message.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ParamKind : uint8_t { integer, real, text, boolean, int_list };

struct ParamSpec {
  std::string name;
  ParamKind kind;
  std::string default_value;          // canonical text of the default
  std::string doc;
  bool always_print = false;          // part of every canonical string (shapes, regime, dtype, seed)
  std::vector<std::string> choices = {};  // for text parameters with a closed set of values
};

class Case {
 public:
  const std::string& op() const { return op_; }
  // Canonical string: op(params in schema order: the always-printed ones, and every other one whose
  // value differs from its default).
  std::string str() const;

  int64_t integer(std::string_view name) const;
  double real(std::string_view name) const;
  const std::string& text(std::string_view name) const;
  bool boolean(std::string_view name) const;
  std::vector<int64_t> int_list(std::string_view name) const;
  bool is_default(std::string_view name) const;

  uint64_t seed() const { return static_cast<uint64_t>(integer("seed")); }
  DType dtype() const;   // the dtype of the stored floating-point inputs

  // Returns a copy with one parameter replaced (value in canonical text); re-validated.
  Case with(std::string_view name, std::string_view value) const;

  bool operator==(const Case& o) const { return str() == o.str(); }

 private:
  friend Case parse_case(std::string_view);
  friend Case make_case(std::string_view, const std::map<std::string, std::string>&);
  std::string op_;
  std::map<std::string, std::string, std::less<>> values_;   // every parameter, canonical text
  std::map<std::string, bool, std::less<>> explicit_;
};

// The product of `factors` (each >= 0) in checked arithmetic; an InputError "<what> = a*b*... does not
// fit in 64 bits" when it overflows int64. Ops validate every element count they form with it.
int64_t checked_product(const std::string& what, std::initializer_list<int64_t> factors);

// A numeric command-line option: throws InputError "<option> must be in [lo, hi], got <value>" (or
// (lo, hi] when `lo_open`) for NaN, infinities and values outside the range.
void check_option_range(const std::string& option, double value, double lo, double hi, bool lo_open = false);

// Parses "op(a=1,b=x)" (spaces allowed around tokens). Unknown ops or parameters, bad values,
// duplicates and broken constraints throw InputError naming the problem.
Case parse_case(std::string_view text);
Case make_case(std::string_view op, const std::map<std::string, std::string>& params);

}  // namespace dg
