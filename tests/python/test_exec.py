"""@driftgate.candidate end to end: programs run by `driftgate verify --exec`, and by hand on an
input file driftgate wrote. PASSED rows, NotSupported -> exit 95 and a NOT_SUPPORTED row, a wrong
shape or a missing output -> an ERRORED row naming the tensor, an exception -> its traceback."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import driftgate
from common import CANDIDATES, EXAMPLE, PYTHON, SMALL, driftgate as run_driftgate, exec_spec, requires_driftgate


def candidate(name):
    return os.path.join(CANDIDATES, name)


@requires_driftgate
class VerifyExec(unittest.TestCase):
    """Rows of `driftgate verify --exec NAME='PYTHON SCRIPT {in} {out}'`, read from --json."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dg_python_exec_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def row(self, name, script, case=SMALL):
        out = os.path.join(self.dir, f"{name}.json")
        r = run_driftgate("verify", "--exec", exec_spec(name, script), "--candidate", name, "--case", case,
                          "--json", out)
        self.assertTrue(os.path.exists(out), f"no --json written (exit {r.returncode})\n{r.stdout}{r.stderr}")
        with open(out) as f:
            records = json.load(f)["records"]
        self.assertEqual(len(records), 1)
        return records[0], r

    def test_the_readme_example_and_the_numpy_example_pass(self):
        for name, script, case in (
                ("kda_exec_tiny_f32", candidate("kda_tiny.py"), SMALL),
                ("kda_exec_tiny_bf16", candidate("kda_tiny.py"), "kda(T=65,B=2,H=2,K=32,V=16,regime=kimi_linear,dtype=f32,seed=3)"),
                ("kda_exec_numpy_f32", EXAMPLE, "kda(T=65,H=2,HV=4,K=32,V=16,regime=long_memory,dtype=f32,seed=1)"),
                ("kda_exec_numpy_f16", EXAMPLE, SMALL),
                ("kda_exec_numpy_e4m3", EXAMPLE, SMALL),
                ("kda_exec_numpy_e5m2", EXAMPLE, SMALL)):
            rec, r = self.row(name, script, case)
            self.assertEqual(rec["disposition"], "PASSED", f"{name} {case}: {rec['reason']}\n{r.stdout}{r.stderr}")
            self.assertEqual(r.returncode, 0, name)

    def test_not_supported_is_a_not_supported_row_with_the_message(self):
        rec, _ = self.row("kda_exec_never_f32", candidate("not_supported.py"))
        self.assertEqual(rec["disposition"], "NOT_SUPPORTED", rec["reason"])
        self.assertIn("kda_exec_never_f32: layout=kfirst with T=64: no case is supported here", rec["reason"])
        rec, _ = self.row("kda_exec_numpy_f32", EXAMPLE, "kda(T=16,H=1,K=16,V=16,regime=glm_safe_gate,dtype=bf16,seed=0)")
        self.assertEqual(rec["disposition"], "NOT_SUPPORTED", rec["reason"])
        self.assertIn("kda_exec_numpy_f32: gate=lower_bound is not supported", rec["reason"])

    def test_a_wrong_shape_or_a_missing_output_is_an_errored_row_naming_the_tensor(self):
        rec, _ = self.row("kda_exec_transposed_f32", candidate("wrong_shape.py"))
        self.assertEqual(rec["disposition"], "ERRORED")
        self.assertIn("kda_exec_transposed_f32: output tensor 'o' has shape [1, 64, 16, 1], the case asks for [1, 64, 1, 16]",
                      rec["reason"])
        rec, _ = self.row("kda_exec_forgetful_f32", candidate("missing_output.py"))
        self.assertEqual(rec["disposition"], "ERRORED")
        self.assertIn("output tensor 'ht' is missing (the case asks for ht, o; returned o)", rec["reason"])

    def test_an_exception_is_an_errored_row_with_its_traceback(self):
        rec, _ = self.row("kda_exec_crash_f32", candidate("crash.py"))
        self.assertEqual(rec["disposition"], "ERRORED")
        self.assertIn("command exited with code 1", rec["reason"])
        self.assertIn("ZeroDivisionError: division by zero", rec["reason"])


