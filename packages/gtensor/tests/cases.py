"""The op-case table: every op x shape class, the rows of the parity and oracle tests.

An op that declares its checks (``Op.checks``, ``gtensor.ops.checks``) gets its rows from the
declaration (``declared_cases``); the others are written here. test_registry checks that every
op has rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import gtensor
import numpy as np
from gtensor.ops.checks import BINARY_SHAPES, UNARY_SHAPES
from gtensor.ops.inner import INNER
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


@dataclass(frozen=True)
class Case:
    """One op call: input shapes and attrs; ``positive`` asks for a domain like log's."""

    op: str
    shapes: tuple
    attrs: dict = field(default_factory=dict)
    label: str = ""
    # int64 inputs (ids, labels) are drawn from [lo, hi] (negative ids included where numpy's
    # take accepts them); bool inputs (masks) from both values
    id_range: tuple = (0, 0)
    # the element dtype of ``ANY`` inputs (the movement ops): "" for the float dtype under
    # test, "int64" (ids drawn from id_range) or "bool"
    element: str = ""

    @property
    def id(self) -> str:
        """A readable pytest id."""
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        el = f"-{self.element}" if self.element else ""
        return f"{self.op}{el}-{'x'.join(map(str, self.shapes))}{'-' + attrs if attrs else ''}"


UNARY_SHAPES = list(UNARY_SHAPES)
BINARY_SHAPES = list(BINARY_SHAPES)
# the binary ops written here (the others declare their rows)
BINARY = ["relu_grad", "sigmoid_grad", "tanh_grad"]


def declared_cases(registry: dict) -> list[Case]:
    """The rows of every op of ``registry`` that declares its checks (``Op.checks.cases``)."""
    return [Case(name, shapes_, dict(attrs)) for name, op in sorted(registry.items())
            if op.checks is not None for shapes_, attrs in op.checks.cases]


