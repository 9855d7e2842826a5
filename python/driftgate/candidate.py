"""An exec candidate in one function: @driftgate.candidate, driftgate.run, NotSupported.

    import driftgate

    @driftgate.candidate(float32=True)
    def kda(params, inputs):     # the case's params (dict), its input tensors (name -> numpy array)
        ...
        return {"o": o, "ht": ht}   # any float arrays (or torch tensors); converted as {in} asks

run as `python3 my_kernel.py {in} {out}` (driftgate --exec 'NAME=python3 my_kernel.py {in} {out}').

When the decorated function's module is __main__, the decorator runs it on sys.argv at once and
exits with its code: define it after everything it calls. Imported, the decorator returns the
function unchanged, with `.main(argv)` to run it as the command does (returning the exit code);
driftgate.run(fn, argv) does the same for any undecorated function.

Exit codes (harness/isolation/exec_candidate.h):
    0    outputs written
    95   NotSupported raised (kExecNotSupported): a NOT_SUPPORTED row, its message on stderr
    1    any other exception (its traceback on stderr) or an output missing, extra or mis-shaped
         (one line naming the tensor): an ERRORED row with the tail of stderr
    2    not called as PROG IN OUT
"""
import functools
import os
import sys
import traceback

from driftgate.exec_io import OutputError, read_inputs, write_outputs

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_SUPPORTED = 95   # harness/isolation/exec_candidate.h kExecNotSupported, candidate_abi.h DG_NOT_SUPPORTED


class NotSupported(Exception):
    """Raise it for a case the candidate does not implement (a layout, varlen, a gate mode): the
    program exits 95 with the message on stderr, and driftgate's row is NOT_SUPPORTED."""


def run(fn, argv=None, *, op=None, float32=None):
    """Runs `fn(params, inputs)` as the exec program `PROG IN OUT` and returns the exit code. `op`
    (a name or a tuple of names): any other op is NotSupported. float32=True: every float input as
    numpy.float32. Both default to what @driftgate.candidate gave `fn`, else None and False."""
    argv = sys.argv if argv is None else list(argv)
    options = getattr(fn, "__driftgate__", {})
    op = options.get("op") if op is None else op
    float32 = options.get("float32", False) if float32 is None else float32
    prog = os.path.basename(argv[0]) if argv else "candidate"
    if len(argv) != 3:
        print(f"usage: {prog} IN.safetensors OUT.safetensors (driftgate --exec 'NAME=... {{in}} {{out}}')",
              file=sys.stderr)
        return EXIT_USAGE
    label = prog
    try:
        spec = read_inputs(argv[1], float32=float32)
        label = spec.candidate or prog
        ops = (op,) if isinstance(op, str) else op
        if ops and spec.op not in ops:
            raise NotSupported(f"op {spec.op or '(none)'} is not supported ({', '.join(ops)})")
        result = fn(spec.params, spec.inputs)
        if result is None:
            raise OutputError(f"{getattr(fn, '__name__', 'the candidate')} returned None, "
                              f"not a dict of its outputs ({', '.join(spec.outputs)})")
        write_outputs(argv[2], result, spec)
    except NotSupported as e:
        print(f"{label}: {e}", file=sys.stderr)
        return EXIT_NOT_SUPPORTED
    except OutputError as e:
        print(f"{label}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:   # noqa: BLE001 - every failure becomes the ERRORED row's stderr
        traceback.print_exc()
        print(f"{label}: failed (traceback above)", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def candidate(fn=None, *, op=None, float32=False):
    """Decorator: @driftgate.candidate or @driftgate.candidate(op="kda", float32=True)."""
    def wrap(f):
        f.__driftgate__ = {"op": op, "float32": float32}
        f.main = functools.partial(run, f)
        if f.__module__ == "__main__":
            sys.exit(run(f, sys.argv))
        return f
    return wrap(fn) if fn is not None else wrap
