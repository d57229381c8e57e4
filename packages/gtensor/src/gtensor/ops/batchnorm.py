"""bn_normalize: batch normalisation's channels (their batch statistics included) as one op,
its backward, and the channels' sums of squares; bn_affine: the same with the per-channel
affine, and its backward's two ops.

The whole op in one file: the numpy references (written with the other ops' references), the
CUDA and cpu kernels, the launch and the backward rule. It is gtape's ``batch_norm`` composite
in training (batch statistics), bit for bit. x has shape (N, C, *S) (N examples, C channels,
S the positions: (), (L,) or (H, W)); a channel's n = N * prod(S) values are taken in
row-major order over (N, *S)::

    mu  = (x_0 + x_1 + ... + x_{n-1}) / n     (the ``mean`` op's: a serial sum, first value
                                               first, / n once; n rounded once to the dtype)
    d   = x - mu
    ss  = d_0 * d_0 + d_1 * d_1 + ... + d_{n-1} * d_{n-1}     (a serial sum, first value first)
    var = ss / n
    sd  = sqrt(var + eps)          (eps rounded once to the dtype; sqrt correctly rounded)
    r   = 1 / sd
    y   = d * r

every operation one IEEE operation in the dtype. ``bn_sum_squares(x, mu)`` is ss alone for a
given mu (the ``mean`` op's), shaped as mu (what the running variance's update reads; no
gradient). ``bn_normalize_grad(g, x)`` is the composite's gradient of x for an upstream g of
y, in the order the tape's backward computes it (recomputing mu, d, ss, sd and r from x)::

    gr  = g_0 * d_0 + g_1 * d_1 + ...          (mul's rule for r, then sum_to: a serial sum)
    ga  = gr / sd;  gsd = -(ga * r)            (div's rule for 1 / sd)
    gve = gsd / (sd + sd)                      (sqrt's rule; adds passes it to var)
    gss = gve / n                              (div's rule for ss / n)
    gd  = ((g * r) + (gss * d)) + (gss * d)    (d's contributions in the tape's arrival order:
                                                y's product, then d * d's two inputs)
    gmu = (-gd_0) + (-gd_1) + ...              (sub's rule for mu, then sum_to: a serial sum)
    gx  = gd + gmu * (1 / n)                   (x's two contributions in arrival order: d's,
                                                then the mean's rule, 1 / n rounded once)

``bn_affine(x, w, b)`` is ``bn_normalize(x) * w + b`` with w and b of shape (C,): the
element ``y = ((d * r) * w[c]) + b[c]``, the product rounded, then the sum (the composite's
``mul`` and ``add``, never a fused multiply-add). Its rule gives x's gradient as
``bn_affine_grad(g, x, w)`` = ``bn_normalize_grad(g * w, x)`` (each ``g * w`` rounded once, in
the pass: the composite's ``mul`` of the upstream by the weight), w's as ``bn_weight_grad(g,
x)``::

    gw  = (g_0 * xhat_0) + (g_1 * xhat_1) + ...   (a serial sum over (n, s), xhat = d * r
                                                    recomputed from x as the forward rounds it)

and b's as ``sum_to(g)``: the composite's gradients, bit for bit.

Under a differentiating backend (``create_graph``) the rule records the same computation op by
op instead (``composite_grad``: the same bits, differentiable again); ``bn_normalize_grad``
itself has no rule. ``layernorm.py`` is the same computation over rows of the last axis after
a separate ``mean`` (its var a mean: the gradient's 1 / n a product there).

Kernels: a channel's statistics are one thread's serial chains (a device block's thread 0; on
the cpu, channels split across threads and CH_LANES channels' chains side by side, each chain
in its own order), its elements in parallel.
"""

from __future__ import annotations

import re
from math import prod
from string import Template

import numpy as np

from .. import dtypes
from ..dtypes import FloatType, round_scalar
from ..kernels import Kernel, Kind, params
from .checks import ANY, Checks
from .elementwise import ADD, DIV, MUL, NEG, SQRT, SUB, of
from .forms import MAX_ROW_BLOCKS, ROW_ELEMENT_COST, ROW_THREADS, Opaque, split_cost
from .layernorm import check_eps
from .reduce import serial_sum
from .registry import Op, register

CHANNELS = Opaque("channels", "per channel serial sums over the batch and positions, the "
                  "channel's values C * S apart: the batch-norm kernels' own walk")

# Channels c0 .. c0 + G - 1 (G a compile-time constant): m[k] ($MEAN: read from mu, or the
# mean's serial chain), then ss[k], each chain over (n, s) in row-major order, first value
# first; the backward's gr[k] (sum of g * d) in ss's pass, its own chains in the same order
# ($GR_* empty in the forward)
_MU_IN = "    for (int k = 0; k < G; ++k) m[k] = mu[c0 + k];\n"
_MU_CHAIN = """\
    for (int k = 0; k < G; ++k) m[k] = x[(c0 + k) * S];
    for (long long n0 = 0; n0 < N; ++n0) {
        const $T* xn = x + (n0 * C + c0) * S;
        for (long long q = n0 == 0 ? 1 : 0; q < S; ++q)
            for (int k = 0; k < G; ++k) m[k] = $ADD(m[k], xn[k * S + q]);
    }
    for (int k = 0; k < G; ++k) m[k] = $DIV(m[k], n);
"""
_CHAINS = Template("""\
    $$T m[G], ss[G]$GR_DECL;
$MEAN    for (int k = 0; k < G; ++k) {
        const $$T d = $$SUB(x[(c0 + k) * S], m[k]);
        ss[k] = $$MUL(d, d);$GR_FIRST
    }
    for (long long n0 = 0; n0 < N; ++n0) {
        const $$T* xn = x + (n0 * C + c0) * S;$GR_ROW
        for (long long q = n0 == 0 ? 1 : 0; q < S; ++q)
            for (int k = 0; k < G; ++k) {
                const $$T d = $$SUB(xn[k * S + q], m[k]);
                ss[k] = $$ADD(ss[k], $$MUL(d, d));$GR_STEP
            }
    }
""")
_NO_GR = {"GR_DECL": "", "GR_FIRST": "", "GR_ROW": "", "GR_STEP": ""}
_SUMSQ = _CHAINS.substitute(MEAN=_MU_IN, **_NO_GR)
_GR_CHAINS_SUBS = {
    "GR_DECL": ", gr[G]", "GR_FIRST": "\n        gr[k] = $MUL(g[(c0 + k) * S], d);",
    "GR_ROW": "\n        const $T* gn = g + (n0 * C + c0) * S;",
    "GR_STEP": "\n                gr[k] = $ADD(gr[k], $MUL(gn[k * S + q], d));"}