def _cases() -> list[Case]:
    cases: list[Case] = declared_cases(gtensor.REGISTRY)
    for op in BINARY:
        cases += [Case(op, pair) for pair in BINARY_SHAPES]
    for op in ("adds", "muls"):
        for s in UNARY_SHAPES:
            cases += [Case(op, (s,), {"s": 0.75}), Case(op, (s,), {"s": -3.0e-3})]
    for op in ("sum", "mean"):
        for s in [(), (7,), (3, 5), (2, 3, 4), (1, 1), (13,), (0, 3)]:
            cases.append(Case(op, (s,)))
            for ax in range(len(s)):
                cases.append(Case(op, (s,), {"axis": ax}))
            if len(s) >= 2:
                cases.append(Case(op, (s,), {"axis": -1, "keepdims": True}))
                cases.append(Case(op, (s,), {"keepdims": True}))
            if len(s) == 3:  # several axes (batch norm's (N, H, W)): row-major over them
                cases.append(Case(op, (s,), {"axis": (0, 2), "keepdims": True}))
                cases.append(Case(op, (s,), {"axis": (-1, -2)}))
    for x, target in [((3, 5), (5,)), ((3, 5), (1, 5)), ((3, 5), (3, 1)), ((3, 5), ()),
                      ((2, 3, 4), (3, 1)), ((2, 3, 4), (2, 1, 4)), ((2, 3, 4), (1, 3, 1)),
                      ((7,), (7,)), ((1, 1), (1,)), ((13,), (1,))]:
        cases.append(Case("sum_to", (x,), {"shape": target}))
    for a, b in [((1, 1), (1, 1)), ((3, 5), (5, 2)), ((1, 7), (7, 1)), ((4, 1), (1, 3)),
                 ((2, 13), (13, 3)), ((3, 0), (0, 2))]:
        cases.append(Case("matmul", (a, b)))
        cases.append(Case("matmul", (a, b), {"inner": "fma"}))
    for a, b in [((1, 1, 1), (1, 1, 1)), ((2, 3, 4), (2, 4, 5)), ((3, 1, 7), (3, 7, 2))]:
        cases.append(Case("bmm", (a, b)))
        cases.append(Case("bmm", (a, b), {"inner": "fma"}))
    # operands read transposed in place (ta / tb): op(a) @ op(b)
    for op, a, b, ta, tb in [("matmul", (5, 3), (5, 2), True, False),
                             ("matmul", (3, 5), (2, 5), False, True),
                             ("matmul", (13, 2), (3, 13), True, True),
                             ("matmul", (0, 3), (2, 0), True, True),
                             # leading axes folded into rows: a (..., m, k) @ op(b), and
                             # fold(a)^T @ fold(b) (a linear layer's weight gradient)
                             ("matmul", (2, 3, 5), (5, 4), False, False),
                             ("matmul", (2, 1, 3, 5), (4, 5), False, True),
                             ("matmul", (2, 3, 5), (2, 3, 4), True, False),
                             ("matmul", (3, 5), (1, 3, 4), True, False),
                             ("matmul", (0, 3, 5), (0, 4), True, False),
                             ("matmul", (2, 0, 5), (5, 4), False, False),
                             ("bmm", (2, 4, 3), (2, 4, 5), True, False),
                             ("bmm", (3, 1, 7), (3, 2, 7), False, True),
                             ("bmm", (2, 4, 3), (2, 5, 4), True, True)]:
        for inner in INNER:
            cases.append(Case(op, (a, b), {"inner": inner, "ta": ta, "tb": tb}))
    for s, axes in [((3, 5), None), ((1, 7), None), ((2, 3, 4), (0, 2, 1)),
                    ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), None), ((7,), None)]:
        cases.append(Case("transpose", (s,), {} if axes is None else {"axes": axes}))
    for s, new in [((3, 5), (5, 3)), ((2, 3, 4), (6, 4)), ((12,), (2, -1, 3)), ((), (1, 1)),
                   ((1, 1), ())]:
        cases.append(Case("reshape", (s,), {"shape": new}))
    for s, axis, a, b in [((7,), 0, 2, 5), ((3, 5), 1, 1, 4), ((3, 5), 0, 0, 1),
                          ((2, 3, 4), 2, 1, 3), ((2, 3, 4), 1, -2, 3), ((3, 5), 1, 2, 2)]:
        cases.append(Case("slice", (s,), {"axis": axis, "start": a, "stop": b}))
    for s, axis, a, b in [((7,), 0, 2, 1), ((3, 5), 1, 1, 0), ((2, 3, 4), 0, 1, 2),
                          ((1, 1), 1, 0, 3)]:
        cases.append(Case("pad", (s,), {"axis": axis, "before": a, "after": b}))
    for shapes_, axis in [(((3, 2), (3, 5)), 1), (((1, 4), (2, 4), (3, 4)), 0),
                          (((7,),), 0), (((2, 3, 1), (2, 3, 2)), 2), (((2, 1, 4), (2, 2, 4)), -2)]:
        cases.append(Case("concat", shapes_, {"axis": axis}))
    for s in [(), (7,), (3, 5), (2, 3, 4), (0, 3)]:
        cases.append(Case("copy", (s,)))
    for s, v in [((), 1.0), ((7,), -0.0), ((3, 5), 0.1), ((2, 3, 4), float("nan")),
                 ((0, 3), 2.0), ((5,), float("-inf")), ((4,), 1e-40)]:
        cases.append(Case("fill", (), {"shape": s, "value": v}))
    for op, coef in (("adam_m", 0.9), ("adam_v", 0.999), ("sgd_p", 0.05)):
        for s in [(), (7,), (3, 5)]:
            for clip, alpha in [(False, 0.0), (True, 0.0), (False, 1e-3), (True, 3e-2)]:
                key = "lr" if op == "sgd_p" else "beta"
                cases.append(Case(op, (s, s, s, ()), {key: coef, "alpha": alpha, "clip": clip}))
    for s in [(), (7,), (3, 5)]:
        cases.append(Case("adam_p", (s, s, s, ()), {"eps": 1e-8}))
    for s, target in [((5,), (3, 5)), ((3, 1), (3, 5)), ((), (2, 3)), ((1, 4), (2, 3, 4)),
                      ((7,), (7,))]:
        cases.append(Case("broadcast_to", (s,), {"shape": target}))
    for op, n in (("softmax", 1), ("softmax_grad", 2)):
        for s, axis in [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -1),
                        ((1, 1), 0), ((2, 300), 1), ((4, 1), 1)]:
            cases.append(Case(op, (s,) * n, {"axis": axis}))
    cases += _typed_cases()
    cases += _conv_cases()
    # the movement ops on int64 and bool data (ANY inputs): every float row again, typed
    cases += [dataclasses.replace(c, element=el, id_range=(-2**63, 2**63 - 1))
              for c in list(cases) if c.op in ANY_MOVES for el in ("int64", "bool")]
    # the comparisons on int64 data (NUMBER inputs; ties drawn often from a small range)
    cases += [dataclasses.replace(c, element="int64", id_range=(-3, 3))
              for c in list(cases) if c.op in COMPARES and not c.element]
    return cases


