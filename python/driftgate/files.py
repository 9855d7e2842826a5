"""Reading and writing .safetensors files with the formats driftgate stores (driftgate/dtypes.py).

load(path) -> (tensors, metadata): every tensor as a numpy array in its stored dtype (bf16 and fp8
as ml_dtypes arrays), writable, C-contiguous; metadata is __metadata__ (str -> str). With
float32=True every float tensor comes back as numpy.float32 (bf16, f16 and fp8 exactly; f64 rounded
to nearest). A dtype driftgate does not store (U8, BOOL, ...) raises ValueError naming the tensor.

save(path, tensors, metadata) writes every array in its own dtype (driftgate/dtypes.py lists them),
atomically: to a temporary file beside `path`, then renamed. To write in another dtype, convert
first (dtypes.convert).

The file layout is safetensors' own, through the safetensors package: safetensors.deserialize for
reading (its numpy loader knows no bf16 or fp8) and safetensors.numpy.save_file for writing.
"""
import os
import tempfile

import numpy as np
import safetensors
import safetensors.numpy

from driftgate.dtypes import NUMPY, is_float, st_dtype


def load(path, float32=False):
    with open(path, "rb") as f:
        data = f.read()
    tensors = {}
    for name, t in safetensors.deserialize(data):
        if t["dtype"] not in NUMPY:
            raise ValueError(f"{path}: tensor '{name}' has dtype {t['dtype']}, which driftgate does not store "
                             f"({', '.join(NUMPY)})")
        a = np.frombuffer(t["data"], dtype=NUMPY[t["dtype"]]).reshape(t["shape"])
        if float32 and is_float(a):
            a = a.astype(np.float32)
        elif not a.flags.writeable:
            a = a.copy()
        tensors[name] = a
    with safetensors.safe_open(path, framework="numpy") as f:
        metadata = dict(f.metadata() or {})
    return tensors, metadata


def save(path, tensors, metadata=None):
    arrays = {}
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        try:
            st_dtype(a.dtype)
        except ValueError as e:
            raise ValueError(f"tensor '{name}': {e}") from None
        arrays[name] = a
    meta = {str(k): str(v) for k, v in (metadata or {}).items()} or None
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".driftgate-", suffix=".safetensors", dir=directory)
    os.close(fd)
    try:
        safetensors.numpy.save_file(arrays, tmp, metadata=meta)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
