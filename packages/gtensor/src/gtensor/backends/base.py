"""The Backend interface: ``asarray``/``to_numpy`` plus one method per registered op."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes, shapes
from ..messages import describe
from ..ops import REGISTRY, Op


class Backend:
    """Executes ops on one kind of array. Subclasses define the array type and ``_execute``."""

    name = "?"
    runs_kernels = False  # True for the kernel backends (sim, cpu, cuda, a Recorder over one)
    # True for a backend that records its ops to differentiate them again (gtape's TapeOps): a
    # backward rule whose fused op has no rule of its own then spells it op by op
    differentiates = False

    # ---------------------------------------------------------------- arrays
    def asarray(self, x: Any, dtype: Any = None) -> Any:
        """A new C-contiguous array of this backend holding ``x`` (see ``gtensor.dtypes.infer``)."""
        raise NotImplementedError

    def to_numpy(self, a: Any) -> np.ndarray:
        """A numpy copy of an array of this backend."""
        raise NotImplementedError

    def zeros(self, shape: Sequence[int], dtype: Any = "float64") -> Any:
        """A new array of +0.0 (0 / False for int64 / bool)."""
        raise NotImplementedError

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """A new uninitialized array (float32, float64, int64 or bool)."""
        raise NotImplementedError

    def is_array(self, x: Any) -> bool:
        """Whether ``x`` is an array of this backend."""
        raise NotImplementedError

    def constant(self, x: Any, dtype: Any = None) -> Any:
        """Host data ``x`` as an array of this backend, for a backward rule (a recording
        backend records a constant)."""
        return self.asarray(x, dtype)

    def _prepare(self, x: Any) -> Any:
        """Make a checked input ready for execution (e.g. C-contiguous)."""
        return x

    def _execute(self, op: Op, inputs: list, out_shape: tuple, dtype: np.dtype,
                 attrs: dict, out: Any = None) -> Any:
        raise NotImplementedError

    def overlaps(self, a: Any, b: Any) -> bool:
        """Whether two arrays of this backend may share memory (an ``out=`` buffer must not)."""
        return bool(np.may_share_memory(a, b))

    # ---------------------------------------------------------------- ops
    def apply(self, op: Op | str, inputs: Sequence[Any], out: Any = None, **attrs: Any) -> Any:
        """Run ``op`` on ``inputs`` with ``attrs`` after checking them.

        Returns a new C-contiguous array, or writes into ``out`` (an array of this backend with
        the result's shape and dtype that shares no memory with the inputs) and returns it.
        """
        if isinstance(op, str):
            op = REGISTRY[op]
        # The hot path: arrays of this backend with one supported dtype and rank <= MAX_RANK,
        # the same checks as below done cheaply. Anything else takes the full path, which
        # names the problem (or prepares the unusual input).
        is_array, prepare = self.is_array, self._prepare
        xs = []
        dtype = None
        if op.typed:  # index / mask inputs or results: the checked path knows the types
            return self._apply_checked(op, inputs, out, attrs)
        for x in inputs:
            if not is_array(x):
                break
            dt = x.dtype
            if dtype is None:
                if dt not in dtypes.SUPPORTED_DTYPES:
                    break
                dtype = dt
            elif dt != dtype:
                break
            if x.ndim > shapes.MAX_RANK:
                break
            xs.append(prepare(x))
        else:
            if op.nin == len(xs) or op.nin < 0:
                out_shape, attrs = op.infer(tuple([x.shape for x in xs]), attrs)
                if dtype is None:  # an op without array inputs (fill) names its dtype
                    dtype = attrs["dtype"]
                if out is not None:
                    self._check_out(op.name, out, out_shape, dtype, xs)
                return self._execute(op, xs, out_shape, dtype, attrs, out)
        return self._apply_checked(op, inputs, out, attrs)

    def _apply_checked(self, op: Op, inputs: Sequence[Any], out: Any, attrs: dict) -> Any:
        """``apply`` with every check spelled out one by one (errors name op and argument)."""
        names = ([f"xs[{i}]" for i in range(len(inputs))] if op.variadic else list(op.inputs))
        if not op.variadic and len(inputs) != len(op.inputs):
            raise TypeError(f"{op.name}: expected {len(op.inputs)} arrays "
                            f"({', '.join(op.inputs)}), got {len(inputs)}")
        inputs = [self.check_input(op.name, n, x, op.input_type(i))
                  for i, (n, x) in enumerate(zip(names, inputs))]
        dtype = first = None
        for i, (n, x) in enumerate(zip(names, inputs)):
            shapes.check_rank(op.name, n, x.shape)
            kind = op.input_type(i)
            if kind not in (dtypes.FLOAT, dtypes.ANY, dtypes.NUMBER):
                continue
            if dtype is None:
                dtype, first = x.dtype, n
            elif x.dtype != dtype:
                what = "one float dtype for all float inputs" if kind == dtypes.FLOAT else \
                    "one dtype for all of them"
                raise TypeError(f"{op.name}: {n} is {x.dtype} but {first} is {dtype}; "
                                f"expected {what} (convert with asarray)")
        out_shape, attrs = op.infer(tuple(tuple(x.shape) for x in inputs), attrs)
        if op.out_type == dtypes.ANY:
            pass  # the inputs' dtype
        elif op.out_type != dtypes.FLOAT:
            dtype = dtypes.TYPE_DTYPES[op.out_type]
        elif dtype is None:  # an op without float inputs (fill) names its dtype
            dtype = attrs["dtype"]
        if op.check is not None:
            op.check(inputs, attrs)
        if out is not None:
            self._check_out(op.name, out, out_shape, dtype, inputs)
        return self._execute(op, inputs, out_shape, dtype, attrs, out)

    def _check_out(self, op: str, out: Any, shape: tuple, dtype: Any, inputs: list) -> None:
        """Validate an ``out=`` buffer."""
        if not self.is_array(out):
            raise TypeError(f"{op}: out is {describe(out)}; expected an array of the "
                            f"{self.name} backend")
        if tuple(out.shape) != tuple(shape) or out.dtype != dtype:
            raise ValueError(f"{op}: out has shape {tuple(out.shape)} and dtype {out.dtype}; "
                             f"expected shape {tuple(shape)} and dtype {dtype}")
        flags = out.flags
        if not flags.c_contiguous or not getattr(flags, "writeable", True):
            raise ValueError(f"{op}: out must be C-contiguous and writeable")
        for x in inputs:
            if self.overlaps(out, x):
                raise ValueError(f"{op}: out shares memory with an input; expected a separate "
                                 "buffer")

    def write(self, dst: Any, x: Any) -> Any:
        """Copy host data ``x`` into the existing array ``dst`` (converted once to its dtype).

        A host-to-backend transfer with no allocation on the backend: how fresh inputs and
        per-step host scalars reach buffers whose address a captured program has recorded.
        ``x`` is host data (a number, a list, a numpy array) of ``dst``'s shape; arrays already
        on this backend are copied with the ``copy`` op instead.
        """
        if not self.is_array(dst):
            raise TypeError(f"write: dst is {describe(dst)}; expected an array of the "
                            f"{self.name} backend")
        if not dst.flags.c_contiguous or not getattr(dst.flags, "writeable", True):
            raise ValueError("write: dst must be C-contiguous and writeable")
        if type(x) is np.ndarray and x.dtype == dst.dtype and x.shape == tuple(dst.shape) \
                and x.flags.c_contiguous:  # already what it becomes: a step's keys, ids
            self._upload(dst, x)
            return dst
        if type(x) is float and dst.shape == () and (dst.dtype == np.float64 or (
                dst.dtype == np.float32 and abs(x) < 3.0e38)):  # a step's scalar (no overflow)
            self._upload(dst, np.asarray(x, dtype=dst.dtype))
            return dst
        if type(x).__module__.split(".")[0] == "cupy":
            raise TypeError(f"write: x is {describe(x)}; write takes host data (copy an array "
                            "of a backend with that backend's copy op or to_numpy)")
        host = np.asarray(x)
        if host.dtype.kind not in "biuf":
            raise TypeError(f"write: x has dtype {host.dtype}; expected real numbers (bool, "
                            "int or float)")
        if tuple(host.shape) != tuple(dst.shape):
            raise ValueError(f"write: x has shape {tuple(host.shape)}; dst has shape "
                             f"{tuple(dst.shape)}; expected the same shape")
        with np.errstate(over="ignore"):
            host = np.ascontiguousarray(host, dtype=dst.dtype).view(np.ndarray)
        self._upload(dst, host)
        return dst

    def _upload(self, dst: Any, host: np.ndarray) -> None:
        """Copy a C-contiguous numpy array of dst's shape and dtype into ``dst``."""
        np.copyto(dst, host)

    def check_input(self, op: str, arg: str, x: Any, kind: str = dtypes.FLOAT) -> Any:
        """Reject anything but an array of this backend of the input's kind: float32/float64
        (``dtypes.FLOAT``), int64 (``dtypes.INT``: indices), bool (``dtypes.BOOL``: masks),
        any of them (``dtypes.ANY``) or a float or int64 (``dtypes.NUMBER``)."""
        if not self.is_array(x):
            raise TypeError(f"{op}: {arg} is {describe(x)}; the {self.name} backend takes "
                            f"arrays made by backend({self.name!r}).asarray")
        if kind == dtypes.ANY:
            return self._prepare(self.check_array(op, arg, x))
        if kind == dtypes.NUMBER:
            if x.dtype not in dtypes.SUPPORTED_DTYPES and x.dtype != dtypes.INDEX:
                raise TypeError(f"{op}: {arg} has dtype {x.dtype}; expected float32, float64 or "
                                "int64")
            return self._prepare(x)
        if kind == dtypes.FLOAT:
            if x.dtype not in dtypes.SUPPORTED_DTYPES:
                raise TypeError(f"{op}: {arg} has dtype {x.dtype}; expected float32 or float64")
        elif x.dtype != dtypes.TYPE_DTYPES[kind]:
            what = "int64 indices" if kind == dtypes.INT else "a bool mask"
            raise TypeError(f"{op}: {arg} has dtype {x.dtype}; expected {what} (dtype "
                            f"{dtypes.TYPE_DTYPES[kind]}; convert with asarray(x, "
                            f"dtype={dtypes.TYPE_DTYPES[kind].name!r}))")
        return self._prepare(x)

    def check_array(self, op: str, arg: str, x: Any) -> Any:
        """Reject anything but an array of this backend (float, int64 or bool)."""
        if not self.is_array(x):
            raise TypeError(f"{op}: {arg} is {describe(x)}; the {self.name} backend takes "
                            f"arrays made by backend({self.name!r}).asarray")
        if x.dtype not in dtypes.ARRAY_DTYPES:
            raise TypeError(f"{op}: {arg} has dtype {x.dtype}; expected float32, float64, int64 "
                            "or bool")
        return x

    def __repr__(self) -> str:
        return f"gtensor.backend({self.name!r})"


def _method(op: Op):
    """The backend method for ``op``: positional arrays, then attrs positionally or by name."""

    plain = not op.variadic and not op.attrs  # no attributes: arrays (and out=) only
    full = not op.variadic and bool(op.attrs)  # every attribute given positionally
    nin = len(op.inputs)
    nfull = nin + len(op.attrs)

    def method(self: Backend, *args: Any, **kwargs: Any) -> Any:
        if plain and len(args) == nin:
            if not kwargs:
                return self.apply(op, args)
            if len(kwargs) == 1 and "out" in kwargs:
                return self.apply(op, args, out=kwargs["out"])
        elif full and len(args) == nfull and (not kwargs or (len(kwargs) == 1 and "out" in kwargs)):
            return self.apply(op, args[:nin], out=kwargs.get("out"),
                              **dict(zip(op.attrs, args[nin:])))
        if op.variadic:
            if not args:
                raise TypeError(f"{op.name}: missing the list of arrays")
            xs, rest = args[0], args[1:]
            if not isinstance(xs, (list, tuple)):
                raise TypeError(f"{op.name}: xs must be a list of arrays, got {describe(xs)}")
            inputs = list(xs)
        else:
            inputs, rest = list(args[:len(op.inputs)]), args[len(op.inputs):]
            if len(inputs) < len(op.inputs):
                raise TypeError(f"{op.name}: expected arrays ({', '.join(op.inputs)}), "
                                f"got {len(inputs)}")
        if len(rest) > len(op.attrs):
            raise TypeError(f"{op.name}: too many arguments; attributes are {op.attrs}")
        attrs = dict(op.defaults)
        attrs.update(zip(op.attrs, rest))
        out = kwargs.pop("out", None)
        for k, v in kwargs.items():
            if k not in op.attrs:
                raise TypeError(f"{op.name}: unexpected argument {k!r}; attributes are {op.attrs}")
            attrs[k] = v
        missing = [a for a in op.attrs if a not in attrs] if len(attrs) < len(op.attrs) else ()
        if missing:
            raise TypeError(f"{op.name}: missing argument(s) {', '.join(missing)}")
        return self.apply(op, inputs, out=out, **attrs)

    sig = ", ".join(list(op.inputs) + [f"{a}={op.defaults[a]!r}" if a in op.defaults else a
                                       for a in op.attrs])
    method.__name__ = op.name
    method.__qualname__ = f"Backend.{op.name}"
    method.__doc__ = f"{op.name}({sig}, out=None): {op.doc}."
    return method


def install_op_methods() -> None:
    """Give Backend one method per registered op (``be.add(a, b)``, ``be.sum(x, axis)``...)."""
    for op in REGISTRY.values():
        setattr(Backend, op.name, _method(op))


install_op_methods()
