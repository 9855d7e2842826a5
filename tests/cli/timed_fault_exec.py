#!/usr/bin/env python3
"""An exec candidate that is honest in its check runs and fails once timed.

    timed_fault_exec.py segfault|hang DRIFTGATE {in} {out}

Honest: it runs `DRIFTGATE run --candidate kda_cpu_recurrent_f32` on {in} (no numpy needed).
"Timed" is detected as an adversary would: an ancestor process is driftgate's timing worker
(`driftgate bench-worker`), which calls the candidate many times in a process of its own.
"""
import os
import signal
import sys
import time


def being_timed():
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"bench-worker" in f.read():
                    return True
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


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
