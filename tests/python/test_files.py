"""Every stored dtype through driftgate.save / load and write_outputs / read_inputs, with metadata;
files driftgate writes read here, and files written here read by driftgate."""
import json
import os
import tempfile
import unittest

import ml_dtypes
import numpy as np

import driftgate
from common import DRIFTGATE, driftgate as run_driftgate, requires_driftgate

# Values every float format holds exactly (e5m2 has 3 significand bits).
EXACT = np.array([[0.0, -0.5, 1.0, 1.5], [-2.0, 3.0, 0.25, -0.0]])
STORED = {"F64": np.float64, "F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16,
          "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}


def exec_input_file(path, outputs):
    """An exec {in} file as driftgate writes one: a tensor, params, and `outputs` (name -> (dtype, shape))."""
    meta = {"case": "kda(T=2,H=1,K=2,V=2)", "op": "kda", "candidate": "kda_exec_test_f32",
            "params": json.dumps({"T": 2, "gate": "pregated", "seqlens": []}),
            "outputs": ",".join(outputs)}
    for name, (dtype, shape) in outputs.items():
        meta[f"out.{name}.dtype"] = dtype
        meta[f"out.{name}.shape"] = json.dumps(list(shape)).replace(" ", "")
    driftgate.save(path, {"q": EXACT.astype(ml_dtypes.bfloat16)}, meta)


class RoundTrip(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def test_save_load_every_dtype_with_metadata(self):
        tensors = {f"x_{st}": EXACT.astype(dt) for st, dt in STORED.items()}
        tensors["i64"] = np.array([0, 5, -7, 2 ** 40], np.int64)
        tensors["i32"] = np.array([[1, -2, 3]], np.int32)
        meta = {"case": "kda(T=4)", "note": "ünïcode"}
        driftgate.save(self.path, tensors, meta)
        got, got_meta = driftgate.load(self.path)
        self.assertEqual(got_meta, meta)
        self.assertEqual(sorted(got), sorted(tensors))
        for name, a in tensors.items():
            self.assertEqual(got[name].dtype, a.dtype, name)
            self.assertEqual(got[name].shape, a.shape, name)
            self.assertEqual(got[name].tobytes(), a.tobytes(), name)   # bit for bit, -0.0 included
            self.assertTrue(got[name].flags.writeable, name)
        f32, _ = driftgate.load(self.path, float32=True)
        for st in STORED:
            self.assertEqual(f32[f"x_{st}"].dtype, np.float32, st)
            self.assertTrue(np.array_equal(f32[f"x_{st}"], EXACT.astype(np.float32)), st)
        self.assertEqual(f32["i64"].dtype, np.int64)

    def test_write_outputs_read_inputs_every_dtype(self):
        outputs = {f"o_{st}": (st, EXACT.shape) for st in STORED}
        inp = os.path.join(self.dir.name, "in.safetensors")
        exec_input_file(inp, outputs)
        spec = driftgate.read_inputs(inp)
        self.assertEqual(spec.case, "kda(T=2,H=1,K=2,V=2)")
        self.assertEqual((spec.op, spec.candidate), ("kda", "kda_exec_test_f32"))
        self.assertEqual(spec.params, {"T": 2, "gate": "pregated", "seqlens": []})
        self.assertEqual(spec.outputs, list(outputs))
        self.assertEqual(spec.output_dtypes["o_BF16"], "BF16")
        self.assertEqual(spec.output_shapes["o_F8_E4M3"], (2, 4))
        self.assertEqual(spec.inputs["q"].dtype, ml_dtypes.bfloat16)
        self.assertEqual(driftgate.read_inputs(inp, float32=True).inputs["q"].dtype, np.float32)
        # float64 results, converted as asked
        driftgate.write_outputs(self.path, {n: EXACT for n in outputs}, spec)
        got, meta = driftgate.load(self.path)
        self.assertEqual(meta, {"case": spec.case, "candidate": spec.candidate})
        for name, (st, shape) in outputs.items():
            self.assertEqual(got[name].dtype, np.dtype(STORED[st]), name)
            self.assertEqual(got[name].tobytes(), EXACT.astype(STORED[st]).tobytes(), name)

    def test_output_errors_name_the_tensor(self):
        inp = os.path.join(self.dir.name, "in.safetensors")
        exec_input_file(inp, {"ht": ("F32", (2, 4)), "o": ("BF16", (2, 4))})
        spec = driftgate.read_inputs(inp)
        cases = [({"o": EXACT}, "output tensor 'ht' is missing \\(the case asks for ht, o; returned o\\)"),
                 ({"o": EXACT, "ht": EXACT.T}, "output tensor 'ht' has shape \\[4, 2\\], the case asks for \\[2, 4\\]"),
                 ({"o": EXACT, "ht": EXACT, "extra": EXACT}, "output tensor 'extra' is not one the case asks for"),
                 ({"o": EXACT.astype(np.int64), "ht": np.array([["a"] * 4] * 2)}, "output tensor 'ht': cannot write")]
        for arrays, message in cases:
            with self.assertRaisesRegex(driftgate.OutputError, message):
                driftgate.write_outputs(self.path, arrays, spec)
        self.assertFalse(os.path.exists(self.path))

    def test_a_dtype_driftgate_does_not_store_is_refused_by_name(self):
        with self.assertRaisesRegex(ValueError, "tensor 'mask': dtype bool"):
            driftgate.save(self.path, {"mask": np.zeros(3, bool)})


@requires_driftgate
class WithDriftgate(unittest.TestCase):
    """`driftgate export` files read here, written back, and read by `driftgate verify --inputs`."""

    def test_exported_inputs_round_trip_through_the_package(self):
        with tempfile.TemporaryDirectory() as d:
            for dtype in ("f64", "f32", "bf16", "f16"):
                case = f"kda(T=16,H=1,K=8,V=8,regime=kimi_linear,dtype={dtype},seed=0)"
                exported, copy = os.path.join(d, f"e_{dtype}.safetensors"), os.path.join(d, f"c_{dtype}.safetensors")
                r = run_driftgate("export", "--case", case, "--out", exported)
                self.assertEqual(r.returncode, 0, r.stderr)
                tensors, meta = driftgate.load(exported)
                self.assertEqual(meta["case"], case)
                self.assertEqual(tensors["q"].dtype, np.dtype(STORED[driftgate.dtypes.st_dtype(dtype)]), dtype)
                self.assertEqual(tensors["o"].dtype, np.float64)   # the reference
                driftgate.save(copy, tensors, meta)
                for path in (exported, copy):
                    r = run_driftgate("verify", "--inputs", path, "--case", case, "--candidate", "kda_cpu_chunk_f32")
                    self.assertEqual(r.returncode, 0, f"{DRIFTGATE} {dtype} {path}\n{r.stdout}{r.stderr}")
                    self.assertIn("PASSED", r.stdout)


if __name__ == "__main__":
    unittest.main()
