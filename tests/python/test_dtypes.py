"""driftgate.convert: one rounding to nearest even into every stored format (python/driftgate/dtypes.py)."""
import unittest
from fractions import Fraction

import ml_dtypes
import numpy as np

import driftgate
from driftgate.dtypes import round_to_odd_f32, st_dtype

NARROW = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
          "F8_E5M2": ml_dtypes.float8_e5m2}


def nearest_even(x, target):
    """The value of `target` nearest the float `x` (ties to the even significand), found by exact
    comparison of the two neighbours around x: the reference convert() must agree with."""
    top = np.array([ml_dtypes.finfo(target).max], target)   # toward +-max: e4m3fn has no inf
    lo = np.array([x], np.float64).astype(np.float32).astype(target)
    if float(lo[0]) > x:
        lo = np.nextafter(lo, -top)
    hi = np.nextafter(lo, top)
    dl, dh = Fraction(x) - Fraction(float(lo[0])), Fraction(float(hi[0])) - Fraction(x)
    if dl != dh:
        return float(lo[0]) if dl < dh else float(hi[0])
    even = lo if int(lo.view(np.uint8 if lo.itemsize == 1 else np.uint16)[0]) % 2 == 0 else hi
    return float(even[0])


class Convert(unittest.TestCase):
    def test_f64_near_a_tie_rounds_once(self):
        # 1 + half an ulp + a little: one rounding goes up; through a rounded f32 it would tie to 1.
        for st, half in (("BF16", 2.0 ** -8), ("F16", 2.0 ** -11), ("F8_E4M3", 2.0 ** -4), ("F8_E5M2", 2.0 ** -3)):
            x = np.array([1 + half + 2.0 ** -40, 1 + half, -(1 + half + 2.0 ** -40)], np.float64)
            got = driftgate.convert(x, st).astype(np.float64)
            self.assertEqual(list(got), [1 + 2 * half, 1.0, -(1 + 2 * half)], st)

    def test_random_values_and_near_ties_match_the_exact_reference(self):
        rng = np.random.default_rng(7)
        for st, target in NARROW.items():
            top = float(ml_dtypes.finfo(target).max)
            x = rng.standard_normal(3000) * np.exp(rng.uniform(-40, np.log(top) - 2, 3000))
            # values a hair from midpoints between neighbours of the format
            a = rng.standard_normal(2000).astype(target)
            up = np.nextafter(a, np.array(ml_dtypes.finfo(target).max, target))
            mids = (a.astype(np.float64) + up.astype(np.float64)) / 2
            x = np.concatenate([x, mids, mids * (1 + 2.0 ** -45), mids * (1 - 2.0 ** -45)])
            x = x[np.abs(x) < float(ml_dtypes.finfo(target).max) / 2]   # neighbours inside the format
            got = driftgate.convert(x, st).astype(np.float64)
            want = np.array([nearest_even(v, target) for v in x])
            bad = np.flatnonzero(got != want)
            self.assertEqual(len(bad), 0, f"{st}: {x[bad[:3]]} -> {got[bad[:3]]}, want {want[bad[:3]]}")

    def test_widening_is_exact_and_f32_from_f64_rounds_once(self):
        b = np.array([1.5, -0.0078125, 3e38], np.float32).astype(ml_dtypes.bfloat16)
        self.assertTrue(np.array_equal(driftgate.convert(b, "F32"), b.astype(np.float32)))
        self.assertTrue(np.array_equal(driftgate.convert(b, "F64"), b.astype(np.float64)))
        x = np.array([1 + 2.0 ** -24 + 2.0 ** -40])
        self.assertEqual(float(driftgate.convert(x, "F32")[0]), 1 + 2.0 ** -23)

    def test_overflow_nan_and_saturation(self):
        x = np.array([1000.0, -np.inf, np.nan, 448.0, 465.0])
        e4 = driftgate.convert(x, "F8_E4M3").astype(np.float64)   # saturates, as driftgate's e4m3
        self.assertEqual(list(e4[[0, 1, 3, 4]]), [448.0, -448.0, 448.0, 448.0])
        self.assertTrue(np.isnan(e4[2]))
        e5 = driftgate.convert(np.array([1e6, 61440.0, 57344.0]), "F8_E5M2").astype(np.float64)
        self.assertEqual(list(e5), [np.inf, np.inf, 57344.0])
        bf = driftgate.convert(np.array([1e300, np.nan, 1e-300, -1e-300]), "BF16").astype(np.float64)
        self.assertEqual(bf[0], np.inf)
        self.assertTrue(np.isnan(bf[1]))
        self.assertEqual(list(bf[2:]), [0.0, 0.0])
        self.assertTrue(np.signbit(bf[3]))

    def test_round_to_odd(self):
        x = np.array([1 + 2.0 ** -30, 1 + 2.0 ** -23, 1 - 2.0 ** -40, 1e39, 0.0, 2.0 ** -160])
        got = round_to_odd_f32(x).astype(np.float64)
        self.assertEqual(list(got), [1 + 2.0 ** -23, 1 + 2.0 ** -23, 1 - 2.0 ** -24, float(np.finfo(np.float32).max),
                                     0.0, 2.0 ** -149])

    def test_names_and_refusals(self):
        self.assertEqual(st_dtype("bf16"), "BF16")
        self.assertEqual(st_dtype("e4m3"), "F8_E4M3")
        self.assertEqual(st_dtype(np.float16), "F16")
        self.assertEqual(st_dtype(ml_dtypes.float8_e5m2), "F8_E5M2")
        with self.assertRaisesRegex(ValueError, "unknown dtype 'F4'"):
            st_dtype("F4")
        with self.assertRaisesRegex(TypeError, "o: a float32 array cannot be written as I64"):
            driftgate.convert(np.zeros(2, np.float32), "I64", name="o")
        with self.assertRaisesRegex(TypeError, "cannot write a <U1 array as F32"):
            driftgate.convert(np.array(["a"]), "F32")


if __name__ == "__main__":
    unittest.main()
