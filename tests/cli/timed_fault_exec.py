#!/usr/bin/env python3
"""An exec candidate that is honest in its check runs and fails once timed.

    timed_fault_exec.py segfault|hang DRIFTGATE {in} {out}

Honest: it runs `DRIFTGATE run --candidate kda_cpu_recurrent_f32` on {in} (no numpy needed).
"Timed" is detected as an adversary would: by counting its calls in the worker's directory ($TMPDIR,
which lives as long as the worker). A check worker calls it twice; driftgate's timing worker calls it
many times in a process of its own.
"""
import os
import signal
import sys
import time


def being_timed():
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "timed_fault_exec.calls")
    try:
        with open(path) as f:
            calls = int(f.read() or 0)
    except (OSError, ValueError):
        calls = 0
    with open(path, "w") as f:
        f.write(str(calls + 1))
    return calls >= 2


def main():
    mode, driftgate, path_in, path_out = sys.argv[1:5]
    if being_timed():
        if mode == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        while True:
            time.sleep(3600)
    os.execv(driftgate, [driftgate, "run", "--candidate", "kda_cpu_recurrent_f32", "--in", path_in, "--out", path_out])


if __name__ == "__main__":
    main()