@requires_driftgate
class ByHand(unittest.TestCase):
    """The same programs on an input file driftgate wrote (copied out by an --in-process spy)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dg_python_byhand_")
        cls.inp = os.path.join(cls.dir, "in.safetensors")
        spy = f"kda_exec_spy_f32=cp {{in}} '{cls.inp}' && false {{out}}"
        run_driftgate("verify", "--in-process", "--exec", spy, "--candidate", "kda_exec_spy_f32", "--case", SMALL)
        assert os.path.exists(cls.inp), "the spy did not copy driftgate's input file"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_script(self, script, *args):
        return subprocess.run([PYTHON, script, *args], capture_output=True, text=True, timeout=120)

    def test_the_input_file_reads_with_its_case_and_outputs(self):
        spec = driftgate.read_inputs(self.inp)
        self.assertEqual(spec.op, "kda")
        self.assertEqual(spec.candidate, "kda_exec_spy_f32")
        self.assertTrue(spec.case.startswith("kda(T=64,"), spec.case)
        self.assertEqual(spec.params["gate"], "softplus")
        self.assertEqual(spec.outputs, ["ht", "o"])
        self.assertEqual(spec.output_shapes, {"ht": (1, 1, 16, 16), "o": (1, 64, 1, 16)})
        self.assertEqual(spec.output_dtypes, {"ht": "F32", "o": "F32"})
        self.assertEqual(str(spec.inputs["q"].dtype), "bfloat16")
        self.assertEqual(spec.inputs["A_log"].dtype, np.float32)

    def test_exit_codes(self):
        out = os.path.join(self.dir, "out.safetensors")
        r = self.run_script(candidate("kda_tiny.py"), self.inp, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        got, meta = driftgate.load(out)
        self.assertEqual(sorted(got), ["ht", "o"])
        self.assertEqual(got["o"].shape, (1, 64, 1, 16))
        self.assertEqual(meta["candidate"], "kda_exec_spy_f32")
        r = self.run_script(candidate("not_supported.py"), self.inp, out)
        self.assertEqual(r.returncode, driftgate.EXIT_NOT_SUPPORTED)
        self.assertEqual(r.returncode, 95)   # harness/isolation/exec_candidate.h kExecNotSupported
        self.assertIn("no case is supported here", r.stderr)
        r = self.run_script(candidate("wrong_shape.py"), self.inp, out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("output tensor 'o' has shape", r.stderr)
        r = self.run_script(candidate("kda_tiny.py"), self.inp)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: kda_tiny.py IN.safetensors OUT.safetensors", r.stderr)

    def test_imported_the_decorator_returns_the_function_with_main(self):
        sys.path.insert(0, CANDIDATES)
        try:
            import kda_tiny
        finally:
            sys.path.remove(CANDIDATES)
        self.assertTrue(callable(kda_tiny.kda))
        out = os.path.join(self.dir, "imported.safetensors")
        self.assertEqual(kda_tiny.kda.main(["kda_tiny.py", self.inp, out]), 0)
        spec = driftgate.read_inputs(self.inp, float32=True)
        direct = kda_tiny.kda(spec.params, spec.inputs)
        got, _ = driftgate.load(out)
        self.assertTrue(np.array_equal(got["o"], direct["o"]))
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(driftgate.run(kda_tiny.kda, ["k", self.inp, out], op="kda_decode"), 95)
        self.assertEqual(err.getvalue(), "kda_exec_spy_f32: op kda is not supported (kda_decode)\n")

    def test_the_numpy_example_keeps_its_module_functions(self):
        sys.path.insert(0, os.path.dirname(EXAMPLE))
        try:
            import kda_numpy
        finally:
            sys.path.remove(os.path.dirname(EXAMPLE))
        out = os.path.join(self.dir, "example.safetensors")
        self.assertEqual(kda_numpy.main(["kda_numpy.py", self.inp, out]), 0)
        spec = driftgate.read_inputs(self.inp, float32=True)
        ref = kda_numpy.kda(spec.params, spec.inputs)
        got, _ = driftgate.load(out)
        self.assertTrue(np.array_equal(got["ht"], ref["ht"]))


if __name__ == "__main__":
    unittest.main()