_GR_CHAINS = _CHAINS.substitute(MEAN=_MU_CHAIN, **_GR_CHAINS_SUBS)
# then sd and r
_SD = """\
    $T sd[G], rr[G];
    for (int k = 0; k < G; ++k) {
        sd[k] = $SQRT($ADD($DIV(ss[k], n), eps));
        rr[k] = $DIV(($T)1, sd[k]);
    }
"""
_STATS = _CHAINS.substitute(MEAN=_MU_CHAIN, **_NO_GR) + _SD
# the backward's: the chains, sd and r, then gss
_GRAD_GSS = """\
    $T gss[G];
    for (int k = 0; k < G; ++k)
        gss[k] = $DIV($DIV($NEG($MUL($DIV(gr[k], sd[k]), rr[k])), $ADD(sd[k], sd[k])), n);
"""
_GRAD_STATS = _GR_CHAINS + _SD + _GRAD_GSS
# the backward's mean rule after gd is in out: gmu[k], the serial sum of -gd over (n, s)
# (first value first), times 1 / n
_GMU_CHAIN = """\
    $T gmu[G];
    for (int k = 0; k < G; ++k) gmu[k] = $NEG(out[(c0 + k) * S]);
    for (long long n0 = 0; n0 < N; ++n0) {
        const $T* on = out + (n0 * C + c0) * S;
        for (long long q = n0 == 0 ? 1 : 0; q < S; ++q)
            for (int k = 0; k < G; ++k) gmu[k] = $ADD(gmu[k], $NEG(on[k * S + q]));
    }
    for (int k = 0; k < G; ++k) gmu[k] = $MUL(gmu[k], inv_n);
"""
# one element e of channel k: the forward's y, the backward's out
_Y = "y[e] = $MUL($SUB(x[e], m[k]), rr[k]);"
_Y_AFFINE = "y[e] = $ADD($MUL($MUL($SUB(x[e], m[k]), rr[k]), aw[c0 + k]), ab[c0 + k]);"
_GD = ("{ const $T d = $SUB(x[e], m[k]); "
       "out[e] = $ADD($ADD($MUL(g[e], rr[k]), $MUL(gss[k], d)), $MUL(gss[k], d)); }")
_GX = "out[e] = $ADD(out[e], gmu[k]);"

# bn_weight_grad, after the statistics: gw[k], the serial sum over (n, s) in row-major order
# (first value first) of g * xhat, xhat = (x - m) * r as the forward rounds it
_GW_CHAIN = """\
    $T gw[G];
    for (int k = 0; k < G; ++k)
        gw[k] = $MUL(g[(c0 + k) * S], $MUL($SUB(x[(c0 + k) * S], m[k]), rr[k]));
    for (long long n0 = 0; n0 < N; ++n0) {
        const $T* xn = x + (n0 * C + c0) * S;
        const $T* gn = g + (n0 * C + c0) * S;
        for (long long q = n0 == 0 ? 1 : 0; q < S; ++q)
            for (int k = 0; k < G; ++k)
                gw[k] = $ADD(gw[k], $MUL(gn[k * S + q], $MUL($SUB(xn[k * S + q], m[k]), rr[k])));
    }
"""
# bn_affine_grad: bn_normalize_grad's texts with g read as g * w (each product rounded: the
# composite's mul(g, w) before the normalisation's rule), scalar text -> affine text
_AFFINE_G = (("g[(c0 + k) * S]", "$MUL(g[(c0 + k) * S], aw[c0 + k])"),
             ("gn[k * S + q]", "$MUL(gn[k * S + q], aw[c0 + k])"),
             ("$MUL(g[e], rr[k])", "$MUL($MUL(g[e], aw[c0 + k]), rr[k])"))

# CUDA / sim: a block per channel (grid-stride), thread 0 its statistics (G = 1), then the
# block's threads over its elements ($AFTER: the backward's mean rule, thread 0's chain over
# the written gd, then a second pass)
_CUDA = Template("""\
$SHARED    const int t = threadIdx.x, nt = blockDim.x;
    const long long NS = N * S;
    for (long long c0 = blockIdx.x; c0 < C; c0 += gridDim.x) {
        if (t == 0) {
$STATS$PUBLISH        }
        __syncthreads();
$READ        for (long long j = t; j < NS; j += nt) {
            const long long e = (j / S * C + c0) * S + j % S;
            $ELEMENT
        }
        __syncthreads();
$AFTER    }""")
_CUDA_GMU = Template("""\
        if (t == 0) {
$GMU            gmu_s = gmu[0];
        }
        __syncthreads();
        {
            const $$T gmu[1] = {gmu_s};
            for (long long j = t; j < NS; j += nt) {
                const long long e = (j / S * C + c0) * S + j % S;
                $$GX
            }
        }
        __syncthreads();
""")
# the sums of squares (the weight gradient): thread 0 alone
_CUDA_SUMSQ = Template("""\
    const int t = threadIdx.x;
    for (long long c0 = blockIdx.x; c0 < C; c0 += gridDim.x) {
        if (t == 0 && N * S == 0) {  // no values: +0.0
            y[c0] = ($T)0;
        } else if (t == 0) {
$STATS            y[c0] = $OUT[0];
        }
    }""")

