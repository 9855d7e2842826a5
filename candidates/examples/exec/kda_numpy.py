#!/usr/bin/env python3
"""kda_exec_numpy_f32: an example driftgate exec candidate, KDA in numpy (f32).

    driftgate verify --exec "kda_exec_numpy_f32=.venv/bin/python3 candidates/examples/exec/kda_numpy.py {in} {out}" \
        --candidate kda_exec_numpy_f32 --case 'kda(T=64,H=1,K=16,V=16,regime=kimi_linear,dtype=bf16,seed=0)'

driftgate writes the case's inputs to {in} and reads the outputs from {out}
(harness/isolation/exec_candidate.h documents the contract); the driftgate Python package (python/, installed
into .venv by scripts/setup.sh) reads and writes both: the inputs arrive widened to f32 (bf16
exactly), the outputs are converted to the dtypes {in} asks for with one rounding.

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
K-first state layout. Anything else (gate=lower_bound, beta=sigmoid2, layout=vfirst, varlen) raises
driftgate.NotSupported: a message naming the parameter on stderr and exit code 95, driftgate's
documented code for it (the row is NOT_SUPPORTED, and the gate's policy skips such a case).

Other programs import this module for kda(params, inputs) (the math alone) and main(argv) (the
whole program, returning its exit code).
"""
import sys

import numpy as np

try:
    import driftgate
except ImportError:
    sys.exit("kda_numpy.py needs the driftgate Python package: run scripts/setup.sh and use .venv/bin/python3")

NotSupported = driftgate.NotSupported


@driftgate.candidate(op="kda", float32=True)
def kda(p, x):
    if p["gate"] not in ("pregated", "softplus"):
        raise NotSupported(f"gate={p['gate']} is not supported (pregated, softplus)")
    if p["beta"] not in ("given", "sigmoid"):
        raise NotSupported(f"beta={p['beta']} is not supported (given, sigmoid)")
    if p["layout"] != "kfirst":
        raise NotSupported(f"layout={p['layout']} is not supported (kfirst)")
    if p.get("seqlens"):
        raise NotSupported("varlen (seqlens) is not supported")
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
    return driftgate.run(kda, argv)
