"""The exec-candidate file contract (harness/isolation/exec_candidate.h), read and written.

driftgate runs an exec candidate as `CMD {in} {out}`. {in} holds every input tensor of the case
under its own name, in the case's stored dtype (every in-out tensor too: kda_decode's "state"), and
in __metadata__:
    case          the canonical case string, "kda(T=64,H=1,K=16,V=16,regime=kimi_linear,...)"
    op            the op, "kda"
    candidate     the exec candidate's name, "kda_exec_numpy_f32"
    params        the parameters as JSON (include/driftgate/candidate_abi.h documents the object)
    outputs       the tensors to write, comma-separated, "ht,o"
    out.X.dtype   the .safetensors dtype to write X in, "F32", "BF16", ...
    out.X.shape   X's shape as a JSON array, "[1,64,1,16]"
The program writes every output to {out} in that shape and dtype.

read_inputs(path) -> ExecInput, everything above parsed. write_outputs(path, arrays, spec) writes
exactly spec's outputs, each converted to its dtype with one rounding (driftgate/dtypes.py), and
raises OutputError naming the tensor for a missing output, an extra one or a wrong shape.
"""
import json
from dataclasses import dataclass, field

from driftgate import files
from driftgate.dtypes import as_numpy, convert


class OutputError(ValueError):
    """An output the case asks for is missing, has another shape, or was not asked for."""


@dataclass
class ExecInput:
    path: str
    inputs: dict                                   # name -> numpy array
    params: dict = field(default_factory=dict)     # the case's parameters
    case: str = ""
    op: str = ""
    candidate: str = ""
    outputs: list = field(default_factory=list)   # output names, in the file's order
    output_dtypes: dict = field(default_factory=dict)   # name -> "F32", "BF16", ...
    output_shapes: dict = field(default_factory=dict)   # name -> tuple of ints
    metadata: dict = field(default_factory=dict)   # __metadata__ as stored


def read_inputs(path, float32=False):
    """The exec input file at `path`. float32=True: every float tensor as numpy.float32 (driftgate/
    files.py load). A file without the exec keys (`driftgate export` writes only `case`) reads with
    empty params and no outputs."""
    tensors, meta = files.load(path, float32=float32)
    outputs = [n for n in meta.get("outputs", "").split(",") if n]
    spec = ExecInput(path=path, inputs=tensors, metadata=meta, case=meta.get("case", ""),
                     op=meta.get("op", ""), candidate=meta.get("candidate", ""), outputs=outputs)
    try:
        spec.params = json.loads(meta["params"]) if "params" in meta else {}
        for n in outputs:
            spec.output_dtypes[n] = meta[f"out.{n}.dtype"]
            spec.output_shapes[n] = tuple(json.loads(meta[f"out.{n}.shape"]))
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path}: malformed exec metadata ({type(e).__name__}: {e})") from None
    return spec


def write_outputs(path, arrays, spec):
    """Writes `arrays` (name -> float array or torch tensor) to `path` as `spec` (an ExecInput) asks:
    every name of spec.outputs, in spec.output_dtypes[name], of shape spec.output_shapes[name]."""
    if not isinstance(arrays, dict):
        raise OutputError(f"the outputs must be a dict of name -> array ({', '.join(spec.outputs)}), "
                          f"got {type(arrays).__name__}")
    asked = ", ".join(spec.outputs)
    for name in spec.outputs:
        if name not in arrays:
            raise OutputError(f"output tensor '{name}' is missing (the case asks for {asked}; "
                              f"returned {', '.join(sorted(arrays)) or 'nothing'})")
    for name in arrays:
        if name not in spec.outputs:
            raise OutputError(f"output tensor '{name}' is not one the case asks for ({asked})")
    out = {}
    for name in spec.outputs:
        a = as_numpy(arrays[name])
        if tuple(a.shape) != tuple(spec.output_shapes[name]):
            raise OutputError(f"output tensor '{name}' has shape {list(a.shape)}, "
                              f"the case asks for {list(spec.output_shapes[name])}")
        try:
            out[name] = convert(a, spec.output_dtypes[name], name=f"output tensor '{name}'")
        except (TypeError, ValueError) as e:
            raise OutputError(str(e)) from None
    meta = {k: v for k, v in (("case", spec.case), ("candidate", spec.candidate)) if v}
    files.save(path, out, meta)