CH_LANES = 8  # channels whose chains a cpu thread runs side by side
# cpu, CH_LANES channels: their chains as one vector of 8 lanes (each lane one channel's
# chain, every step the scalar text's IEEE operation, lane by lane), the channels' values
# read 8 positions at a time (8 loads, one a channel, then an 8 x 8 transpose: the scalar
# text's 8 strided loads a step were its cost); positions left over one at a time
_CPU_LANES = """\
    typedef typename gtcpu::Vec<$T, 8>::type V8;
    typedef typename std::conditional<sizeof($T) == 8, long long, int>::type I8;
    typedef I8 M8 __attribute__((vector_size(8 * sizeof($T))));
    // the 8 channels' values at position q (p: the first channel's, S apart)
    auto gather8 = [=](const $T* p, long long q) {
        V8 v;
        for (int k = 0; k < 8; ++k) v[k] = p[k * S + q];
        return v;
    };
    // w[j][k] = p[k * S + q + j]: positions q .. q + 7 of the 8 channels, transposed
    auto block8 = [=](const $T* p, long long q, V8* w) {
        V8 r[8], t[8], u[8];
        for (int k = 0; k < 8; ++k) r[k] = gtcpu::vload<V8>(p + k * S + q);
        const M8 lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
        const M8 lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
        const M8 lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
        for (int k = 0; k < 8; k += 2) {
            t[k] = __builtin_shuffle(r[k], r[k + 1], lo);
            t[k + 1] = __builtin_shuffle(r[k], r[k + 1], hi);
        }
        for (int k = 0; k < 8; k += 4) {
            u[k] = __builtin_shuffle(t[k], t[k + 2], lo2);
            u[k + 1] = __builtin_shuffle(t[k], t[k + 2], hi2);
            u[k + 2] = __builtin_shuffle(t[k + 1], t[k + 3], lo2);
            u[k + 3] = __builtin_shuffle(t[k + 1], t[k + 3], hi2);
        }
        for (int j = 0; j < 4; ++j) {
            w[j] = __builtin_shuffle(u[j], u[j + 4], lo4);
            w[j + 4] = __builtin_shuffle(u[j], u[j + 4], hi4);
        }
    };
    // f(w) for every position of every image from (n0, q) = (0, 1) on, in order (p: x, g or
    // out at channel c0), w the 8 channels' values there; walk8x2's f(w, w2) over two arrays
    auto walk8 = [=](const $T* p, long long c0, auto f) {
        for (long long n0 = 0; n0 < N; ++n0) {
            const $T* pn = p + (n0 * C + c0) * S;
            long long q = n0 == 0 ? 1 : 0;
            for (; q + 8 <= S; q += 8) {
                V8 w[8];
                block8(pn, q, w);
                for (int j = 0; j < 8; ++j) f(w[j]);
            }
            for (; q < S; ++q) f(gather8(pn, q));
        }
    };
    auto walk8x2 = [=](const $T* p, const $T* p2, long long c0, auto f) {
        for (long long n0 = 0; n0 < N; ++n0) {
            const $T* pn = p + (n0 * C + c0) * S;
            const $T* pn2 = p2 + (n0 * C + c0) * S;
            long long q = n0 == 0 ? 1 : 0;
            for (; q + 8 <= S; q += 8) {
                V8 w[8], w2[8];
                block8(pn, q, w);
                block8(pn2, q, w2);
                for (int j = 0; j < 8; ++j) f(w[j], w2[j]);
            }
            for (; q < S; ++q) f(gather8(pn, q), gather8(pn2, q));
        }
    };
"""
# the chains of ``_MU_CHAIN``, ``_CHAINS`` (ss, gr) and ``_GMU_CHAIN`` on 8 lanes
_MU_CHAIN8 = """\
    V8 mv = gather8(x + c0 * S, 0);
    walk8(x, c0, [&](V8 w) { mv = mv + w; });
    mv = mv / n;
    for (int k = 0; k < 8; ++k) m[k] = mv[k];
"""
_SS_CHAIN8 = """\
    {
        V8 mv, sv;
        for (int k = 0; k < 8; ++k) mv[k] = m[k];
        const V8 d0 = gather8(x + c0 * S, 0) - mv;
        sv = d0 * d0;
        walk8(x, c0, [&](V8 w) {
            const V8 d = w - mv;
            sv = sv + d * d;
        });
        for (int k = 0; k < 8; ++k) ss[k] = sv[k];
    }
"""
_SS_GR_CHAIN8 = """\
    {
        V8 mv, sv, gv;
        for (int k = 0; k < 8; ++k) mv[k] = m[k];
        const V8 d0 = gather8(x + c0 * S, 0) - mv;
        sv = d0 * d0;
        gv = gather8(g + c0 * S, 0) * d0;
        walk8x2(x, g, c0, [&](V8 w, V8 w2) {
            const V8 d = w - mv;
            sv = sv + d * d;
            gv = gv + w2 * d;
        });
        for (int k = 0; k < 8; ++k) {
            ss[k] = sv[k];
            gr[k] = gv[k];
        }
    }
"""
_GW_CHAIN8 = """\
    $T gw[G];
    {
        V8 mv, rv;
        for (int k = 0; k < 8; ++k) {
            mv[k] = m[k];
            rv[k] = rr[k];
        }
        V8 gv = gather8(g + c0 * S, 0) * ((gather8(x + c0 * S, 0) - mv) * rv);
        walk8x2(x, g, c0, [&](V8 w, V8 w2) { gv = gv + w2 * ((w - mv) * rv); });
        for (int k = 0; k < 8; ++k) gw[k] = gv[k];
    }
"""
_AFFINE_G8 = (("V8 mv, sv, gv;", "V8 mv, sv, gv, awv;\n"
               "        for (int k = 0; k < 8; ++k) awv[k] = aw[c0 + k];"),
              ("gv = gather8(g + c0 * S, 0) * d0;", "gv = (gather8(g + c0 * S, 0) * awv) * d0;"),
              ("gv = gv + w2 * d;", "gv = gv + (w2 * awv) * d;"))
