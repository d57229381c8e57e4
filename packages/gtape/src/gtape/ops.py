"""One function per gtensor op: each runs the op eagerly and records one node on the tape.

Operands are Vars of one tape or data (arrays, lists, numbers), which become consts of the
Vars' tape under the conversion rule of ``gtape.convert``. At least one operand must be a Var.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
from gtensor import REGISTRY, Op, describe
from gtensor.ops.optim import UPDATE_OPS

from .dims import torch_dims
from .var import Var

Operand = Any  # a Var, or data converted to a const: ndarray, backend array, list, number

# The gtensor ops with no function here, each with its reason; every other op has one, named
# as the op, its inputs and attrs as the op declares them (``gtape.surface`` checks it): written
# below where it converts or documents more, else made from the registry (``_from_registry``).
INTERNAL = {
    **{name: "a fused optimizer update: gopt runs it on parameter buffers, not on Vars"
       for name in UPDATE_OPS},
    "fill": "how a tape seeds its backward and zeroes gradients (Tape.const makes constants)",
}
# attrs a gtape function does not take: the tape (or the composite calling it) supplies them
TAPE_ATTRS = {"dtype": "the tape's float dtype (the function passes it)",
              "inner": "the tape's inner-product contract (the tape fills it in)",
              "strict": "torch's id rule, [0, n): embedding and cross_entropy pass the name of "
                        "their ids; take / take_along_axis keep numpy's [-n, n)"}
# parameters of a gtape function that are neither inputs nor attrs of its op, with the reason
# (e.g. a bias the function adds with its own op)
EXTRA_PARAMS: dict[str, dict[str, str]] = {
    "conv2d": {"b": "the bias (O,) or None: one broadcast add after the op"},
}


def apply(name: Op | str, operands: Sequence[Operand], **attrs: Any) -> Var:
    """Run the gtensor op ``name`` (an Op, or its name) on ``operands`` and record it."""
    tape = None
    for x in operands:
        if isinstance(x, Var):
            tape = x._tape
            break
    if tape is None:
        got = ", ".join(describe(x) for x in operands) or "no operands"
        what = name.name if isinstance(name, Op) else name
        raise TypeError(f"{what}: expected at least one Var of a Tape among the operands, "
                        f"got {got}")
    return tape._record(name, operands, attrs)


# ---------------------------------------------------------------- elementwise, binary
def add(a: Operand, b: Operand) -> Var:
    """a + b (broadcasting)."""
    return apply("add", (a, b))


def sub(a: Operand, b: Operand) -> Var:
    """a - b (broadcasting)."""
    return apply("sub", (a, b))


def mul(a: Operand, b: Operand) -> Var:
    """a * b (broadcasting)."""
    return apply("mul", (a, b))


def div(a: Operand, b: Operand) -> Var:
    """a / b (broadcasting)."""
    return apply("div", (a, b))


def maximum(a: Operand, b: Operand) -> Var:
    """Elementwise max (broadcasting): a where a > b or a is NaN, else b (ties give b); the
    gradient goes to the selected input."""
    return apply("maximum", (a, b))


def adds(x: Var, s: float) -> Var:
    """x + s for a Python scalar s (rounded once to the tape's dtype)."""
    return apply("adds", (x,), s=s)


def muls(x: Var, s: float) -> Var:
    """x * s for a Python scalar s (rounded once to the tape's dtype)."""
    return apply("muls", (x,), s=s)


# ---------------------------------------------------------------- elementwise, unary
def neg(x: Operand) -> Var:
    """-x."""
    return apply("neg", (x,))


def relu(x: Operand) -> Var:
    """max(x, 0) (NaN propagates; gradient 0 at x <= 0)."""
    return apply("relu", (x,))


def sigmoid(x: Operand) -> Var:
    """1 / (1 + exp(-x))."""
    return apply("sigmoid", (x,))


def tanh(x: Operand) -> Var:
    """tanh(x)."""
    return apply("tanh", (x,))


def exp(x: Operand) -> Var:
    """e ** x."""
    return apply("exp", (x,))


def log(x: Operand) -> Var:
    """Natural logarithm."""
    return apply("log", (x,))


def sqrt(x: Operand) -> Var:
    """Square root."""
    return apply("sqrt", (x,))


def abs(x: Operand) -> Var:  # noqa: A001
    """|x| as ``relu(x) + relu(-x)``: exactly |x| (+0.0 at +-0.0, NaN stays NaN); gradient
    sign(x), 0 at x = 0 (as PyTorch's)."""
    return add(relu(x), relu(neg(x)))


# ---------------------------------------------------------------- reductions
def sum(x: Operand, axis: int | tuple[int, ...] | None = None,  # noqa: A001
        keepdims: bool = False) -> Var:
    """Serial sum over all elements, one axis or several (row-major over them)."""
    return apply("sum", (x,), axis=axis, keepdims=keepdims)


def mean(x: Operand, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Var:
    """Serial sum / count over all elements, one axis or several (row-major over them)."""
    return apply("mean", (x,), axis=axis, keepdims=keepdims)


def sum_to(x: Operand, shape: Sequence[int]) -> Var:
    """Sum x over the axes that broadcast ``shape`` to x.shape."""
    return apply("sum_to", (x,), shape=tuple(shape))


# ---------------------------------------------------------------- inner products
def matmul(a: Operand, b: Operand, ta: bool = False, tb: bool = False) -> Var:
    """op(a) (m, k) @ op(b) (k, n) with serial inner products; ``ta`` / ``tb`` read that
    operand transposed (exactly ``matmul(transpose(a), b)``, without the copy). Operands of
    other ranks follow torch.matmul (1-D operands, broadcast leading dims: ``gtape.linalg``)."""
    if _rank(a) == 2 and _rank(b) == 2:
        return apply("matmul", (a, b), ta=ta, tb=tb)
    from .linalg import matmul_any  # noqa: PLC0415 (linalg composes the ops of this module)
    return matmul_any(a, b, ta, tb)


def _rank(x: Any) -> int:
    """The number of axes of a Var or of data (2 for a dropped Var: the op's own checks then
    name it)."""
    if isinstance(x, Var):
        return x._rank() if x.alive else 2
    return np.ndim(x)


def bmm(a: Operand, b: Operand, ta: bool = False, tb: bool = False) -> Var:
    """op(a) (batch, m, k) @ op(b) (batch, k, n) with serial inner products; ``ta`` / ``tb``
    swap that operand's last two axes (exactly a transpose first, without the copy)."""
    return apply("bmm", (a, b), ta=ta, tb=tb)


# ---------------------------------------------------------------- movement
def copy(x: Operand) -> Var:
    """An exact copy of x (a new node; gradient passes through unchanged)."""
    return apply("copy", (x,))


def transpose(x: Operand, axes: Sequence[int] | None = None) -> Var:
    """Permute axes (default: reverse them)."""
    return apply("transpose", (x,), axes=None if axes is None else tuple(axes))


def reshape(x: Operand, shape: Sequence[int]) -> Var:
    """Same elements in row-major order, new shape (one -1 allowed)."""
    return apply("reshape", (x,), shape=tuple(shape) if not isinstance(shape, int) else shape)


def slice(x: Operand, axis: int, start: int, stop: int) -> Var:  # noqa: A001
    """x[start:stop] along one axis."""
    return apply("slice", (x,), axis=axis, start=start, stop=stop)


def pad(x: Operand, axis: int, before: int, after: int) -> Var:
    """+0.0 padding before/after along one axis."""
    return apply("pad", (x,), axis=axis, before=before, after=after)


def concat(xs: Sequence[Operand], axis: int = 0) -> Var:
    """Join arrays along an existing axis."""
    if isinstance(xs, Var) or not isinstance(xs, (list, tuple)):
        raise TypeError(f"concat: xs must be a list of Vars, got {describe(xs)}")
    return apply("concat", tuple(xs), axis=axis)


def broadcast_to(x: Operand, shape: Sequence[int]) -> Var:
    """Repeat x along broadcast axes."""
    return apply("broadcast_to", (x,), shape=tuple(shape))


# ---------------------------------------------------------------- softmax
def softmax(x: Operand, axis: int = -1) -> Var:
    """exp(x - max) / serial sum along one axis."""
    return apply("softmax", (x,), axis=axis)


# ---------------------------------------------------------------- backward helpers (no vjp)
def relu_grad(g: Operand, x: Operand) -> Var:
    """g where x > 0 else 0 (not differentiable)."""
    return apply("relu_grad", (g, x))


def sigmoid_grad(g: Operand, y: Operand) -> Var:
    """g * (y * (1 - y)) (not differentiable)."""
    return apply("sigmoid_grad", (g, y))


def tanh_grad(g: Operand, y: Operand) -> Var:
    """g * (1 - y * y) (not differentiable)."""
    return apply("tanh_grad", (g, y))


def softmax_grad(g: Operand, y: Operand, axis: int = -1) -> Var:
    """y * (g - serial sum(g * y)) along one axis (not differentiable)."""
    return apply("softmax_grad", (g, y), axis=axis)


# ---------------------------------------------------------------- selection and comparison
def minimum(a: Operand, b: Operand) -> Var:
    """Elementwise min (broadcasting): a where a < b or a is NaN, else b (ties give b); the
    gradient goes to the selected input."""
    return apply("minimum", (a, b))


def clip(x: Operand, lo: Operand, hi: Operand) -> Var:
    """``minimum(hi, maximum(lo, x))``: x limited to [lo, hi]. With x on the tie side of both
    selections, x's gradient is 1 on the closed interval [lo, hi] (as torch.clamp) and 0
    outside; a NaN x stays NaN."""
    return minimum(hi, maximum(lo, x))


def where(cond: Operand, a: Operand, b: Operand) -> Var:
    """a where the bool mask ``cond`` is true, else b (broadcasting; a selection). Backward: g
    to a where cond, to b elsewhere."""
    return apply("where", (cond, a, b))


def greater(a: Operand, b: Operand) -> Var:
    """a > b as a bool Var (false for NaN; not differentiable)."""
    return apply("greater", (a, b))


def greater_equal(a: Operand, b: Operand) -> Var:
    """a >= b as a bool Var (false for NaN; not differentiable)."""
    return apply("greater_equal", (a, b))


def less(a: Operand, b: Operand) -> Var:
    """a < b as a bool Var (false for NaN; not differentiable)."""
    return apply("less", (a, b))


def less_equal(a: Operand, b: Operand) -> Var:
    """a <= b as a bool Var (false for NaN; not differentiable)."""
    return apply("less_equal", (a, b))


def equal(a: Operand, b: Operand) -> Var:
    """a == b as a bool Var (false for NaN, +0.0 == -0.0; not differentiable)."""
    return apply("equal", (a, b))


def not_equal(a: Operand, b: Operand) -> Var:
    """a != b as a bool Var (true for NaN; not differentiable)."""
    return apply("not_equal", (a, b))


def argmax(x: Operand, axis: int = -1) -> Var:
    """int64 index of the first maximum along ``axis`` (the first NaN wins; not
    differentiable)."""
    return apply("argmax", (x,), axis=axis)


# ---------------------------------------------------------------- gathers
def take(x: Operand, ids: Operand, axis: int = 0) -> Var:
    """numpy's take: x's positions named by int64 ``ids`` (any shape; -n <= id < n) along
    ``axis``. Backward: a scatter-add in the defined order (``take_grad``)."""
    return apply("take", (x, ids), axis=axis)


def embedding(weight: Operand, ids: Operand) -> Var:
    """Rows of ``weight`` (vocab, dim) named by int64 ``ids`` in [0, vocab) (torch's rule; a
    ValueError otherwise): ``take(weight, ids, axis=0)``."""
    return apply("take", (weight, ids), axis=0, strict="embedding: ids")


def take_along_axis(x: Operand, ids: Operand, axis: int = -1,
                    ignore: int | None = None) -> Var:
    """numpy's take_along_axis (ids of x's shape but along ``axis``); ids equal to ``ignore``
    give +0.0 and no gradient."""
    return apply("take_along_axis", (x, ids), axis=axis, ignore=ignore)


def take_grad(g: Operand, ids: Operand, n: int, axis: int) -> Var:
    """take's backward: the scatter-add of g into n positions along ``axis``."""
    return apply("take_grad", (g, ids), n=n, axis=axis)


def take_along_axis_grad(g: Operand, ids: Operand, n: int, axis: int,
                         ignore: int | None = None) -> Var:
    """take_along_axis's backward: the scatter-add of g into n positions along ``axis``."""
    return apply("take_along_axis_grad", (g, ids), n=n, axis=axis, ignore=ignore)


def index_weight(ids: Var, ignore: int) -> Var:
    """1.0 where ``ids != ignore`` else +0.0 (ids: an int64 Var), in the tape's float dtype
    (not differentiable)."""
    if not isinstance(ids, Var):
        raise TypeError(f"index_weight: ids is {describe(ids)}; expected an int64 Var")
    return apply("index_weight", (ids,), ignore=ignore, dtype=ids.tape.dtype)


# ---------------------------------------------------------------- stable log-probabilities
def log_softmax(x: Operand, axis: int = -1) -> Var:
    """``(x - m) - log(serial sum exp(x - m))`` along ``axis``, m the row max: finite for
    finite logits whatever their spread."""
    return apply("log_softmax", (x,), axis=axis)


def log_softmax_grad(g: Operand, y: Operand, axis: int = -1) -> Var:
    """log_softmax's backward from its output y: ``g - exp(y) * serial sum(g)``."""
    return apply("log_softmax_grad", (g, y), axis=axis)


def logsumexp(x: Operand, axis: int = -1) -> Var:
    """``m + log(serial sum exp(x - m))`` along ``axis`` (m the row max, +0.0 if infinite)."""
    return apply("logsumexp", (x,), axis=axis)


# ---------------------------------------------------------------- random (gtape.rng)
def rng_bits(key: Var, shape: Any) -> Var:
    """The op ``rng_bits`` on an int64 key Var (2,): int64 Philox words (``g.rng.bits``)."""
    return apply("rng_bits", (key,), shape=shape)


def rng_uniform(key: Var, shape: Any) -> Var:
    """The op ``rng_uniform`` on an int64 key Var (2,), in the tape's dtype (``g.rng.uniform``)."""
    if not isinstance(key, Var):
        raise TypeError(f"rng_uniform: key is {describe(key)}; expected an int64 key Var")
    return apply("rng_uniform", (key,), shape=shape, dtype=key.tape.dtype)


def rng_normal(key: Var, shape: Any) -> Var:
    """The op ``rng_normal`` on an int64 key Var (2,), in the tape's dtype (``g.rng.normal``)."""
    if not isinstance(key, Var):
        raise TypeError(f"rng_normal: key is {describe(key)}; expected an int64 key Var")
    return apply("rng_normal", (key,), shape=shape, dtype=key.tape.dtype)


def rng_fold(key: Var, i: int) -> Var:
    """The op ``rng_fold``: the key Var of ``Key.fold(i)`` computed on the tape's backend."""
    return apply("rng_fold", (key,), i=i)


# ---------------------------------------------------------------- convolution and pooling
IntPair = int | tuple[int, int]


def conv2d(x: Operand, w: Operand, b: Operand | None = None, stride: IntPair = 1,
           padding: IntPair = 0, dilation: IntPair = 1, groups: int = 1) -> Var:
    """torch's conv2d (NCHW; w (O, C/groups, KH, KW); b (O,) or None): each output a serial
    chain over its group's (c, kh, kw) row-major (padding +0.0, multiplied; taps dilation
    apart), then ``+ b`` (one broadcast add; its gradient the serial sum over (n, oy, ox)).
    ``groups == C`` is a depthwise conv. See docs/semantics.md."""
    o = _bias_checked("conv2d", w, b, 0, 1)
    y = apply("conv2d", (x, w), stride=stride, padding=padding, dilation=dilation,
              groups=groups)
    return y if b is None else add(y, reshape(b, (o, 1, 1)))


def _bias_checked(where: str, w: Operand, b: Operand | None, axis: int, times: int) -> int:
    """The channel count a bias must have (w's ``axis`` times ``times``), checked against
    ``b`` before anything is recorded (a refused call changes nothing)."""
    ws = tuple(w.shape if isinstance(w, Var) else np.shape(w))
    o = ws[axis] * times if len(ws) > axis else None
    if b is not None:
        got = tuple(b.shape if isinstance(b, Var) else np.shape(b))
        if got != (o,):
            raise ValueError(f"{where}: b has shape {got}; expected ({o if o else 'O'},), "
                             "one bias per output channel of w")
    return o


def conv_transpose2d(x: Operand, w: Operand, b: Operand | None = None, stride: IntPair = 1,
                     padding: IntPair = 0, output_padding: IntPair = 0, groups: int = 1,
                     dilation: IntPair = 1) -> Var:
    """torch's conv_transpose2d (NCHW; w (C_in, C_out/groups, KH, KW), torch's layout; b
    (C_out,) or None): conv2d's input gradient of x by w onto the output size
    (H - 1)*sh - 2*ph + dh*(KH - 1) + output_padding + 1 (likewise for W), then ``+ b``.
    Per output element: per tap a serial chain over the group's input channels, then the sum
    over the taps (kh, kw) row-major reaching it (``conv2d_grad_input``'s order).
    ``output_padding`` must be smaller than the stride (torch also allows < dilation)."""
    from gtensor.ops.conv import pair

    where = "conv_transpose2d"
    st, pd = pair(where, "stride", stride, 1), pair(where, "padding", padding, 0)
    dl, op = pair(where, "dilation", dilation, 1), pair(where, "output_padding", output_padding, 0)
    if op[0] >= st[0] or op[1] >= st[1]:
        raise ValueError(f"{where}: output_padding {op} is not smaller than the stride {st}; "
                         "expected output_padding < stride on each axis")
    xs = tuple(x.shape if isinstance(x, Var) else np.shape(x))
    ws = tuple(w.shape if isinstance(w, Var) else np.shape(w))
    if len(xs) != 4 or len(ws) != 4:
        raise ValueError(f"{where}: x has shape {xs} and w {ws}; expected 4-D arrays "
                         "(N, C_in, H, W) and (C_in, C_out/groups, KH, KW)")
    size = tuple((xs[2 + a] - 1) * st[a] - 2 * pd[a] + dl[a] * (ws[2 + a] - 1) + op[a] + 1
                 for a in (0, 1))
    if min(size) < 1:
        raise ValueError(f"{where}: the output size {size} is empty (input {xs[2:]}, stride "
                         f"{st}, padding {pd}, dilation {dl}, kernel {ws[2:]}); expected "
                         "sizes >= 1")
    o = _bias_checked(where, w, b, 1, groups if isinstance(groups, int) else 1)
    y = apply("conv2d_grad_input", (x, w), stride=st, padding=pd, size=size, dilation=dl,
              groups=groups)
    return y if b is None else add(y, reshape(b, (o, 1, 1)))


def conv2d_grad_input(g: Operand, w: Operand, stride: IntPair = 1, padding: IntPair = 0,
                      size: IntPair | None = None, dilation: IntPair = 1, groups: int = 1) -> Var:
    """conv2d's input gradient for an input of spatial ``size`` (H, W) (col2im of w^T g)."""
    return apply("conv2d_grad_input", (g, w), stride=stride, padding=padding, size=size,
                 dilation=dilation, groups=groups)


def conv2d_grad_weight(g: Operand, x: Operand, stride: IntPair = 1, padding: IntPair = 0,
                       kernel: IntPair | None = None, dilation: IntPair = 1,
                       groups: int = 1) -> Var:
    """conv2d's weight gradient for a ``kernel`` (KH, KW): per weight a serial chain over
    (n, oy, ox)."""
    return apply("conv2d_grad_weight", (g, x), stride=stride, padding=padding, kernel=kernel,
                 dilation=dilation, groups=groups)


def max_pool2d(x: Operand, kernel: IntPair, stride: IntPair | None = None, padding: IntPair = 0,
               dilation: IntPair = 1, ceil_mode: bool = False) -> Var:
    """torch's max_pool2d (stride None = kernel; padding <= kernel // 2, never chosen; taps
    dilation apart; ceil_mode as torch): the first maximum of each window's input elements in
    row-major order wins (the first NaN if any); the gradient goes to it."""
    return apply("max_pool2d", (x,), kernel=kernel, stride=stride, padding=padding,
                 dilation=dilation, ceil_mode=ceil_mode)


def max_pool2d_grad(g: Operand, x: Operand, kernel: IntPair, stride: IntPair | None = None,
                    padding: IntPair = 0, dilation: IntPair = 1, ceil_mode: bool = False) -> Var:
    """max_pool2d's backward: g to each window's chosen element of x, summed over windows."""
    return apply("max_pool2d_grad", (g, x), kernel=kernel, stride=stride, padding=padding,
                 dilation=dilation, ceil_mode=ceil_mode)


def max_pool2d_pick(v: Operand, x: Operand, kernel: IntPair, stride: IntPair | None = None,
                    padding: IntPair = 0, dilation: IntPair = 1, ceil_mode: bool = False) -> Var:
    """v (x's shape) read at the element each max_pool2d window of x chooses."""
    return apply("max_pool2d_pick", (v, x), kernel=kernel, stride=stride, padding=padding,
                 dilation=dilation, ceil_mode=ceil_mode)


def avg_pool2d(x: Operand, kernel: IntPair, stride: IntPair | None = None, padding: IntPair = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Var:
    """torch's avg_pool2d (stride None = kernel; padding <= kernel // 2; ceil_mode and
    count_include_pad as torch): each window's serial sum of its input elements in row-major
    order, then one division by its divisor (torch's)."""
    return apply("avg_pool2d", (x,), kernel=kernel, stride=stride, padding=padding,
                 ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def avg_pool2d_grad(g: Operand, kernel: IntPair, stride: IntPair | None = None,
                    size: IntPair | None = None, padding: IntPair = 0, ceil_mode: bool = False,
                    count_include_pad: bool = True) -> Var:
    """avg_pool2d's backward onto an input of spatial ``size``: g / divisor summed over the
    windows holding each element."""
    return apply("avg_pool2d_grad", (g,), kernel=kernel, stride=stride, size=size,
                 padding=padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def adaptive_avg_pool2d(x: Operand, output_size: IntPair) -> Var:
    """torch's adaptive_avg_pool2d (output at most the input; None in a pair: the input's
    size): window (oy, ox) rows [floor(oy*H/OH), ceil((oy+1)*H/OH)) by columns likewise, its
    serial sum row-major, then / its element count. ``output_size=1``: global average
    pooling."""
    if isinstance(output_size, (tuple, list)) and None in output_size:
        xs = tuple(x.shape if isinstance(x, Var) else np.shape(x))
        output_size = tuple(xs[2 + a] if v is None and len(xs) == 4 else v
                            for a, v in enumerate(output_size))
    return apply("adaptive_avg_pool2d", (x,), output_size=output_size)


# ---------------------------------------------------------------- the rest, from the registry
def _from_registry(op: Op) -> Any:
    """The gtape function of an op defined only in gtensor: its inputs (a list for a variadic
    op) then its attrs, with the op's defaults and its one-line doc; the tape's dtype is passed
    for a ``dtype`` attr."""
    P = inspect.Parameter
    ins = ["xs"] if op.variadic else list(op.inputs)
    params = [P(n, P.POSITIONAL_OR_KEYWORD) for n in ins]
    attrs = [a for a in op.attrs if a not in TAPE_ATTRS]
    kind = P.POSITIONAL_OR_KEYWORD
    for a in attrs:  # a required attr after a defaulted one: keyword-only from there on
        if a in op.defaults:
            params.append(P(a, kind, default=op.defaults[a]))
        else:
            kind = P.KEYWORD_ONLY if any(p.default is not P.empty for p in params) else kind
            params.append(P(a, kind))
    sig = inspect.Signature(params, return_annotation="Var")

    def fn(*args: Any, **kwargs: Any) -> Var:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        got = bound.arguments
        operands = tuple(got["xs"]) if op.variadic else tuple(got[n] for n in ins)
        extra = {a: got[a] for a in attrs}
        if "dtype" in op.attrs:
            tape = next((x.tape for x in operands if isinstance(x, Var)), None)
            extra["dtype"] = tape.dtype if tape is not None else None
        return apply(op.name, operands, **extra)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__module__ = __name__
    fn.__doc__ = op.doc[:1].upper() + op.doc[1:] + "." if op.doc else f"The gtensor op {op.name}."
    fn.__signature__ = sig
    fn.from_registry = True
    return fn


for _name, _op in REGISTRY.items():
    if _name not in globals() and _name not in INTERNAL:
        globals()[_name] = _from_registry(_op)

__all__ = [name for name, fn in list(globals().items())  # the public functions
           if callable(fn) and getattr(fn, "__module__", None) == __name__
           and not name.startswith("_")]
for _name in __all__:  # torch's dim= / keepdim= accepted where a function has axis / keepdims
    globals()[_name] = torch_dims(globals()[_name])
