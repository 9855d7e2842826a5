"""The tensor formats driftgate stores, as numpy dtypes, and conversion into them with one rounding.

    .safetensors  driftgate  numpy
    F64           f64        numpy.float64
    F32           f32, tf32  numpy.float32
    BF16          bf16       ml_dtypes.bfloat16
    F16           f16        numpy.float16
    F8_E4M3       e4m3       ml_dtypes.float8_e4m3fn   (overflow saturates to +-448, as driftgate's e4m3)
    F8_E5M2       e5m2       ml_dtypes.float8_e5m2
    I64           i64        numpy.int64
    I32           i32        numpy.int32

convert(a, "BF16") rounds once to nearest even, as driftgate's own converter (harness/core/dtype.h
round_to) does: widening is exact; numpy's f64 -> f32 and f64 -> f16 casts round once; an f64 array
bound for bf16 or fp8 is first rounded to f32 *to odd* (the f32 nearest toward zero, its last
significand bit set when inexact), which keeps the f32 -> target rounding from being a second one
(ml_dtypes' own f64 -> bf16 cast goes through an f32 rounded to nearest, two roundings).
"""
import ml_dtypes
import numpy as np

# .safetensors dtype -> numpy dtype, in driftgate's order (harness/core/safetensors.h).
NUMPY = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F16": np.dtype(np.float16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
}
# driftgate's names (case strings, candidate suffixes) -> .safetensors dtype.
DRIFTGATE_NAMES = {"f64": "F64", "f32": "F32", "tf32": "F32", "bf16": "BF16", "f16": "F16",
                   "e4m3": "F8_E4M3", "e5m2": "F8_E5M2", "i64": "I64", "i32": "I32"}
FLOATS = ("F64", "F32", "BF16", "F16", "F8_E4M3", "F8_E5M2")
E4M3_MAX = 448.0


def st_dtype(d):
    """The .safetensors dtype of `d`: "BF16", "bf16", a numpy or ml_dtypes dtype, or a torch dtype."""
    if isinstance(d, str):
        if d in NUMPY:
            return d
        if d.lower() in DRIFTGATE_NAMES:
            return DRIFTGATE_NAMES[d.lower()]
        raise ValueError(f"unknown dtype {d!r} (driftgate stores {', '.join(NUMPY)})")
    if type(d).__module__ == "torch":   # torch.bfloat16 and the like: by name, torch not imported here
        return st_dtype(_TORCH_NAMES.get(str(d), str(d)))
    nd = np.dtype(d)
    for name, dt in NUMPY.items():
        if dt == nd:
            return name
    raise ValueError(f"dtype {nd} is not one driftgate stores ({', '.join(NUMPY)})")


_TORCH_NAMES = {"torch.float64": "F64", "torch.float32": "F32", "torch.bfloat16": "BF16",
                "torch.float16": "F16", "torch.float8_e4m3fn": "F8_E4M3", "torch.float8_e5m2": "F8_E5M2",
                "torch.int64": "I64", "torch.int32": "I32"}


def is_float(a):
    """True for a floating array, numpy's own formats and ml_dtypes' (whose numpy kind is 'V')."""
    return a.dtype.kind == "f" or a.dtype in (NUMPY["BF16"], NUMPY["F8_E4M3"], NUMPY["F8_E5M2"])


def as_numpy(a):
    """`a` as a numpy array: numpy arrays, scalars, lists, and torch tensors (on any device; a bf16
    or fp8 tensor through float32, which holds its values exactly)."""
    if hasattr(a, "detach") and hasattr(a, "cpu"):
        t = a.detach().cpu()
        try:
            return t.numpy()
        except TypeError:
            return t.float().numpy()
    return np.asarray(a)


def round_to_odd_f32(x):
    """float64 array -> float32 rounded to odd: exact values are kept; an inexact one becomes
    whichever of its two f32 neighbours has an odd last significand bit. A later rounding to a
    format of at most 22 significand bits then equals one rounding of x."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)                              # to nearest even; past f32's range Inf
    inexact = np.isfinite(x) & (f.astype(np.float64) != x)
    if not inexact.any():
        return f
    toward_x = np.where(x > f.astype(np.float64), np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
    other = np.nextafter(f, toward_x)                          # the neighbour on x's other side
    # f's last significand bit: f / (the quantum of f's binade) is an integer below 2^24, exact in f64
    # (np.spacing(|f|) is that quantum, also at a power of two and in the subnormal range).
    with np.errstate(invalid="ignore"):
        units = np.abs(f.astype(np.float64)) / np.spacing(np.abs(f)).astype(np.float64)
    f_odd = np.isfinite(f) & (np.fmod(units, 2.0) == 1.0)
    return np.where(inexact & ~f_odd, other, f).astype(np.float32)


def convert(a, dtype, name="tensor"):
    """`a` (any float or integer array, or a torch tensor) in the .safetensors dtype `dtype`, rounded
    once to nearest even (e4m3 saturating at +-448). Raises TypeError naming `name` for an array
    that is neither float nor integer, or a float array bound for an integer dtype."""
    st = st_dtype(dtype)
    target = NUMPY[st]
    a = as_numpy(a)
    if a.dtype == target:
        return a
    if not (is_float(a) or a.dtype.kind in "iub"):
        raise TypeError(f"{name}: cannot write a {a.dtype} array as {st}")
    if st not in FLOATS:
        if is_float(a):
            raise TypeError(f"{name}: a {a.dtype} array cannot be written as {st} (an integer dtype)")
        return a.astype(target)
    if a.dtype in (NUMPY["BF16"], NUMPY["F8_E4M3"], NUMPY["F8_E5M2"]):
        a = a.astype(np.float32)                               # exact
    if st in ("F64", "F32", "F16"):
        with np.errstate(over="ignore"):                       # overflow is Inf, as in driftgate
            return a.astype(target)                            # numpy rounds f64 -> f32, f16 once
    if is_float(a) and a.dtype.itemsize <= 4:
        a32 = a.astype(np.float32)                             # exact from f16 and f32
    else:
        a32 = round_to_odd_f32(a.astype(np.float64))          # f64 and integers
    if st == "F8_E4M3":
        a32 = np.clip(a32, np.float32(-E4M3_MAX), np.float32(E4M3_MAX))   # saturates; NaN stays NaN
    return a32.astype(target)