COMPARES = ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal")


ANY_MOVES = ("copy", "transpose", "reshape", "slice", "concat", "broadcast_to")


def _conv_out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _pool_out(size: int, k: int, s: int, p: int, d: int = 1, ceil: bool = False) -> int:
    room = size + 2 * p - d * (k - 1) - 1
    o = (-(-room // s) if ceil else room // s) + 1
    return o - 1 if ceil and (o - 1) * s >= size + p else o


def _two(v) -> tuple:
    return v if isinstance(v, tuple) else (v, v)


def _conv_cases() -> list[Case]:
    """Rows of conv2d, its gradients (both inner-product contracts) and the pools: strides,
    paddings, dilations, groups (depthwise too), odd sizes, 1x1, a kernel wider than the input
    (padding), an empty batch; pools with padding, dilation, ceil mode and count_include_pad;
    adaptive pools (global, uneven windows)."""
    cases: list[Case] = []
    for (n, c, h, w), (o, kh, kw), stride, padding, dilation, groups in [
            ((2, 3, 5, 5), (4, 3, 3), 1, 0, 1, 1), ((1, 2, 6, 7), (3, 3, 3), 1, 1, 1, 1),
            ((2, 1, 7, 6), (2, 3, 2), 2, 1, 1, 1), ((1, 2, 4, 4), (2, 1, 1), 1, 0, 1, 1),
            ((1, 1, 5, 4), (1, 2, 3), (2, 1), (0, 2), 1, 1), ((1, 2, 3, 3), (2, 3, 3), 3, 2, 1, 1),
            ((0, 2, 4, 4), (3, 3, 3), 1, 1, 1, 1), ((2, 1, 2, 2), (3, 4, 3), 1, (1, 2), 1, 1),
            ((1, 4, 6, 6), (6, 3, 3), 1, 1, 1, 2), ((2, 3, 5, 6), (3, 3, 3), (1, 2), 1, 1, 3),
            ((1, 2, 7, 7), (2, 3, 2), 1, 2, (2, 3), 1), ((1, 4, 8, 7), (8, 3, 3), 2, 2, 2, 4)]:
        (sh, sw), (ph, pw), (dh, dw) = _two(stride), _two(padding), _two(dilation)
        gs = (n, o, _conv_out(h, kh, sh, ph, dh), _conv_out(w, kw, sw, pw, dw))
        wshape = (o, c // groups, kh, kw)
        geo = {"stride": stride, "padding": padding}
        if dilation != 1 or groups != 1:
            geo = {**geo, "dilation": dilation, "groups": groups}
        for at in (geo, {**geo, "inner": "fma"}):
            cases.append(Case("conv2d", ((n, c, h, w), wshape), at))
            cases.append(Case("conv2d_grad_weight", (gs, (n, c, h, w)),
                              {**at, "kernel": (kh, kw)}))
            cases.append(Case("conv2d_grad_input", (gs, wshape), {**at, "size": (h, w)}))
    for x, kernel, stride, more in [
            ((2, 3, 4, 4), 2, None, {}), ((1, 2, 5, 7), 3, 2, {}), ((1, 1, 5, 5), 3, 1, {}),
            ((2, 1, 6, 5), (2, 3), (1, 2), {}), ((1, 2, 3, 3), 3, None, {}),
            ((1, 1, 4, 6), 1, 2, {}), ((1, 2, 5, 5), 3, 2, {"padding": 1}),
            ((2, 1, 7, 6), (3, 2), 2, {"padding": (1, 1), "ceil_mode": True}),
            ((1, 2, 5, 4), 2, 2, {"padding": 1, "ceil_mode": True})]:
        k, at = _two(kernel), {"kernel": kernel, "stride": stride, **more}
        s = k if stride is None else _two(stride)
        p, ceil = _two(more.get("padding", 0)), more.get("ceil_mode", False)
        y = x[:2] + (_pool_out(x[2], k[0], s[0], p[0], 1, ceil),
                     _pool_out(x[3], k[1], s[1], p[1], 1, ceil))
        for op, shapes_ in [("max_pool2d", (x,)), ("max_pool2d_grad", (y, x)),
                            ("max_pool2d_pick", (x, x)), ("avg_pool2d", (x,))]:
            cases.append(Case(op, shapes_, at))
        cases.append(Case("avg_pool2d_grad", (y,), {**at, "size": x[2:]}))
        if more:
            off = {**at, "count_include_pad": False}
            cases.append(Case("avg_pool2d", (x,), off))
            cases.append(Case("avg_pool2d_grad", (y,), {**off, "size": x[2:]}))
    for x, kernel, stride, padding, dilation, ceil in [
            ((1, 2, 7, 7), 3, 1, 1, 2, False),
            ((2, 1, 6, 7), (2, 3), (2, 1), (1, 0), (2, 1), True)]:
        k, (s, p, d) = _two(kernel), (_two(stride), _two(padding), _two(dilation))
        y = x[:2] + (_pool_out(x[2], k[0], s[0], p[0], d[0], ceil),
                     _pool_out(x[3], k[1], s[1], p[1], d[1], ceil))
        at = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation,
              "ceil_mode": ceil}
        for op, shapes_ in [("max_pool2d", (x,)), ("max_pool2d_grad", (y, x)),
                            ("max_pool2d_pick", (x, x))]:
            cases.append(Case(op, shapes_, at))
    for x, out in [((2, 3, 4, 4), 1), ((1, 2, 7, 5), (3, 2)), ((1, 1, 5, 6), (5, 4)),
                   ((0, 2, 3, 3), 2)]:
        o = _two(out)
        cases.append(Case("adaptive_avg_pool2d", (x,), {"output_size": out}))
        cases.append(Case("adaptive_avg_pool2d_grad", (x[:2] + o,), {"size": x[2:]}))
    return cases


def _typed_cases() -> list[Case]:
    """Rows of the selection, comparison and index ops (typed inputs)."""
    cases: list[Case] = []
    for op in ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal"):
        cases += [Case(op, pair) for pair in BINARY_SHAPES]
    # int64 sums over the whole range (hypothesis reaches the edges: sums that wrap)
    cases += [Case("add_int", pair, id_range=(-2**63, 2**63 - 1)) for pair in BINARY_SHAPES]
    for shapes_ in [((), (), ()), ((7,), (7,), (7,)), ((3, 5), (3, 5), (3, 5)),
                    ((3, 1), (1, 5), (3, 5)), ((3, 5), (), (5,)), ((2, 3, 4), (3, 1), (4,)),
                    ((1,), (13,), (1,)), ((0, 3), (3,), (0, 3))]:
        cases.append(Case("where", shapes_))
    for x, ids, axis in [((5, 3), (4,), 0), ((5, 3), (2, 3), 0), ((4, 6), (7,), 1),
                         ((2, 3, 4), (5,), 1), ((7,), (), 0), ((5,), (0,), 0), ((3, 2), (9,), 0)]:
        n = x[axis]
        cases.append(Case("take", (x, ids), {"axis": axis}, id_range=(-n, n - 1)))
        g = x[:axis] + ids + x[axis + 1:]
        cases.append(Case("take_grad", (g, ids), {"n": n, "axis": axis}, id_range=(-n, n - 1)))
    for x, k, axis, ignore in [((4, 5), 1, -1, None), ((4, 5), 1, -1, 2), ((3, 6), 4, 1, None),
                               ((2, 3, 4), 2, 1, None), ((5, 2), 3, 0, None), ((1, 1), 1, 1, 0),
                               ((6, 3), 1, 1, -100)]:
        n = x[axis]
        ids = x[:axis] + (k,) + x[axis + 1:] if axis >= 0 else x[:-1] + (k,)
        ax = axis % len(x)
        hi = n - 1
        cases.append(Case("take_along_axis", (x, ids), {"axis": axis, "ignore": ignore},
                          id_range=(-n, hi)))
        cases.append(Case("take_along_axis_grad", (ids, ids),
                          {"n": n, "axis": ax, "ignore": ignore}, id_range=(-n, hi)))
    for s, axis in [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((1, 1), -1),
                    ((2, 300), 1)]:
        cases.append(Case("argmax", (s,), {"axis": axis}))
    for s, ignore in [((7,), 3), ((3, 5), -1), ((0,), 0), ((), 1)]:
        cases.append(Case("index_weight", (s,), {"ignore": ignore}, id_range=(-1, 4)))
    cases += _random_cases()
    for op, n in (("log_softmax", 1), ("log_softmax_grad", 2), ("logsumexp", 1)):
        for s, axis in [((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -1),
                        ((1, 1), 0), ((2, 300), 1), ((4, 1), 1)]:
            cases.append(Case(op, (s,) * n, {"axis": axis}))
    return cases


KEY_RANGE = (-(2**63), 2**63 - 1)  # a Philox key's two words: any int64 bit patterns


def _random_cases() -> list[Case]:
    """Rows of the random ops (gtensor.ops.random): the key input is any int64 pair."""
    cases: list[Case] = []
    for shape in [(), (7,), (3, 5), (2, 3, 4), (0, 3), (1,), (257,)]:
        for op in ("rng_bits", "rng_uniform", "rng_normal"):
            cases.append(Case(op, ((2,),), {"shape": shape}, id_range=KEY_RANGE))
    for i in (0, 1, 12345, 2**63 + 5, 2**64 - 1):
        cases.append(Case("rng_fold", ((2,),), {"i": i}, id_range=KEY_RANGE))
    for s, p in [((7,), 0.5), ((3, 5), 0.0), ((3, 5), 0.25), ((2, 3, 4), 0.9), ((0, 3), 0.5),
                 ((), 0.5), ((65,), 1e-300), ((40,), 0.999999)]:
        cases.append(Case("dropout", (s, (2,)), {"p": p}, id_range=KEY_RANGE))
    # the fused attention and its backward: odd T (dropout windows off Philox's 4-word
    # blocks), T past one 32-element window, D = 1 and 0, an empty batch, a negative scale
    for (b, t, h, d), attrs in [((2, 5, 3, 4), {"causal": True, "p": 0.3}),
                                ((1, 7, 2, 3), {"causal": False, "p": 0.0}),
                                ((2, 8, 1, 5), {"causal": True, "p": 0.0, "inner": "fma"}),
                                ((1, 33, 2, 3), {"causal": True, "p": 0.5}),
                                ((1, 6, 2, 2), {"causal": False, "p": 0.25, "inner": "fma",
                                                "scale": -0.75}),
                                ((1, 1, 1, 1), {"causal": True, "p": 0.9}),
                                ((0, 4, 2, 3), {"causal": True, "p": 0.1}),
                                ((1, 3, 2, 0), {"causal": False, "p": 0.2})]:
        attrs = {"scale": 1.0 / max(d, 1) ** 0.5, **attrs}
        cases.append(Case("qkv_attention", ((b, t, 3, h, d), (2,)), attrs, id_range=KEY_RANGE))
        cases.append(Case("qkv_attention_grad", ((b, t, h, d), (b, t, 3, h, d), (2,)), attrs,
                          id_range=KEY_RANGE))
    # layer_norm's rows after the mean: the backward helper (ln_normalize declares its rows)
    # (15 and 22 rows: the cpu kernels' rows 8 at a time, then 4, 2 and 1 at a time)
    for s in [(7,), (3, 5), (2, 3, 4), (1, 1), (4, 1), (2, 13), (0, 3), (3, 0), (15, 6),
              (2, 11, 3)]:
        for eps in (1e-5, 0.0):
            cases.append(Case("ln_normalize_grad", (s, s, (*s[:-1], 1)), {"eps": eps}))
    # batch_norm's channels after the mean: the backward helpers (of x; with the affine, of x
    # and of w) and the running variance's sums of squares (bn_normalize and bn_affine declare
    # their rows)
    # (8 and 11 channels with 19 / 16 positions: the cpu kernels' 8-lane chains, 8 positions
    # at a time and the rest one at a time)
    for s in [(2, 3), (3, 2, 5), (2, 3, 2, 3), (1, 1), (4, 1), (2, 9, 4), (0, 3), (2, 0, 3),
              (2, 3, 0), (2, 8, 19), (3, 11, 4, 4)]:
        stat = (1, s[1]) + (1,) * (len(s) - 2)
        for eps in (1e-5, 0.0):
            cases.append(Case("bn_normalize_grad", (s, s), {"eps": eps}))
            cases.append(Case("bn_affine_grad", (s, s, (s[1],)), {"eps": eps}))
            cases.append(Case("bn_weight_grad", (s, s), {"eps": eps}))
        cases.append(Case("bn_sum_squares", (s, stat), {}))
    return cases


CASES = _cases()

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, 2.0, 1e-300, -1e-300,
            5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
            -1.7976931348623157e308,
            1e10, -1e10, 700.0, -700.0, 710.0, -746.0, 88.0, -104.0, 20.0, -20.0, 1e-8, 3e-39,
            1.0000001, 0.9999999]


def elements(dtype: np.dtype) -> st.SearchStrategy:
    """Float values of ``dtype``: specials (+-0, inf, nan, subnormals, edges) and ordinary ones."""
    width = 64 if dtype == np.float64 else 32
    with np.errstate(over="ignore"):
        specials = sorted({float(dtype.type(v)) for v in SPECIALS if not np.isnan(v)}) + [np.nan]
    return st.one_of(
        st.sampled_from(specials),
        st.floats(-4.0, 4.0, width=width),
        st.floats(width=width, allow_nan=True, allow_infinity=True, allow_subnormal=True),
    )


def arrays(dtype: np.dtype, shape: tuple) -> st.SearchStrategy:
    """Arrays of ``shape`` filled from ``elements``."""
    return hnp.arrays(dtype, shape, elements=elements(np.dtype(dtype)))


def case_inputs(case: Case, dtype: np.dtype) -> list[st.SearchStrategy]:
    """One strategy per input of ``case``: floats of ``dtype``, int64 ids in the case's
    ``id_range``, bool masks, as the op declares its inputs."""
    import gtensor
    from gtensor import dtypes

    op = gtensor.REGISTRY[case.op]
    out = []
    for i, s in enumerate(case.shapes):
        kind = op.input_type(i)
        if kind in (dtypes.ANY, dtypes.NUMBER):
            kind = {"": dtypes.FLOAT, "int64": dtypes.INT, "bool": dtypes.BOOL}[case.element]
        if kind == dtypes.INT:
            lo, hi = case.id_range
            if case.attrs.get("ignore") is not None:
                ids = st.one_of(st.integers(lo, hi), st.just(case.attrs["ignore"]))
            else:
                ids = st.integers(lo, hi)
            out.append(hnp.arrays(np.int64, s, elements=ids))
        elif kind == dtypes.BOOL:
            out.append(hnp.arrays(np.bool_, s))
        else:
            out.append(arrays(np.dtype(dtype), s))
    return out


# --------------------------------------------------------------------------- oracles
def loop_sum(x: np.ndarray, axes: tuple, order: str = "C") -> np.ndarray:
    """Per kept slot, the serial sum of its positions in row-major (or column-major) order."""
    return loop_fold(x, axes, lambda a, b: a + b, 0.0, order)


def loop_fold(x: np.ndarray, axes: tuple, combine, empty: float,
              order: str = "C") -> np.ndarray:
    """Per kept slot, the serial fold ``acc = combine(acc, v)`` of its positions in row-major
    (or column-major) order, first element first, on numpy scalars; ``empty`` for a slot with
    no elements."""
    T = np.dtype(x.dtype).type
    kept = [i for i in range(x.ndim) if i not in axes]
    out = np.zeros([x.shape[i] for i in kept], x.dtype)
    rshape = [x.shape[i] for i in axes]
    for o in np.ndindex(*out.shape):
        acc = None
        for flat in range(int(np.prod(rshape))):
            r = np.unravel_index(flat, rshape, order=order)
            full = [0] * x.ndim
            for i, v in zip(kept, o):
                full[i] = v
            for i, v in zip(axes, r):
                full[i] = v
            v = T(x[tuple(full)])
            with np.errstate(all="ignore"):  # inf + -inf is NaN here as in the kernels
                acc = v if acc is None else combine(acc, v)
        out[o] = T(empty) if acc is None else acc
    return out
