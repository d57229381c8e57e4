"""``from_torch``: a torch module tree rebuilt as gtape modules on a tape, holding torch's
weights, names 1:1.

Every torch layer of ``LAYERS`` becomes its gtape layer (same names, shapes, weights and
train/eval mode); ``Sequential``, ``ModuleList`` and ``ModuleDict`` become gtape's containers;
a module of any other class that is not torch's own -- the user's ``GPT``, ``Block``,
``CausalSelfAttention`` -- becomes a ``PortedModule``: its children, parameters
(``nn.Parameter`` attributes), buffers (``register_buffer``) and plain attributes (ints,
configs) mirrored, and its class's own methods, ``forward`` included, run on Vars: the torch
functions they call are translated by ``gtape.torch_functions`` (``Var.__torch_function__``).

* A parameter shared by several modules (a tied embedding and head) is ONE param of the tape:
  tied weights stay tied; ``named_parameters`` lists it once, ``state_dict`` under each name
  (torch's rules).
* Each ``Dropout`` and ``MultiheadAttention`` gets its own key from the tape's stream, in tree
  order, and each ported module one for the random functions its forward calls
  (``F.dropout``, SDPA's ``dropout_p``, ``torch.multinomial``): never a shared default.
* Refused before anything is registered: a torch layer gtape has no equivalent of (or one
  with options it does not support), named by its path in the tree.

>>> import numpy as np, torch, gtape as g
>>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
>>> tp = g.Tape()
>>> model = g.nn.from_torch(net.double(), tp)
>>> x = np.ones((2, 3))
>>> bool(np.allclose(model(tp.const(x)).numpy(), net(torch.from_numpy(x)).detach().numpy(),
...                  rtol=1e-14, atol=0))
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gtensor import describe

from . import activation_layers, const_roles, containers, layers, modules, norm_layers
from .modules import Module
from .rng import Key, OwnedKey
from .tape import Tape
from .torch_functions import module_stack
from .var import Var

LAYERS = ("Sequential", "ModuleList", "ModuleDict", "Linear", "ReLU", "Tanh", "Sigmoid", "GELU",
          "SiLU", "Softplus", "Flatten", "Identity", "Conv2d", "MaxPool2d", "AvgPool2d",
          "Dropout", "LayerNorm", "RMSNorm", "Embedding", "MultiheadAttention", "BatchNorm1d",
          "BatchNorm2d", "GroupNorm", "ConvTranspose2d", "AdaptiveAvgPool2d", "Upsample")
SUPPORTED = LAYERS  # (the name older code reads)
_PLAIN = {"ReLU": modules.ReLU, "Tanh": modules.Tanh, "Sigmoid": modules.Sigmoid,
          "Identity": modules.Identity, "SiLU": activation_layers.SiLU}
_TORCH_STATE = {"training", "_parameters", "_buffers", "_non_persistent_buffers_set",
                "_modules", "_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook",
                "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_state_dict_hooks",
                "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
                "_load_state_dict_post_hooks", "_compiled_call_impl"}


def from_torch(module: Any, tp: Tape) -> Module:
    """The gtape equivalent of ``module`` with its parameters registered on ``tp`` (copied in
    under the tape's conversion rule); refuses an unsupported layer before registering any."""
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch: module is {describe(module)}; expected a torch.nn.Module")
    if not isinstance(tp, Tape):
        raise TypeError(f"from_torch: tp is {describe(tp)}; expected a gtape.Tape")
    _check(torch, module, "")
    return _Builder(torch, tp).build(module, "")


# ---------------------------------------------------------------- what is supported
def _kind(torch: Any, m: Any) -> str | None:
    """The LAYERS name of torch layer ``m`` (None: not one of them)."""
    if type(m) is torch.nn.modules.linear.NonDynamicallyQuantizableLinear:
        return "Linear"  # MultiheadAttention's out_proj: a Linear
    for name in LAYERS:
        if type(m) is getattr(torch.nn, name):
            return name
    return None


def _torch_name(module_name: str) -> bool:
    """Whether a module name is torch's own (``torch`` or ``torch.*``)."""
    return module_name == "torch" or module_name.startswith("torch.")


def _is_users(torch: Any, m: Any) -> bool:
    """Whether ``m`` is of a class written outside torch (a model the user defined)."""
    return not _torch_name(type(m).__module__)


def _limits(m: Any, kind: str) -> list[str]:
    """What of layer ``m`` (of ``kind``) gtape's layer cannot do, as 'attr=value' strings."""
    def two(v: Any) -> tuple:
        return tuple(v) if isinstance(v, (tuple, list)) else (v, v)

    bad = []
    if kind in ("Conv2d", "ConvTranspose2d") and (
            m.padding_mode != "zeros" or isinstance(m.padding, str)):
        bad.append(f"padding={m.padding!r}, padding_mode={m.padding_mode!r}")
    if kind == "ConvTranspose2d" and any(o >= s for o, s in zip(two(m.output_padding),
                                                                two(m.stride))):
        bad.append(f"output_padding={m.output_padding} >= stride={m.stride}")
    if kind == "MaxPool2d" and m.return_indices:
        bad.append(f"return_indices={m.return_indices}")
    if kind == "AvgPool2d" and m.divisor_override is not None:
        bad.append(f"divisor_override={m.divisor_override}")
    if kind == "RMSNorm" and len(m.normalized_shape) != 1:
        bad.append(f"normalized_shape={tuple(m.normalized_shape)} (the last axis only)")
    if kind == "Upsample" and (m.mode != "nearest" or not _integer_factors(m)):
        bad.append(f"mode={m.mode!r}, scale_factor={m.scale_factor}, size={m.size} "
                   "(nearest with integer factors only)")
    if kind == "Embedding" and (m.padding_idx is not None or m.max_norm is not None):
        bad.append(f"padding_idx={m.padding_idx}, max_norm={m.max_norm}")
    if kind == "MultiheadAttention" and (m.bias_k is not None or m.add_zero_attn):
        bad.append("add_bias_kv=True" if m.bias_k is not None else "add_zero_attn=True")
    return bad


def _integer_factors(m: Any) -> bool:
    """Whether an Upsample's scale_factor is whole numbers (or it gives a size)."""
    sf = m.scale_factor
    if sf is None:
        return m.size is not None
    return all(float(s) == int(s) and s >= 1 for s in (sf if isinstance(sf, tuple) else (sf,)))


def _check(torch: Any, m: Any, path: str) -> None:
    """Refuse (TypeError naming the layer's path) anything the builder cannot rebuild."""
    kind = _kind(torch, m)
    where = f"layer {path!r}" if path else "the module"
    if kind is None and not _is_users(torch, m):
        raise TypeError(f"from_torch: {where} is torch.nn.{type(m).__name__}, which is not "
                        f"supported; supported torch layers: {', '.join(LAYERS)} (and modules "
                        "of your own classes, whose forward runs on Vars)")
    bad = [] if kind is None else _limits(m, kind)
    if bad:
        raise TypeError(f"from_torch: {where} is torch.nn.{kind} with {', '.join(bad)}, which "
                        f"gtape.nn.{kind} does not support")
    for _, p in m.named_parameters(recurse=False):
        if p.dtype not in (torch.float16, torch.float32, torch.float64):
            raise TypeError(f"from_torch: {where} has weights of dtype {p.dtype}; expected "
                            "a floating point dtype")
    if kind in (None, "Sequential", "ModuleList", "ModuleDict"):
        for name, child in m.named_children():
            _check(torch, child, f"{path}.{name}" if path else name)


# ---------------------------------------------------------------- building
class _Builder:
    """One from_torch call: the tape, and torch parameters already registered (ties)."""

    def __init__(self, torch: Any, tp: Tape) -> None:
        self.torch, self.tp = torch, tp
        self.params: dict[int, Var] = {}

    def param(self, p: Any) -> Var | None:
        """The tape's param of torch parameter ``p`` (one per parameter object: ties stay)."""
        if p is None:
            return None
        v = self.params.get(id(p))
        if v is None:
            v = self.params[id(p)] = self.tp.param(p.detach().cpu().numpy())
        return v

    def build(self, m: Any, path: str) -> Module:
        kind = _kind(self.torch, m)
        out = self._ported(m, path) if kind is None else getattr(self, f"_{kind}", None)
        if kind is not None:
            out = out(m, path) if out is not None else self._simple(m, kind)
        out.training = bool(m.training)
        return out

    def _children(self, m: Any, path: str) -> list[tuple[str, Module]]:
        return [(name, self.build(c, f"{path}.{name}" if path else name))
                for name, c in m.named_children()]

    # containers
    def _Sequential(self, m: Any, path: str) -> Module:
        return modules.Sequential(*[c for _, c in self._children(m, path)])

    def _ModuleList(self, m: Any, path: str) -> Module:
        return containers.ModuleList([c for _, c in self._children(m, path)])

    def _ModuleDict(self, m: Any, path: str) -> Module:
        return containers.ModuleDict(dict(self._children(m, path)))

    # layers with weights
    def _Linear(self, m: Any, path: str) -> Module:
        from .nn import Linear

        layer = Linear.__new__(Linear)
        layer.in_features, layer.out_features = int(m.in_features), int(m.out_features)
        layer.weight, layer.bias = self.param(m.weight), self.param(m.bias)
        return layer

    def _Conv2d(self, m: Any, path: str) -> Module:
        layer = layers.Conv2d.__new__(layers.Conv2d)
        layer.in_channels, layer.out_channels = int(m.in_channels), int(m.out_channels)
        layer.kernel_size = tuple(int(k) for k in m.kernel_size)
        layer.stride = layers._pair("Conv2d", "stride", m.stride)
        layer.padding = layers._pair("Conv2d", "padding", m.padding, least=0)
        layer.dilation = layers._pair("Conv2d", "dilation", m.dilation)
        layer.groups = int(m.groups)
        layer.weight, layer.bias = self.param(m.weight), self.param(m.bias)
        return layer

    def _ConvTranspose2d(self, m: Any, path: str) -> Module:
        from .vision_layers import ConvTranspose2d

        layer = ConvTranspose2d.__new__(ConvTranspose2d)
        layer.in_channels, layer.out_channels = int(m.in_channels), int(m.out_channels)
        for name in ("kernel_size", "stride", "padding", "output_padding", "dilation"):
            setattr(layer, name, tuple(int(k) for k in getattr(m, name)))
        layer.groups = int(m.groups)
        layer.weight, layer.bias = self.param(m.weight), self.param(m.bias)
        return layer

    def _BatchNorm1d(self, m: Any, path: str) -> Module:
        from . import batchnorm as batch_norm

        kind = batch_norm.BatchNorm1d if type(m).__name__ == "BatchNorm1d" else \
            batch_norm.BatchNorm2d
        layer = kind.__new__(kind)
        layer.num_features, layer.eps, layer.momentum = int(m.num_features), float(m.eps), (
            None if m.momentum is None else float(m.momentum))
        layer.affine, layer.track_running_stats = bool(m.affine), bool(m.track_running_stats)
        layer.weight, layer.bias = self.param(m.weight), self.param(m.bias)
        layer._int_states = {"num_batches_tracked"}
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            b = getattr(m, name, None)
            layer.register_buffer(name, None if b is None else self.tp.state(
                b.detach().cpu().numpy().astype(np.float64)))
        return layer

    _BatchNorm2d = _BatchNorm1d

    def _GroupNorm(self, m: Any, path: str) -> Module:
        layer = norm_layers.GroupNorm.__new__(norm_layers.GroupNorm)
        layer.num_groups, layer.num_channels = int(m.num_groups), int(m.num_channels)
        layer.eps = float(m.eps)
        layer.weight, layer.bias = self.param(m.weight), self.param(m.bias)
        return layer

    def _Embedding(self, m: Any, path: str) -> Module:
        layer = layers.Embedding.__new__(layers.Embedding)
        layer.tp = self.tp
        layer.num_embeddings, layer.embedding_dim = int(m.num_embeddings), int(m.embedding_dim)
        layer.weight = self.param(m.weight)
        return layer

    def _LayerNorm(self, m: Any, path: str) -> Module:
        layer = norm_layers.LayerNorm.__new__(norm_layers.LayerNorm)
        layer.normalized_shape = tuple(int(n) for n in m.normalized_shape)
        layer.eps = float(m.eps)
        layer.weight, layer.bias = self.param(m.weight), self.param(m.bias)
        return layer

    def _RMSNorm(self, m: Any, path: str) -> Module:
        layer = norm_layers.RMSNorm.__new__(norm_layers.RMSNorm)
        layer.normalized_shape = (int(m.normalized_shape[0]),)
        layer.eps = float(np.finfo(self.tp.dtype).eps) if m.eps is None else float(m.eps)
        layer.weight = self.param(m.weight)
        return layer

    def _MultiheadAttention(self, m: Any, path: str) -> Module:
        from .nn_attention import MultiheadAttention

        layer = MultiheadAttention.__new__(MultiheadAttention)
        layer.embed_dim, layer.num_heads = int(m.embed_dim), int(m.num_heads)
        layer.head_dim = layer.embed_dim // layer.num_heads
        layer.kdim, layer.vdim = int(m.kdim), int(m.vdim)
        layer.dropout, layer.batch_first = float(m.dropout), bool(m.batch_first)
        layer._drop_key, layer.calls = self.tp.next_key(), 0
        layer.in_proj_weight = self.param(m.in_proj_weight)
        if m.in_proj_weight is None:
            layer.q_proj_weight = self.param(m.q_proj_weight)
            layer.k_proj_weight = self.param(m.k_proj_weight)
            layer.v_proj_weight = self.param(m.v_proj_weight)
        layer.in_proj_bias = self.param(m.in_proj_bias)
        layer.out_proj = self.build(m.out_proj, f"{path}.out_proj")
        return layer

    def _simple(self, m: Any, kind: str) -> Module:
        from . import vision_layers

        if kind == "MaxPool2d":
            return layers.MaxPool2d(m.kernel_size, m.stride, m.padding, dilation=m.dilation,
                                    ceil_mode=bool(m.ceil_mode))
        if kind == "AvgPool2d":
            return layers.AvgPool2d(m.kernel_size, m.stride, m.padding,
                                    ceil_mode=bool(m.ceil_mode),
                                    count_include_pad=bool(m.count_include_pad))
        if kind == "AdaptiveAvgPool2d":
            return vision_layers.AdaptiveAvgPool2d(m.output_size)
        if kind == "Upsample":
            return vision_layers.Upsample(m.size, m.scale_factor, m.mode)
        if kind == "Dropout":
            return layers.Dropout(m.p, tp=self.tp)  # its own key, in tree order
        if kind == "GELU":
            return activation_layers.GELU(m.approximate)
        if kind == "Softplus":
            return activation_layers.Softplus(m.beta, m.threshold)
        if kind == "Flatten":
            return modules.Flatten(m.start_dim, m.end_dim)
        return _PLAIN[kind]()

    # a module of the user's own class
    def _ported(self, m: Any, path: str) -> Module:
        cls = ported_class(type(m))
        out = cls.__new__(cls)
        out.__dict__["_functional"] = (self.tp.next_key(), 0)  # before its children's keys
        own = dict(m.named_parameters(recurse=False))
        persistent = set(m._buffers) - set(m._non_persistent_buffers_set)
        children = dict(self._children(m, path))
        for name, value in vars(m).items():  # plain attributes (config, sizes), in order
            if name not in _TORCH_STATE:
                out.__dict__[name] = value
        for name, value in m._parameters.items():
            out.__dict__[name] = None if value is None else self.param(own[name])
        for name, value in m._buffers.items():
            out.register_buffer(name, None if value is None else value.detach().cpu().numpy(),
                                persistent=name in persistent)
        for name, child in children.items():
            out.__dict__[name] = child
        return out


# ---------------------------------------------------------------- ported modules
class PortedModule(Module):
    """A torch module of the user's own class: structure mirrored, its class's methods run on
    Vars (``gtape.torch_functions`` translates the torch functions they call). Buffers read
    as torch tensors inside those methods (torch code indexes and compares them)."""

    torch_class: type = object

    def __getattr__(self, name: str) -> Any:
        bufs = self.__dict__.get("_buffers")
        if bufs is not None and name in bufs:
            import torch

            b = bufs[name]
            return None if b is None else torch.from_numpy(b)
        raise AttributeError(f"{type(self).__name__!r} (ported from "
                             f"{self.torch_class.__qualname__}) has no attribute {name!r}")

    def named_children(self) -> Any:
        """The mirrored children, in the torch module's order."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value

    def _own_parameters(self) -> Any:
        for name, value in vars(self).items():
            if isinstance(value, Var) and value.op == "param":
                yield name, value

    def functional_key(self) -> Any:
        """The key of the next random function this module's forward calls (its own key,
        folded by a call counter); owned, so a captured program's ``advance_keys`` draws the
        next ones through ``next_keys`` as the next forward would."""
        key, n = self._functional
        self._functional = (key, n + 1)
        return OwnedKey(*key.fold(n).words, self, n)

    def next_keys(self, n: int) -> list[Key]:
        """The keys of the next ``n`` random functions its forward calls; counts them."""
        return [self.functional_key() for _ in range(n)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``forward`` with this module as the innermost ported module (random functions take
        its keys); at the outermost call, float host arrays become consts of the tape and int /
        bool ones torch tensors (what the torch code expects), and these arguments are the
        caller's data for ``gtape.const_roles`` (what the forward makes from anything else
        is a per-shape constant)."""
        stack = module_stack()
        if not stack:
            args = tuple(self._entry(a) for a in args)
            kwargs = {k: self._entry(v) for k, v in kwargs.items()}
        stack.append(self)
        try:
            with const_roles.ported_call(args, kwargs):
                return self.forward(*args, **kwargs)
        finally:
            stack.pop()

    def _entry(self, x: Any) -> Any:
        if isinstance(x, np.ndarray) and x.dtype.kind in "iub":
            import torch

            return torch.from_numpy(np.ascontiguousarray(x))
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and self.tape is not None:
            return self.tape.const(x)
        if _torch_name(type(x).__module__) and getattr(x, "is_floating_point", None) \
                and x.is_floating_point() and self.tape is not None:
            return self.tape.const(x.detach().cpu().numpy())
        return x

    def extra_repr(self) -> str:
        """The torch class it was ported from."""
        return f"ported from {self.torch_class.__module__}.{self.torch_class.__qualname__}"


_PORTED: dict[type, type] = {}
_KEEP = {"forward", "extra_repr"}  # names of Module's that the user's class may define


def ported_class(cls: type) -> type:
    """The PortedModule subclass of torch module class ``cls``: the methods, properties and
    class attributes of ``cls`` and its bases that are not torch's own (nor gtape Module's,
    except forward)."""
    got = _PORTED.get(cls)
    if got is not None:
        return got
    ns: dict[str, Any] = {"torch_class": cls, "__module__": __name__}
    for base in reversed(cls.__mro__):
        if _torch_name(base.__module__) or base is object:
            continue
        for name, value in vars(base).items():
            if name.startswith("__") and name.endswith("__"):
                continue
            if hasattr(Module, name) and name not in _KEEP:
                continue  # gtape's own API (named_parameters, train, to, ...) stays gtape's
            ns[name] = value
    got = _PORTED[cls] = type(cls.__name__, (PortedModule,), ns)
    got.__qualname__ = f"ported {cls.__qualname__}"
    return got
