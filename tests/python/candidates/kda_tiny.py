"""python/README.md's example, run by tests/python/test_exec.py: KDA one token at a time, numpy f32."""
import numpy as np
import driftgate


@driftgate.candidate(op="kda", float32=True)
def kda(p, x):                              # the case's params; its inputs, name -> numpy array
    if (p["gate"], p["beta"], p["l2norm"], p["h0"], p["HV"], p["seqlens"]) != ("softplus", "sigmoid", True, False, 0, []):
        raise driftgate.NotSupported("only the kimi_linear gate, l2norm, no h0, no GVA, no varlen")
    B, T, H, K, V = (p[n] for n in "BTHKV")
    unit = lambda a: a / np.sqrt((a * a).sum(-1, keepdims=True) + 1e-6)
    q, k, v = unit(x["q"]) * (p["scale"] or K ** -0.5), unit(x["k"]), x["v"]
    g = np.exp(-np.exp(x["A_log"])[:, None] * np.logaddexp(0, x["g"] + x["dt_bias"].reshape(H, K)))
    beta = 1 / (1 + np.exp(-x["beta"]))
    S, o = np.zeros((B, H, K, V), np.float32), np.zeros((B, T, H, V), np.float32)
    for t in range(T):                      # S *= exp(g); S += k (v - S^T k) beta; o = S^T q
        S = S * g[:, t, :, :, None]
        r = (v[:, t] - np.einsum("bhk,bhkv->bhv", k[:, t], S)) * beta[:, t, :, None]
        S = S + k[:, t, :, :, None] * r[:, :, None, :]
        o[:, t] = np.einsum("bhk,bhkv->bhv", q[:, t], S)
    return {"o": o, "ht": S}