_GMU_CHAIN8 = """\
    $T gmu[G];
    {
        V8 gv = -gather8(out + c0 * S, 0);
        walk8(out, c0, [&](V8 w) { gv = gv + (-w); });
        gv = gv * inv_n;
        for (int k = 0; k < 8; ++k) gmu[k] = gv[k];
    }
"""


def _eight(fast: str, scalar: str) -> str:
    """``fast`` for 8 channels (G == 8), else ``scalar``: the same bits."""
    return ("    if constexpr (G == 8) {\n" + _indent(fast, 4) + "    } else {\n"
            + _indent(scalar, 4) + "    }\n")
# cpu: channels split across threads; each thread's channels CH_LANES at a time (then 4, 2, 1)
_CPU = Template("""\
    gtcpu::parallel_for(C, N * S * $COST, [=](long long lo, long long hi) {
        auto channels = [&](long long c0, auto lanes) {
            constexpr int G = decltype(lanes)::value;
$STATS$ELEMENTS        };
        long long c = lo;
        for (; c + $L <= hi; c += $L) channels(c, std::integral_constant<int, $L>{});
        for (; c + 4 <= hi; c += 4) channels(c, std::integral_constant<int, 4>{});
        for (; c + 2 <= hi; c += 2) channels(c, std::integral_constant<int, 2>{});
        for (; c < hi; ++c) channels(c, std::integral_constant<int, 1>{});
    });""")
_CPU_ELEMENTS = """\
    for (long long n0 = 0; n0 < N; ++n0)
        for (int k = 0; k < G; ++k) {
            const long long e0 = (n0 * C + c0 + k) * S;
            for (long long e = e0; e < e0 + S; ++e) $ELEMENT
        }
"""
_CPU_SUMSQ_OUT = "    for (int k = 0; k < G; ++k) y[c0 + k] = ss[k];\n"
_CPU_GW_OUT = "    for (int k = 0; k < G; ++k) y[c0 + k] = gw[k];\n"
_CPU_SUMSQ_EMPTY = """\
    if (N * S == 0) {  // no values: +0.0
        for (long long c = 0; c < C; ++c) y[c] = ($T)0;
        return;
    }
"""

_GEOM = "long long N, long long C, long long S"
_SIGS = {"bn_normalize": f"const $T* x, $T* y, {_GEOM}, $T eps, $T n",
         "bn_normalize_grad": f"const $T* g, const $T* x, $T* out, {_GEOM}, $T eps, $T n, "
                              "$T inv_n",
         "bn_sum_squares": f"const $T* x, const $T* mu, $T* y, {_GEOM}",
         "bn_affine": f"const $T* x, const $T* aw, const $T* ab, $T* y, {_GEOM}, $T eps, $T n",
         "bn_affine_grad": f"const $T* g, const $T* x, const $T* aw, $T* out, {_GEOM}, $T eps, "
                           "$T n, $T inv_n",
         "bn_weight_grad": f"const $T* g, const $T* x, $T* y, {_GEOM}, $T eps, $T n"}
_CALLS = {"bn_normalize": (SUB, MUL, ADD, DIV, SQRT),
          "bn_normalize_grad": (SUB, MUL, ADD, DIV, SQRT, NEG),
          "bn_sum_squares": (SUB, MUL, ADD),
          "bn_affine": (SUB, MUL, ADD, DIV, SQRT),
          "bn_affine_grad": (SUB, MUL, ADD, DIV, SQRT, NEG),
          "bn_weight_grad": (SUB, MUL, ADD, DIV, SQRT)}
# the ops whose kernels end in one value per channel (thread 0's chains on the device)
_PER_CHANNEL = {"bn_sum_squares": ("ss", _CPU_SUMSQ_OUT), "bn_weight_grad": ("gw", _CPU_GW_OUT)}


def _indent(text: str, by: int) -> str:
    return "".join(" " * by + line if line.strip() else line
                   for line in text.splitlines(keepends=True))


def _one_lane(text: str) -> str:
    """A statistics text for one channel (G = 1 written out: the device text stays C99, which
    gemit's emitted functions compile as)."""
    return re.sub(r"\bG\b", "1", text)


def _affine_g(text: str, pairs: tuple) -> str:
    """bn_normalize_grad's ``text`` with g read as g * w (``pairs``: each replacement, every
    one found)."""
    for old, new in pairs:
        if old not in text:
            raise AssertionError(f"batchnorm: {old!r} not in the gradient's text")
        text = text.replace(old, new)
    return text


