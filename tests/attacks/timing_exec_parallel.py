#!/usr/bin/env python3
"""An exec candidate that ignores the thread budget (DRIFTGATE_THREADS): it widens its CPU
affinity to every core and computes the two halves of the value columns in two processes (a
forked child does the second half). The numbers are the numpy example's (kda_numpy.py), so it
passes precision; the gate must reject it by rule cpu_budget.

    --exec "kda_exec_twoprocs_f32=python3 tests/attacks/timing_exec_parallel.py {in} {out}"
"""
import json
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "candidates", "examples", "exec"))
import numpy as np  # noqa: E402
import kda_numpy as kn  # noqa: E402


def columns(p, x, lo, hi):
    p2 = dict(p, V=hi - lo)
    x2 = dict(x)
    x2["v"] = np.ascontiguousarray(x["v"][..., lo:hi])
    if "h0" in x:
        x2["h0"] = np.ascontiguousarray(x["h0"][..., lo:hi])
    return kn.kda(p2, x2)


def main(argv):
    x, meta = kn.read_safetensors(argv[1])
    p = json.loads(meta["params"])
    V = p["V"]
    half = V // 2
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except OSError:
        pass
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        data = pickle.dumps(columns(p, x, half, V))
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    a = columns(p, x, 0, half)
    with os.fdopen(r, "rb") as f:
        b = pickle.loads(f.read())
    os.waitpid(pid, 0)
    result = {"o": np.concatenate([a["o"], b["o"]], axis=-1), "ht": np.concatenate([a["ht"], b["ht"]], axis=-1)}
    names = meta["outputs"].split(",")
    dtypes, arrays = {}, {}
    for name in names:
        dtypes[name] = meta[f"out.{name}.dtype"]
        arrays[name] = result[name]
    kn.write_safetensors(argv[2], arrays, dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
