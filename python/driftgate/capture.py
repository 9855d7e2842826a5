"""driftgate.capture: a PyTorch module's real forward inputs, saved as driftgate's stored inputs.

    with driftgate.capture(layer.attn, "kda_inputs.safetensors",
                           case="kda(T=4096,H=32,K=128,V=128,regime=kimi_linear,dtype=bf16,seed=0)",
                           extra={"A_log": layer.attn.A_log, "dt_bias": layer.attn.dt_bias}):
        model(tokens)
    # driftgate verify --inputs kda_inputs.safetensors --case 'kda(T=4096,...)' --candidate ...

What the file must hold (harness/cli/main.cpp stored_inputs, OpSpec::check_inputs): exactly the case's
input tensors, each under the op's name for it, in the dtype and shape the case stores it in. For
kda: q, k [B,T,H,K], v [B,T,HV,V], g [B,T,HV,K], beta [B,T,HV] in the case's dtype; with a softplus
gate A_log [HV] and dt_bias [HV*K] in F32; h0 [B,HV,K,V] F32 with an initial state; cu_seqlens I64
for varlen. `driftgate export --case CASE --out F` writes a file of that form to compare with.
Tensors named as the op's outputs (o, ht) and "ref.*" / "out.*" are ignored; any other name, dtype
or shape is refused by verify, exit 2, naming it. __metadata__ "case" (the `case` argument) is what
`driftgate run --in FILE` uses when no --case is given; verify always needs --case.

How the tensors are named and stored:
  - every tensor argument of the call under its parameter name in module.forward's signature
    (positional ones too; *args as NAME0, NAME1, ...; **kwargs under their keys); other arguments
    (None, ints, flags) are left out
  - rename={"query": "q"} renames them; extra={"A_log": tensor or fn(module) -> tensor} adds tensors
    that are not arguments (a module's parameters, a state); transform=fn(dict) -> dict reshapes or
    reorders the lot last (a [B,H,T,K] layout to driftgate's [B,T,H,K], a dropped mask)
  - each is stored in its own dtype (torch.bfloat16 as BF16, ...); dtypes={"q": "bf16"} converts,
    rounding once (driftgate/dtypes.py)
  - the call-th call (from 0) is saved, as soon as it happens; the other calls pass untouched.

The hook is a forward pre-hook with keyword arguments (torch >= 2.0). Older torch's pre-hooks do not
see keyword arguments, so there the module's forward is wrapped instead (an instance attribute,
removed by remove()). torch is imported when a capture is made, not with the driftgate package.
"""
import inspect

from driftgate import files
from driftgate.dtypes import as_numpy, convert, st_dtype


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("driftgate.capture needs PyTorch (Debian: python3-torch; scripts/setup.sh installs it)") from e
    return torch


class capture:
    """Saves the `call`-th forward inputs of `module` to `path` (see the module's doc). A context
    manager: on leaving it the hook is removed, and a block that ended without that call raises
    RuntimeError. Without `with`, call remove() when done. After the save, .saved holds the arrays
    written (name -> numpy array) and .calls counts the calls seen."""

    def __init__(self, module, path, *, case=None, rename=None, extra=None, transform=None, dtypes=None, call=0):
        self._torch = _torch()
        self.module = module
        self.path = str(path)
        self.case = case
        self.rename = dict(rename or {})
        self.extra = dict(extra or {})
        self.transform = transform
        self.dtypes = dict(dtypes or {})
        self.call = call
        self.calls = 0
        self.saved = None
        self._signature = inspect.signature(module.forward)
        self._handle = None
        self._wrapped = False
        try:
            self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)
        except TypeError:   # torch < 2.0: pre-hooks see positional arguments only
            original = module.forward

            def forward(*args, **kwargs):
                self._record(args, kwargs)
                return original(*args, **kwargs)

            module.forward = forward
            self._wrapped = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.remove()
        if exc_type is None and self.saved is None:
            raise RuntimeError(f"driftgate.capture: {type(self.module).__name__} was called {self.calls} time(s), "
                               f"never a call {self.call}; nothing was written to {self.path}")
        return False

    def remove(self):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._wrapped:
            del self.module.forward   # the class's forward again
            self._wrapped = False

    def _hook(self, module, args, kwargs):
        self._record(args, kwargs)

    def _record(self, args, kwargs):
        index = self.calls
        self.calls += 1
        if index != self.call:
            return
        torch = self._torch
        bound = self._signature.bind(*args, **kwargs)
        tensors = {}
        for pname, value in bound.arguments.items():
            kind = self._signature.parameters[pname].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                items = [(f"{pname}{i}", v) for i, v in enumerate(value)]
            elif kind == inspect.Parameter.VAR_KEYWORD:
                items = list(value.items())
            else:
                items = [(pname, value)]
            for name, v in items:
                if torch.is_tensor(v):
                    tensors[self.rename.get(name, name)] = v
        for name, v in self.extra.items():
            tensors[name] = v if torch.is_tensor(v) or not callable(v) else v(self.module)
        if self.transform is not None:
            tensors = dict(self.transform(tensors))
        arrays = {}
        for name, v in tensors.items():
            try:
                target = self.dtypes.get(name) or st_dtype(v.dtype)
                arrays[name] = convert(as_numpy(v), target, name=name)
            except (TypeError, ValueError) as e:
                raise ValueError(f"driftgate.capture: tensor '{name}': {e} (convert it with dtypes=, "
                                 f"or drop it with transform=)") from None
        metadata = {"producer": "driftgate.capture", "module": type(self.module).__qualname__,
                    "call": str(self.call)}
        if self.case:
            metadata["case"] = self.case
        files.save(self.path, arrays, metadata)
        self.saved = arrays