def _texts(name: str) -> tuple[str, str]:
    """(statistics, element statement) of an op's kernels, before the dtype's names."""
    if name == "bn_sum_squares":
        return _SUMSQ, ""
    if name == "bn_weight_grad":
        return _STATS + _GW_CHAIN, ""
    if name == "bn_normalize":
        return _STATS, _Y
    if name == "bn_affine":
        return _STATS, _Y_AFFINE
    if name == "bn_affine_grad":
        return _affine_g(_GRAD_STATS, _AFFINE_G[:2]), _affine_g(_GD, _AFFINE_G[2:])
    return _GRAD_STATS, _GD


def _cpu_chains(mean: str, grad: bool) -> str:
    """``_CHAINS``' text for the cpu: mean and ss (and gr) on 8 lanes when G == 8."""
    head, tail = _CHAINS.template.split("$MEAN")
    subs = _GR_CHAINS_SUBS if grad else _NO_GR
    head, tail = Template(head).substitute(subs), Template(tail).substitute(subs)
    first = _eight(_MU_CHAIN8, _MU_CHAIN) if mean == _MU_CHAIN else mean
    return head + first + _eight(_SS_GR_CHAIN8 if grad else _SS_CHAIN8, tail)


def _cpu_texts(name: str) -> tuple[str, str]:
    """(statistics, gmu chain) of an op's cpu kernel: the device texts' chains, 8 lanes at a
    time where a thread runs 8 channels."""
    if name == "bn_sum_squares":
        return _cpu_chains(_MU_IN, False), ""
    if name in ("bn_normalize", "bn_affine"):
        return _cpu_chains(_MU_CHAIN, False) + _SD, ""
    if name == "bn_weight_grad":
        gw = "    $T gw[G];\n" + _eight(_GW_CHAIN8.split("\n", 1)[1],
                                      _GW_CHAIN.split("\n", 1)[1])
        return _cpu_chains(_MU_CHAIN, False) + _SD + gw, ""
    gmu_scalar = _GMU_CHAIN.split("\n", 1)[1]  # after its declaration
    gmu = "    $T gmu[G];\n" + _eight(_GMU_CHAIN8.split("\n", 1)[1], gmu_scalar)
    stats = _cpu_chains(_MU_CHAIN, True) + _SD + _GRAD_GSS
    if name == "bn_affine_grad":
        stats = _affine_g(_affine_g(stats, _AFFINE_G8), _AFFINE_G[:2])
    return stats, gmu


def _kernels(name: str, cpu: bool):
    def kernels(ft: FloatType) -> list[Kernel]:
        f = {"T": ft.ctype, "SUB": SUB[ft].cname, "MUL": MUL[ft].cname, "ADD": ADD[ft].cname,
             "DIV": DIV[ft].cname, "SQRT": SQRT[ft].cname, "NEG": NEG[ft].cname}
        sig = params(Template(_SIGS[name]).substitute(T=ft.ctype))
        calls = tuple(c[ft] for c in _CALLS[name])
        stats, element = _texts(name)
        grad = name in ("bn_normalize_grad", "bn_affine_grad")
        if cpu:
            stats, gmu = _cpu_texts(name)
            if name in _PER_CHANNEL:
                out = _PER_CHANNEL[name][1]
            else:
                out = _CPU_ELEMENTS.replace("$ELEMENT", element)
                if grad:
                    out += gmu + _CPU_ELEMENTS.replace("$ELEMENT", _GX)
            body = _CPU_LANES + _CPU.safe_substitute(
                STATS=_indent(stats, 8), ELEMENTS=_indent(out, 8),
                COST=str(split_cost(calls, ROW_ELEMENT_COST)), L=str(CH_LANES))
            if name in _PER_CHANNEL:
                body = _CPU_SUMSQ_EMPTY + body
        elif name in _PER_CHANNEL:
            body = _CUDA_SUMSQ.safe_substitute(STATS=_indent(_one_lane(stats), 8),
                                               OUT=_PER_CHANNEL[name][0])
        else:
            shared = "".join(f"    __shared__ {ft.ctype} {v}_s;\n"
                             for v in ("m", "rr") + (("gss", "gmu") if grad else ()))
            publish = "".join(" " * 12 + f"{v}_s = {v}[0];\n"
                              for v in ("m", "rr") + (("gss",) if grad else ()))
            read = " " * 8 + "const $T m[1] = {m_s}, rr[1] = {rr_s};\n" + \
                (" " * 8 + "const $T gss[1] = {gss_s};\n" if grad else "") + \
                " " * 8 + "const int k = 0;\n"
            after = _CUDA_GMU.substitute(GMU=_indent(_one_lane(_GMU_CHAIN), 8)).replace(
                "$GX", _GX) if grad else ""
            body = _CUDA.safe_substitute(SHARED=shared, STATS=_indent(_one_lane(stats), 8),
                                         PUBLISH=publish, READ=read, ELEMENT=element,
                                         AFTER=after)
        body = Template(body).substitute(f)
        return [Kernel(ft.kernel(name), sig, body, Kind.ROWS, calls, CHANNELS)]

    return kernels


# --------------------------------------------------------------------------- shapes
def geometry(shape: tuple) -> tuple[int, int, int]:
    """(N, C, S) of x's shape (N, C, *S)."""
    return shape[0], shape[1], prod(shape[2:])


def stat_shape(shape: tuple) -> tuple:
    """The shape of a channel statistic of x: (1, C, 1, ...)."""
    return (1, shape[1]) + (1,) * (len(shape) - 2)


def _check_x(op: str, x: tuple) -> None:
    if len(x) < 2:
        raise ValueError(f"{op}: x has shape {x}; expected (N, C, *positions) (at least two "
                         "axes, the channels second)")


