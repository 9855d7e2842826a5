#!/usr/bin/env python3
"""kda_exec_numpy_f32: an example driftgate exec candidate, KDA in numpy (f32).

    driftgate verify --exec "kda_exec_numpy_f32=python3 candidates/examples/exec/kda_numpy.py {in} {out}" \
        --candidate kda_exec_numpy_f32 --case 'kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)'

driftgate writes the case's inputs to {in} (.safetensors; the case and its parameters in
__metadata__) and reads the outputs from {out}; harness/exec_candidate.h documents the contract.
This program needs numpy only: the .safetensors header is parsed with json and struct, bf16 is
widened through uint16 -> uint32 << 16.

The recurrence, per (sequence b, value head hv), h = hv // (HV // H), in f32, all sequences and
heads at once (one numpy step per token, vectorized over B, HV, K and V):

    S = h0[b, hv] (K x V) or 0
    for each token t:
      q, k <- x / sqrt(sum x^2 + 1e-6) when l2norm=1;  q <- q * scale (0: K^-1/2)
      g    <- g[t] (gate=pregated)  or  -exp(A_log) * softplus(g[t] + dt_bias) (gate=softplus)
      beta <- beta[t] (beta=given)  or  sigmoid(beta[t]) (beta=sigmoid)
      S *= exp(g)[:, None];  r = (v - S^T k) * beta;  S += k r^T;  o[t] = S^T q
    ht[b, hv] = S

Supported: gate pregated|softplus, beta given|sigmoid, l2norm on or off, h0 given or not, GVA, the
K-first state layout. Anything else (gate=lower_bound, beta=sigmoid2, layout=vfirst, varlen) is
answered "not supported": a message naming the parameter on stderr and exit code 95, driftgate's
documented code for it (the row is NOT_SUPPORTED, and the gate's policy skips such a case).
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
          "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4")}


NOT_SUPPORTED = 95   # driftgate's exit code for "this program does not implement the case"


class Unsupported(Exception):
    pass


def read_safetensors(path):
    """Returns ({name: array}, metadata); floats are widened to f32 (bf16 exactly)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        dtype = t["dtype"]
        if dtype not in DTYPES:
            raise Unsupported(f"input tensor '{name}' has dtype {dtype}, which this program does not read")
        a = np.frombuffer(data, dtype=DTYPES[dtype], count=(end - begin) // DTYPES[dtype].itemsize,
                          offset=base + begin)
        if dtype == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        elif dtype in ("F64", "F32", "F16"):
            a = a.astype(np.float32)
        tensors[name] = a.reshape(t["shape"])
    return tensors, meta


def encode(a, dtype):
    """The bytes of f32 array `a` in a .safetensors dtype (one round to nearest even)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F64":
        return a.astype("<f8").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    if dtype == "BF16":
        bits = a.view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(a)
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
        return rounded.astype("<u2").tobytes()
    raise Unsupported(f"output dtype {dtype} is not written by this program")


def write_safetensors(path, arrays, dtypes):
    header, blobs, offset = {}, [], 0
    for name in sorted(arrays):
        blob = encode(arrays[name], dtypes[name])
        header[name] = {"dtype": dtypes[name], "shape": list(arrays[name].shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def kda(p, x):
    if p["gate"] not in ("pregated", "softplus"):
        raise Unsupported(f"gate={p['gate']} is not supported (pregated, softplus)")
    if p["beta"] not in ("given", "sigmoid"):
        raise Unsupported(f"beta={p['beta']} is not supported (given, sigmoid)")
    if p["layout"] != "kfirst":
        raise Unsupported(f"layout={p['layout']} is not supported (kfirst)")
    if p.get("seqlens"):
        raise Unsupported("varlen (seqlens) is not supported")
    B, T, H, K, V = p["B"], p["T"], p["H"], p["K"], p["V"]
    HV = p["HV"] or H
    f32 = np.float32
    scale = f32(p["scale"] or 1.0 / np.sqrt(K))
    group = HV // H
    # q, k per value head (GVA): [B, T, HV, K]
    q = np.repeat(x["q"], group, axis=2) if group > 1 else x["q"]
    k = np.repeat(x["k"], group, axis=2) if group > 1 else x["k"]
    v, g, beta = x["v"], x["g"], x["beta"]
    if p["l2norm"]:
        q = q * (f32(1) / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + f32(1e-6)))
        k = k * (f32(1) / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + f32(1e-6)))
    q = (q * scale).astype(f32)
    k = k.astype(f32)
    if p["gate"] == "softplus":
        a = np.exp(x["A_log"]).reshape(1, 1, HV, 1)
        bias = x["dt_bias"].reshape(1, 1, HV, K) if "dt_bias" in x else f32(0)
        z = g + bias
        g = -a * np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, f32(20)))))
    if p["beta"] == "sigmoid":
        beta = f32(1) / (f32(1) + np.exp(-beta))
    decay = np.exp(g).astype(f32)                                  # [B, T, HV, K]
    S = x["h0"].copy() if p["h0"] else np.zeros((B, HV, K, V), f32)
    o = np.empty((B, T, HV, V), f32)
    for t in range(T):
        S *= decay[:, t, :, :, None]
        kt = k[:, t]                                               # [B, HV, K]
        r = (v[:, t] - np.matmul(kt[:, :, None, :], S)[:, :, 0, :]) * beta[:, t, :, None]
        S += kt[..., None] * r[:, :, None, :]
        o[:, t] = np.matmul(q[:, t, :, None, :], S)[:, :, 0, :]
    return {"o": o, "ht": S}


def main(argv):
    if len(argv) != 3:
        print("usage: kda_numpy.py IN.safetensors OUT.safetensors", file=sys.stderr)
        return 2
    try:
        x, meta = read_safetensors(argv[1])
        if meta.get("op") != "kda":
            raise Unsupported(f"op {meta.get('op')} is not supported (kda)")
        result = kda(json.loads(meta["params"]), x)
        names = meta["outputs"].split(",")
        dtypes, arrays = {}, {}
        for name in names:
            shape = json.loads(meta[f"out.{name}.shape"])
            if list(result[name].shape) != shape:
                raise Unsupported(f"output {name} would have shape {list(result[name].shape)}, asked for {shape}")
            dtypes[name] = meta[f"out.{name}.dtype"]
            arrays[name] = result[name]
        write_safetensors(argv[2], arrays, dtypes)
    except Unsupported as e:
        print(f"kda_exec_numpy_f32: {e}", file=sys.stderr)
        return NOT_SUPPORTED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
