#!/usr/bin/env python3
"""An exec candidate that ignores the thread budget (DRIFTGATE_THREADS): as soon as it starts it
widens its CPU affinity to every core and forks, and the two processes load numpy side by side and
compute the two halves of the value columns (the child the second half). The numbers are the numpy
example's (kda_numpy.py), so it passes precision; the gate must reject it by rule cpu_budget. (The
fork comes first so that the whole call, not only the arithmetic, runs on two cores: a call of this
size is mostly the interpreter loading numpy, and splitting only the arithmetic used 1.1-1.3
CPU-seconds per second, inside the rule's tolerance of 1.25.)

    --exec "kda_exec_twoprocs_f32=.venv/bin/python3 tests/attacks/timing_exec_parallel.py {in} {out}"
"""
import os

try:
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
except OSError:
    pass
READ_END, WRITE_END = os.pipe()
CHILD = os.fork()

import pickle  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "candidates", "examples", "exec"))
import numpy as np  # noqa: E402
import driftgate  # noqa: E402
import kda_numpy as kn  # noqa: E402


def columns(p, x, lo, hi):
    p2 = dict(p, V=hi - lo)
    x2 = dict(x)
    x2["v"] = np.ascontiguousarray(x["v"][..., lo:hi])
    if "h0" in x:
        x2["h0"] = np.ascontiguousarray(x["h0"][..., lo:hi])
    return kn.kda(p2, x2)


def main(argv):
    spec = driftgate.read_inputs(argv[1], float32=True)
    p, x = spec.params, spec.inputs
    V = p["V"]
    half = V // 2
    if CHILD == 0:
        os.close(READ_END)
        data = pickle.dumps(columns(p, x, half, V))
        with os.fdopen(WRITE_END, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(WRITE_END)
    a = columns(p, x, 0, half)
    with os.fdopen(READ_END, "rb") as f:
        b = pickle.loads(f.read())
    os.waitpid(CHILD, 0)
    result = {"o": np.concatenate([a["o"], b["o"]], axis=-1), "ht": np.concatenate([a["ht"], b["ht"]], axis=-1)}
    driftgate.write_outputs(argv[2], result, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