def _infer(op: str, nin: int):
    def infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
        x = tuple(shapes_[nin - 1])
        _check_x(op, x)
        if nin == 2 and tuple(shapes_[0]) != x:
            raise ValueError(f"{op}: g has shape {shapes_[0]}; expected x's shape {x}")
        return x, {"eps": check_eps(op, attrs.get("eps", 1e-5))}

    return infer


def _check_channels(op: str, x: tuple, name: str, shape: tuple) -> None:
    if tuple(shape) != (x[1],):
        raise ValueError(f"{op}: {name} has shape {tuple(shape)}; expected ({x[1]},) (one "
                         f"value per channel of x, shape {x})")


def _affine_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x = tuple(shapes_[0])
    _check_x("bn_affine", x)
    for name, shape in zip(("w", "b"), shapes_[1:]):
        _check_channels("bn_affine", x, name, shape)
    return x, {"eps": check_eps("bn_affine", attrs.get("eps", 1e-5))}


def _affine_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    out, attrs = _infer("bn_affine_grad", 2)(shapes_[:2], attrs)
    _check_channels("bn_affine_grad", out, "w", shapes_[2])
    return out, attrs


def _weight_grad_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x, attrs = _infer("bn_weight_grad", 2)(shapes_, attrs)
    return (x[1],), attrs


def _sumsq_infer(shapes_: tuple, attrs: dict) -> tuple[tuple, dict]:
    x, mu = tuple(shapes_[0]), tuple(shapes_[1])
    _check_x("bn_sum_squares", x)
    if mu != stat_shape(x):
        raise ValueError(f"bn_sum_squares: mu has shape {mu}; expected {stat_shape(x)} (x "
                         f"{x}'s channel means over the batch and positions, those axes kept "
                         "as 1)")
    return mu, {}


# --------------------------------------------------------------------------- references
def _axes(ndim: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, ndim))


def _count(x) -> int:
    """n: the values of a channel, N * prod(S)."""
    nn, _, s = geometry(tuple(x.shape))
    return nn * s


def _sumsq(x: np.ndarray, mu: np.ndarray) -> tuple:
    """(d, ss) by the other ops' references: ss a serial sum over (N, *S), shaped as mu."""
    ft = of(x)
    d = SUB[ft].numpy(x, mu)
    return d, serial_sum(MUL[ft].numpy(d, d), _axes(x.ndim)).reshape(mu.shape)


def _stats(x: np.ndarray, eps: float) -> tuple:
    """(d, sd, r, n) of every channel, by the other ops' references in the module doc's order."""
    ft, dt = of(x), x.dtype
    n = ft.scalar(_count(x))
    mu = DIV[ft].numpy(serial_sum(x, _axes(x.ndim)).reshape(stat_shape(x.shape)), n)
    d, ss = _sumsq(x, mu)
    sd = SQRT[ft].numpy(ADD[ft].numpy(DIV[ft].numpy(ss, n), round_scalar(eps, dt)))
    return d, sd, DIV[ft].numpy(dt.type(1.0), sd), n


def _reference(x: np.ndarray, *, eps: float) -> np.ndarray:
    if not x.size:
        return x.copy()
    d, _, r, _ = _stats(x, eps)
    return MUL[of(x)].numpy(d, r)


def _sumsq_reference(x: np.ndarray, mu: np.ndarray) -> np.ndarray:
    if not x.size:
        return np.zeros(mu.shape, x.dtype)
    return _sumsq(x, mu)[1]


def _grad_reference(g: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    if not x.size:
        return x.copy()
    ft, dt = of(x), x.dtype
    d, sd, r, n = _stats(x, eps)
    stat = stat_shape(x.shape)
    gr = serial_sum(MUL[ft].numpy(g, d), _axes(x.ndim)).reshape(stat)
    gsd = NEG[ft].numpy(MUL[ft].numpy(DIV[ft].numpy(gr, sd), r))
    gss = DIV[ft].numpy(DIV[ft].numpy(gsd, ADD[ft].numpy(sd, sd)), n)
    q = MUL[ft].numpy(gss, d)
    gd = ADD[ft].numpy(ADD[ft].numpy(MUL[ft].numpy(g, r), q), q)
    gmu = serial_sum(NEG[ft].numpy(gd), _axes(x.ndim)).reshape(stat)
    return ADD[ft].numpy(gd, MUL[ft].numpy(gmu, round_scalar(1.0 / _count(x), dt)))


def _affine_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, *, eps: float
                      ) -> np.ndarray:
    ft, stat = of(x), stat_shape(x.shape)
    xhat = _reference(x, eps=eps)
    return ADD[ft].numpy(MUL[ft].numpy(xhat, w.reshape(stat)), b.reshape(stat))


def _affine_grad_reference(g: np.ndarray, x: np.ndarray, w: np.ndarray, *, eps: float
                           ) -> np.ndarray:
    return _grad_reference(MUL[of(x)].numpy(g, w.reshape(stat_shape(x.shape))), x, eps=eps)


def _weight_grad_reference(g: np.ndarray, x: np.ndarray, *, eps: float) -> np.ndarray:
    if not x.size:
        return np.zeros(x.shape[1], x.dtype)
    xhat = _reference(x, eps=eps)
    return serial_sum(MUL[of(x)].numpy(g, xhat), _axes(x.ndim)).reshape(x.shape[1])


# --------------------------------------------------------------------------- launches, rules
def _launch_channels(rt, kernel: Kernel, arrays: tuple, x, scalars: tuple) -> None:
    """A block per channel of ``x`` (threads over its values), the geometry then ``scalars``
    (nothing to launch without channels)."""
    nn, c, s = geometry(tuple(x.shape))
    if c == 0:
        return
    nt = 1
    while nt < min(nn * s, ROW_THREADS):
        nt *= 2
    rt.launch(kernel, min(c, MAX_ROW_BLOCKS), nt, (*arrays, nn, c, s, *scalars))


