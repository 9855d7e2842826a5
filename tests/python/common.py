"""Shared by tests/python: the checkout's paths, the driftgate executable, running it."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CANDIDATES = os.path.join(HERE, "candidates")
EXAMPLE = os.path.join(REPO, "candidates", "examples", "exec", "kda_numpy.py")
PYTHON = sys.executable   # the venv's python3 (tests/python/run.sh)
# ctest passes the build's executable; run by hand, the default build's.
DRIFTGATE = os.environ.get("DRIFTGATE_EXE") or os.path.join(REPO, "build", "driftgate")
SMALL = "kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)"


def requires_driftgate(test):
    return unittest.skipUnless(os.access(DRIFTGATE, os.X_OK),
                               f"skip: no driftgate executable at {DRIFTGATE} (set DRIFTGATE_EXE)")(test)


def driftgate(*args, cwd=None):
    """Runs driftgate with `args`; returns the CompletedProcess (text)."""
    return subprocess.run([DRIFTGATE, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def exec_spec(name, script, python=PYTHON):
    """--exec NAME='PYTHON SCRIPT {in} {out}'."""
    return f"{name}={python} {script} {{in}} {{out}}"
