// Exec candidates: any program, in any language, as a candidate. `driftgate --exec NAME='CMD {in}
// {out}'` registers NAME (backend "exec"); a run writes the case's inputs to a .safetensors file,
// runs CMD with {in} and {out} replaced by that file and the output file (shell-quoted), and reads
// the outputs back.
//
// NAME follows <op>_exec_<algo>_<dtype> (kda_exec_numpy_f32): it starts with the op's name and '_'
// (the longest op that matches: kda_decode_exec_x is a kda_decode candidate). A trailing _<dtype>
// sets the candidate's dtypes: f32 or f64 for its inputs, state and outputs; a narrower format
// (bf16_ etc.) for its inputs and outputs with an f32 state, as the production kernels keep it.
// Without a dtype suffix the candidate is f32.
//
// The input file holds every input tensor of the case under its own name (in the case's stored
// dtype), every in-out tensor's current value (kda_decode's "state"), and in __metadata__:
//   case          the canonical case string
//   op            the op
//   candidate     NAME
//   params        the parameters as JSON (candidate_abi.h documents the object)
//   outputs       the tensors to write, comma-separated ("ht,o")
//   out.X.dtype   the .safetensors dtype to write X in ("F32", "BF16", ...)
//   out.X.shape   X's shape as a JSON array ("[1,64,1,16]")
// The program writes every output to {out}, with that shape; in that dtype, or in another float
// dtype that driftgate converts (exactly when widening, one rounding when narrowing). It exits 0 on
// success, and 95 (kExecNotSupported, the value of candidate_abi.h's DG_NOT_SUPPORTED) when it does
// not implement the case (a layout, varlen, a gate mode): the row is NOT_SUPPORTED with the tail of
// its stderr, and the gate's policy decides whether the case is skipped. On any other nonzero exit, a signal, a missing output file, tensor or a wrong shape the row is
// ERRORED with the exit status and the tail of the program's stderr. Its stdout and stderr never
// reach driftgate's own. The files live in a fresh directory under $TMPDIR, removed afterwards.
#pragma once

#include <string>
#include <vector>

#include "harness/cases/registry.h"

namespace dg {

// The exit code of an exec program that does not support a case (candidate_abi.h DG_NOT_SUPPORTED).
inline constexpr int kExecNotSupported = 95;

// Registers the exec candidate of a spec NAME=CMD (split at the first '='; one pair of quotes
// around CMD is removed). Throws InputError naming the problem: no '=', a bad NAME, no op prefix,
// CMD without {in} or {out}, a name already registered.
void register_exec(const std::string& spec);

// The specs registered so far, in order (a worker process registers the same ones).
std::vector<std::string> exec_specs();

// The command-line arguments that load the same plugins and register the same exec candidates in
// another driftgate process (a worker): --plugin PATH ... --exec SPEC ..., in load order.
std::vector<std::string> outside_candidate_args();

// `args` (as outside_candidate_args gives them, with --threads N and the like) less every --plugin
// and --exec that does not bring `candidate` itself: a worker that runs `candidate` alone loads no
// other outside code.
std::vector<std::string> outside_args_of(const std::vector<std::string>& args, const std::string& candidate);

// Copies each tensor of `out` from the .safetensors file at `path` (the program's {out}), converting
// its dtype; throws std::runtime_error naming `candidate` and the missing or mis-shaped tensor.
void read_exec_outputs(const std::string& path, const std::string& candidate, TensorMap& out);

// `s` as one /bin/sh word: in single quotes, with each ' written as '\''.
std::string shell_quote(const std::string& s);

}  // namespace dg
