"""driftgate.capture on tiny torch modules: the file holds the forward inputs by name, bit for bit,
and `driftgate verify --inputs FILE --case CASE` accepts it. Skipped without torch."""
import os
import tempfile
import unittest

import numpy as np

import driftgate
from common import driftgate as run_driftgate, requires_driftgate

try:
    import torch
except ImportError:
    torch = None

CASE = "kda(T=16,H=1,K=8,V=8,regime=kimi_linear,dtype=bf16,seed=0)"
B, T, H, K, V = 1, 16, 1, 8, 8
needs_torch = unittest.skipIf(torch is None, "skip: PyTorch is not importable (Debian python3-torch; scripts/setup.sh installs it)")

if torch is not None:
    class KdaLayer(torch.nn.Module):
        """Stands in for a model's KDA layer: driftgate's names and layout, the gate's parameters."""

        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(1)
            self.A_log = torch.nn.Parameter(torch.log(torch.rand(H, generator=gen) * 15 + 1))
            dt = torch.full((H * K,), 0.01)
            self.dt_bias = torch.nn.Parameter(torch.log(torch.expm1(dt)))   # softplus^-1(dt)

        def forward(self, q, k, v, g, beta, scale=None, use_cache=False):
            return v * 2

    class HeadsFirstLayer(torch.nn.Module):
        """Other names, [B,H,T,K] layout, f32: rename, transform and dtypes make driftgate's inputs."""

        def forward(self, query, key, value, gate, b, mask):
            return value

    def activations(seed, dtype=torch.bfloat16, heads_first=False):
        gen = torch.Generator().manual_seed(seed)
        shape = (B, H, T, K) if heads_first else (B, T, H, K)
        x = {n: torch.randn(shape, generator=gen).to(dtype) for n in ("q", "k", "v", "g")}
        x["beta"] = torch.randn((B, H, T) if heads_first else (B, T, H), generator=gen).to(dtype)
        return x


def bf16_bits(t):
    return t.detach().float().numpy().astype(driftgate.DTYPES["BF16"]).tobytes()


