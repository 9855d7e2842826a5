#!/usr/bin/env python3
"""An exec candidate that leaves daemons behind to slow the other candidate's calls: on its first
call it forks three daemons (each twice, in a session of its own, output closed) that spin on the
core they inherit whenever no call of this program is running, and nap while one is (a flag file
in TMPDIR). Its own calls compute the numpy example's numbers (kda_numpy.py) and then spin for half as
long again as they ran, plus 0.1 s: about 1.5x slower, and faster than a base its daemons slow about 2x. driftgate stops every other process of the timing sandbox during each
timed call, so the gate must not read it FASTER.

    --exec "kda_exec_burner_f32=.venv/bin/python3 tests/attacks/timing_exec_burner.py {in} {out}"
"""
import os
import sys
import time

TMP = os.environ.get("TMPDIR") or "/tmp"
FLAG = os.path.join(TMP, "burner.own_call")
PIDFILE = os.path.join(TMP, "burner.pid")
open(FLAG, "w").close()   # before numpy loads: the daemons nap for the whole of this call
T0 = time.monotonic()

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "candidates", "examples", "exec"))
import kda_numpy as kn  # noqa: E402


def spin_unless_flagged():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        if os.path.exists(FLAG):
            time.sleep(0.00002)
        else:
            for _ in range(2000):
                pass


def start_daemons():
    """Three daemons, each forked twice in a session of its own: with one core granted they take
    three quarters of it from the other candidate's calls."""
    if os.path.exists(PIDFILE):
        return
    open(PIDFILE, "w").close()
    for _ in range(3):
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            spin_unless_flagged()
        os.waitpid(child, 0)


def main(argv):
    try:
        start_daemons()
        rc = kn.main(["kda_numpy.py", argv[1], argv[2]])
        # Half as long again, plus 0.1 s for the interpreter's start-up, which T0 cannot see: without
        # it this program read faster than the numpy base on a loaded machine (132 ms a call
        # against 144 ms, the base timed alone at the same speed), an honest speed, not the attack.
        end = time.monotonic() + (time.monotonic() - T0) / 2 + 0.1
        while time.monotonic() < end:
            pass
        return rc
    finally:
        os.remove(FLAG)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