def _scalars(x, eps: float) -> tuple:
    """eps, n and 1 / n as the kernels take them (each rounded once to the dtype)."""
    dt = np.dtype(x.dtype)
    n = _count(x)
    return (round_scalar(eps, dt), dtypes.float_type(dt).scalar(n),
            round_scalar(1.0 / n, dt) if n else dt.type(0))


def _launch(rt, ks, ins, out, *, eps):
    (x,) = ins
    if x.size:
        _launch_channels(rt, ks.only, (x, out), x, _scalars(x, eps)[:2])


def _grad_launch(rt, ks, ins, out, *, eps):
    g, x = ins
    if x.size:
        _launch_channels(rt, ks.only, (g, x, out), x, _scalars(x, eps))


def _affine_launch(rt, ks, ins, out, *, eps):
    x, w, b = ins
    if x.size:
        _launch_channels(rt, ks.only, (x, w, b, out), x, _scalars(x, eps)[:2])


def _affine_grad_launch(rt, ks, ins, out, *, eps):
    g, x, w = ins
    if x.size:
        _launch_channels(rt, ks.only, (g, x, w, out), x, _scalars(x, eps))


def _weight_grad_launch(rt, ks, ins, out, *, eps):
    g, x = ins
    _launch_channels(rt, ks.only, (g, x, out), x, _scalars(x, eps)[:2])


def _sumsq_launch(rt, ks, ins, out):
    x, mu = ins
    _launch_channels(rt, ks.only, (x, mu, out), x, ())


def composite_grad(be, g, x, eps: float):
    """The module doc's backward as recorded ops (differentiable again), the same bits as
    ``bn_normalize_grad``."""
    shape = tuple(x.shape)
    count = _count(x)
    n = be.constant(np.asarray(count, x.dtype))
    axes = _axes(len(shape))
    mu = be.mean(x, axes, True)
    d = be.sub(x, mu)
    sd = be.sqrt(be.adds(be.div(be.sum(be.mul(d, d), axes, True), n), eps))
    r = be.div(be.constant(np.asarray(1.0, x.dtype)), sd)
    gr = be.sum_to(be.mul(g, d), tuple(r.shape))
    gsd = be.neg(be.mul(be.div(gr, sd), r))
    gss = be.broadcast_to(be.div(be.div(gsd, be.add(sd, sd)), n), shape)
    gd = be.add(be.add(be.mul(g, r), be.mul(gss, d)), be.mul(gss, d))
    gmu = be.sum_to(be.neg(gd), tuple(mu.shape))
    return be.add(gd, be.broadcast_to(be.muls(gmu, 1.0 / count), shape))


def _vjp(be, g, ins, out, needs, *, eps):
    (x,) = ins
    return (composite_grad(be, g, x, eps) if be.differentiates else
            be.bn_normalize_grad(g, x, eps=eps),)


def _affine_vjp(be, g, ins, out, needs, *, eps):
    """bn_affine's gradients: x's (bn_normalize's rule for the upstream g * w), w's (the serial
    sum over (N, *S) of g * xhat) and b's (of g), each as the composite's rules give it."""
    x, w, _ = ins
    chan, c = stat_shape(tuple(x.shape)), int(x.shape[1])
    if be.differentiates:  # the composite op by op (differentiable again)
        gx = composite_grad(be, be.mul(g, be.reshape(w, chan)), x, eps) if needs[0] else None
        gw = be.reshape(be.sum_to(be.mul(g, be.bn_normalize(x, eps=eps)), chan), (c,)) \
            if needs[1] else None
    else:
        gx = be.bn_affine_grad(g, x, w, eps=eps) if needs[0] else None
        gw = be.bn_weight_grad(g, x, eps=eps) if needs[1] else None
    gb = be.reshape(be.sum_to(g, chan), (c,)) if needs[2] else None
    return gx, gw, gb


def _pin_stats(xv: list, T: type, n, eps) -> tuple:
    """(d, sd, r) of one channel's values ``xv`` on numpy scalars (the module doc's order)."""
    m = xv[0]
    for v in xv[1:]:
        m = m + v
    m = m / n
    d = [v - m for v in xv]
    ss = d[0] * d[0]
    for v in d[1:]:
        ss = ss + v * v
    sd = T(np.sqrt(ss / n + eps))
    return d, sd, T(1.0) / sd


def _affine_pin(ins: list, y, G) -> list:
    """bn_affine's backward on numpy scalars, independently of the rule: [d x, d w, d b] at
    eps = PIN_EPS (d x: the normalisation's pin for the upstream g * w)."""
    x, w, _ = ins
    T = np.float64 if x.dtype == np.float64 else np.float32
    nn, c, s = geometry(x.shape)
    xs, gs = x.reshape(nn, c, s), G.reshape(nn, c, s)
    gws = np.empty((nn, c, s), x.dtype)
    gw, gb = np.empty(c, x.dtype), np.empty(c, x.dtype)
    with np.errstate(all="ignore"):
        for ch in range(c):
            gv = [T(gs[i, ch, q]) for i in range(nn) for q in range(s)]
            gws[:, ch, :] = np.asarray([v * T(w[ch]) for v in gv], x.dtype).reshape(nn, s)
            xv = [T(xs[i, ch, q]) for i in range(nn) for q in range(s)]
            d, _, r = _pin_stats(xv, T, T(nn * s), T(PIN_EPS))
            acc, tot = gv[0] * (d[0] * r), gv[0]
            for j in range(1, len(gv)):
                acc, tot = acc + gv[j] * (d[j] * r), tot + gv[j]
            gw[ch], gb[ch] = acc, tot
    return [_pin([x], None, gws.reshape(x.shape))[0], gw, gb]