@needs_torch
class Capture(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "captured.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def capture_kda(self):
        layer = KdaLayer()
        first, second = activations(1), activations(2)
        with driftgate.capture(layer, self.path, case=CASE, call=1,
                               extra={"A_log": layer.A_log, "dt_bias": lambda m: m.dt_bias}) as cap:
            layer(first["q"], first["k"], first["v"], first["g"], first["beta"])
            layer(second["q"], second["k"], second["v"], g=second["g"], beta=second["beta"], use_cache=True)
            layer(first["q"], first["k"], first["v"], first["g"], first["beta"])
        self.assertEqual(cap.calls, 3)
        return layer, second

    def test_the_chosen_calls_inputs_by_name_bit_for_bit(self):
        layer, second = self.capture_kda()
        tensors, meta = driftgate.load(self.path)
        self.assertEqual(sorted(tensors), ["A_log", "beta", "dt_bias", "g", "k", "q", "v"])
        for n in ("q", "k", "v", "g", "beta"):   # positional and keyword arguments alike
            self.assertEqual(str(tensors[n].dtype), "bfloat16", n)
            self.assertEqual(tensors[n].tobytes(), bf16_bits(second[n]), n)
        self.assertEqual(tensors["A_log"].dtype, np.float32)
        self.assertTrue(np.array_equal(tensors["A_log"], layer.A_log.detach().numpy()))
        self.assertEqual(meta["case"], CASE)
        self.assertEqual(meta["producer"], "driftgate.capture")
        self.assertEqual(meta["call"], "1")

    @requires_driftgate
    def test_driftgate_verifies_the_captured_inputs(self):
        self.capture_kda()
        r = run_driftgate("verify", "--inputs", self.path, "--case", CASE, "--candidate", "kda_cpu_chunk_f32")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("PASSED", r.stdout)
        out = os.path.join(self.dir.name, "out.safetensors")   # run reads the case from the metadata
        r = run_driftgate("run", "--candidate", "kda_cpu_chunk_f32", "--in", self.path, "--out", out)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(driftgate.load(out)[1]["case"], CASE)

    @requires_driftgate
    def test_rename_transform_and_dtypes_make_driftgates_layout(self):
        layer = HeadsFirstLayer()
        kda_params = KdaLayer()
        x = activations(3, dtype=torch.float32, heads_first=True)
        names = ("q", "k", "v", "g", "beta")
        with driftgate.capture(layer, self.path, case=CASE,
                               rename={"query": "q", "key": "k", "value": "v", "gate": "g", "b": "beta"},
                               extra={"A_log": kda_params.A_log, "dt_bias": kda_params.dt_bias},
                               # [B,H,T,...] -> [B,T,H,...]; the mask is no input of kda
                               transform=lambda d: {n: t.transpose(1, 2) if n in names else t
                                                    for n, t in d.items() if n != "mask"},
                               dtypes={n: "bf16" for n in names}):
            layer(x["q"], x["k"], x["v"], x["g"], x["beta"], mask=torch.ones(T, dtype=torch.bool))
        tensors, _ = driftgate.load(self.path)
        self.assertEqual(tensors["q"].shape, (B, T, H, K))
        want = x["q"].transpose(1, 2).contiguous().numpy().astype(driftgate.DTYPES["BF16"])   # one rounding
        self.assertEqual(tensors["q"].tobytes(), want.tobytes())
        r = run_driftgate("verify", "--inputs", self.path, "--case", CASE, "--candidate", "kda_cpu_chunk_f32")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_the_keyword_hook_of_torch_2(self):
        # torch >= 2.0 passes keyword arguments to a pre-hook registered with_kwargs=True; the
        # Debian torch here is older, so a stand-in module calls its hooks as torch 2 does.
        class Torch2Module:
            def __init__(self):
                self.hooks = {}

            def register_forward_pre_hook(self, hook, *, with_kwargs=False):
                self.hooks[id(hook)] = (hook, with_kwargs)
                module = self

                class Handle:
                    def remove(self):
                        module.hooks.pop(id(hook))
                return Handle()

            def forward(self, q, *, beta):
                return q

            def __call__(self, *args, **kwargs):
                for hook, with_kwargs in list(self.hooks.values()):
                    if with_kwargs:
                        hook(self, args, kwargs)
                    else:
                        hook(self, args)
                return self.forward(*args, **kwargs)

        m = Torch2Module()
        x = activations(4)
        with driftgate.capture(m, self.path):
            m(x["q"], beta=x["beta"])
        self.assertEqual(m.hooks, {})
        tensors, _ = driftgate.load(self.path)
        self.assertEqual(sorted(tensors), ["beta", "q"])
        self.assertEqual(tensors["beta"].tobytes(), bf16_bits(x["beta"]))

    def test_no_call_no_file_and_the_hook_is_gone(self):
        layer = KdaLayer()
        with self.assertRaisesRegex(RuntimeError, "called 0 time\\(s\\), never a call 0; nothing was written"):
            with driftgate.capture(layer, self.path):
                pass
        self.assertFalse(os.path.exists(self.path))
        self.assertNotIn("forward", vars(layer))          # no wrapper left behind (torch < 2.0)
        self.assertEqual(len(layer._forward_pre_hooks), 0)   # no hook left behind (torch >= 2.0)
        x = activations(1)
        layer(x["q"], x["k"], x["v"], x["g"], x["beta"])
        self.assertFalse(os.path.exists(self.path))

    def test_a_dtype_driftgate_does_not_store_is_named(self):
        layer = HeadsFirstLayer()
        x = activations(3, dtype=torch.float32)
        with self.assertRaisesRegex(ValueError, "tensor 'mask': .*drop it with transform="):
            with driftgate.capture(layer, self.path):
                layer(x["q"], x["k"], x["v"], x["g"], x["beta"], torch.ones(T, dtype=torch.bool))


if __name__ == "__main__":
    unittest.main()
