#!/usr/bin/env python3
"""Exec candidates that attack the harness around them (tests/harness/isolation/sandbox_test.cpp runs them):

    attack_exec.py MODE {in} {out}

Every mode first computes the answer with the numpy example (candidates/examples/exec/kda_numpy.py)
and, except "honest", clears the low 12 mantissa bits of every f32 output (about 11 bits, where the
example keeps about 22). Then:
  honest   nothing more
  rewrite  overwrites the second half of every driftgate inputs file or descriptor it can name
           (the worker's --in path or --in-fd descriptor), so the candidates after it would read
           other inputs
  hang     joins driftgate's process group, leaves a setsid grandchild (`sleep`), sleeps forever
  daemon   leaves a setsid grandchild (`sleep`) and returns
  outside  writes every path in $DG_CANARY_TARGET (':'-separated) and other workers' directories,
           then exits 1 (so the row shows its attempts)
  flood    writes $DG_FLOOD_BYTES (default 2 GiB) to stderr, then a last line
  forge    leaves a process that replaces the worker's out.safetensors with a forged one (o of one
           element, an I32 ht, an extra tensor) once the worker has written its report
Processes it leaves behind carry DG_ATTACK_MARKER in their environment. Each attempt is reported on
stderr as "attack: TARGET: WRITTEN" or "attack: TARGET: <error>".
"""
import json
import os
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "candidates", "examples", "exec", "kda_numpy.py")


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def ppid_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def worker():
    """(pid, argv) of the driftgate worker above this process."""
    pid = os.getppid()
    while pid > 1:
        argv = cmdline(pid)
        if "worker" in argv:
            return pid, argv
        pid = ppid_of(pid)
    return 0, []


def arg(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def note(target, err):
    print(f"attack: {target}: {'WRITTEN' if err is None else err}", file=sys.stderr, flush=True)


def scribble(path):
    try:
        with open(path, "r+b") as f:
            size = f.seek(0, 2)
            f.seek(size // 2)
            f.write(struct.pack("<f", 1.0) * ((size - size // 2) // 4))
        note(path, None)
    except OSError as e:
        note(path, e.strerror)


def degrade(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        for i in range(8 + n + b, 8 + n + e, 4):
            data[i] &= 0x00
            data[i + 1] &= 0xF0
    with open(path, "wb") as f:
        f.write(data)


def forged_file(path):
    tensors = {"o": ("F32", [1], b"\0" * 4), "ht": ("I32", [1], b"\0" * 4), "extra": ("F32", [2], b"\0" * 8)}
    header, blob = {}, b""
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    with open(path + ".forged", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
    os.replace(path + ".forged", path)


def leave_behind(body):
    """Runs body() in a grandchild in a session of its own; returns in the original process."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                body()
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()


def sleeper():
    env = dict(os.environ, DG_ATTACK_MARKER=os.environ.get("DG_ATTACK_MARKER", "dg-attack"))
    os.execve("/bin/sleep", ["sleep", "3600"], env)


def main():
    mode, inp, out = sys.argv[1], sys.argv[2], sys.argv[3]
    subprocess.run([sys.executable, EXAMPLE, inp, out], check=True)
    if mode == "honest":
        return
    degrade(out)
    wpid, wargv = worker()
    if mode == "rewrite":
        targets = []
        if arg(wargv, "--in-fd"):
            targets.append(f"/proc/{wpid}/fd/{arg(wargv, '--in-fd')}")
        if arg(wargv, "--in"):
            targets.append(arg(wargv, "--in"))
        for t in targets:
            scribble(t)
    elif mode == "hang":
        try:
            os.setpgid(0, os.getpgid(ppid_of(wpid)))
        except OSError as e:
            note("setpgid", e.strerror)
        leave_behind(sleeper)
        while True:
            time.sleep(3600)
    elif mode == "daemon":
        leave_behind(sleeper)
    elif mode == "outside":
        targets = [t for t in os.environ.get("DG_CANARY_TARGET", "").split(":") if t]
        for root in ("/dev/shm", "/tmp"):
            try:
                for d in os.listdir(root):
                    full = os.path.join(root, d)
                    if d.startswith("driftgate-worker-") and not os.environ.get("TMPDIR", "").startswith(full):
                        targets.append(os.path.join(full, "canary.txt"))
            except OSError:
                pass
        for t in targets:
            try:
                with open(t, "a") as f:
                    f.write("attack_exec.py outside\n")
                note(t, None)
            except OSError as e:
                note(t, e.strerror)
        sys.exit(1)
    elif mode == "flood":
        left = int(os.environ.get("DG_FLOOD_BYTES", str(2 << 30)))
        block = b"x" * ((1 << 20) - 1) + b"\n"
        while left > 0:
            os.write(2, block[:left])
            left -= len(block)
        print("attack: the end of the flood", file=sys.stderr, flush=True)
    elif mode == "forge":
        wout = arg(wargv, "--out")
        report = arg(wargv, "--report")

        def forge():
            os.environ["DG_ATTACK_MARKER"] = os.environ.get("DG_ATTACK_MARKER", "dg-attack")
            end = time.time() + 60
            while time.time() < end:
                if report and os.path.exists(report):
                    forged_file(wout)
                    return
                time.sleep(0.0005)

        if wout:
            leave_behind(forge)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