def _pin(ins: list, y, G) -> list:
    """The backward of the module doc evaluated channel by channel on numpy scalars (one IEEE
    rounding per operation), independently of the rule: [d x] at eps = PIN_EPS."""
    (x,) = ins
    T = np.float64 if x.dtype == np.float64 else np.float32
    gx = np.empty(x.shape, x.dtype)
    nn, c, s = geometry(x.shape)
    xs, gs = x.reshape(nn, c, s), G.reshape(nn, c, s)
    gxs = gx.reshape(nn, c, s)
    eps, n, inv_n = T(PIN_EPS), T(nn * s), T(1.0 / (nn * s))
    with np.errstate(all="ignore"):
        for ch in range(c):
            xv = [T(xs[i, ch, q]) for i in range(nn) for q in range(s)]
            gv = [T(gs[i, ch, q]) for i in range(nn) for q in range(s)]
            d, sd, r = _pin_stats(xv, T, n, eps)
            gr = gv[0] * d[0]
            for j in range(1, len(d)):
                gr = gr + gv[j] * d[j]
            gss = (-((gr / sd) * r) / (sd + sd)) / n
            gd = [(gv[j] * r + gss * d[j]) + gss * d[j] for j in range(len(d))]
            gmu = -gd[0]
            for v in gd[1:]:
                gmu = gmu + -v
            t = gmu * inv_n
            gxs[:, ch, :] = np.asarray([v + t for v in gd], x.dtype).reshape(nn, s)
    return [gx]


def _twin(t, x, eps):
    """torch's value of bn_normalize: batch normalisation by the batch's mean and biased
    variance (F.batch_norm in training, no affine, no running statistics)."""
    return t.nn.functional.batch_norm(x, None, None, training=True, eps=eps)


def _affine_twin(t, x, w, b, eps):
    """torch's value of bn_affine: F.batch_norm in training with weight and bias (no running
    statistics)."""
    return t.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=eps)


PIN_EPS = 1e-5
# (2, 8, 19), (3, 11, 4, 4): the cpu kernels' 8-lane chains over 8 positions at a time and
# the rest one at a time
X_SHAPES = ((2, 3), (3, 2, 5), (2, 3, 2, 3), (1, 1), (4, 1), (1, 2, 1, 1), (2, 9, 4),
            (0, 3), (2, 0, 3), (2, 3, 0), (2, 8, 19), (3, 11, 4, 4))
register(Op("bn_normalize", ("x",), ("eps",), _infer("bn_normalize", 1), _reference,
            _kernels("bn_normalize", False), _launch, _vjp,
            "(x - mu) * (1 / sqrt(sum((x - mu)^2) / n + eps)) per channel of x (N, C, *S), mu "
            "the channel's mean (batch_norm's training statistics; serial sums over (N, *S), "
            "each operation rounded once)",
            {"eps": 1e-5}, cpu=_kernels("bn_normalize", True),
            checks=Checks(tuple(((s,), {"eps": e}) for s in X_SHAPES for e in (1e-5, 0.0)),
                          (((3, 2, 5),), {"eps": PIN_EPS}), (ANY,), _pin, _twin)))
register(Op("bn_normalize_grad", ("g", "x"), ("eps",), _infer("bn_normalize_grad", 2),
            _grad_reference, _kernels("bn_normalize_grad", False), _grad_launch, None,
            "bn_normalize's backward: the batch_norm composite's gradient of x for an upstream "
            "g (module doc's order)", {"eps": 1e-5},
            cpu=_kernels("bn_normalize_grad", True)))
register(Op("bn_sum_squares", ("x", "mu"), (), _sumsq_infer, _sumsq_reference,
            _kernels("bn_sum_squares", False), _sumsq_launch, None,
            "sum((x - mu)^2) per channel of x (N, C, *S), a serial sum over (N, *S) (the "
            "running variance's input in batch_norm, mu the mean op's; no gradient)",
            cpu=_kernels("bn_sum_squares", True)))
register(Op("bn_affine", ("x", "w", "b"), ("eps",), _affine_infer, _affine_reference,
            _kernels("bn_affine", False), _affine_launch, _affine_vjp,
            "bn_normalize(x) * w + b, w and b per channel (C,): batch_norm's training "
            "normalisation and affine in one op (each operation rounded once: the product, then "
            "the sum)",
            {"eps": 1e-5}, cpu=_kernels("bn_affine", True),
            checks=Checks(tuple(((s, (s[1],), (s[1],)), {"eps": e}) for s in X_SHAPES
                                for e in (1e-5, 0.0)),
                          (((3, 2, 5), (2,), (2,)), {"eps": PIN_EPS}), (ANY, ANY, ANY),
                          _affine_pin, _affine_twin)))
register(Op("bn_affine_grad", ("g", "x", "w"), ("eps",), _affine_grad_infer,
            _affine_grad_reference, _kernels("bn_affine_grad", False), _affine_grad_launch,
            None, "bn_affine's gradient of x: bn_normalize_grad(g * w, x), each product g * w "
            "rounded once", {"eps": 1e-5}, cpu=_kernels("bn_affine_grad", True)))
register(Op("bn_weight_grad", ("g", "x"), ("eps",), _weight_grad_infer, _weight_grad_reference,
            _kernels("bn_weight_grad", False), _weight_grad_launch, None,
            "bn_affine's gradient of w: per channel the serial sum over (N, *S) of g * xhat, "
            "xhat = bn_normalize(x) (C,)", {"eps": 1e-5}, cpu=_kernels("bn_weight_grad", True)))
