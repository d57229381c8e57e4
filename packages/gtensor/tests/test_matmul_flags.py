"""matmul / bmm with ta / tb: op(a) @ op(b) is transpose-then-matmul, bit for bit, on every
backend (both contracts, both dtypes, odd shapes across the cpu tiles and panels, special
values, thread counts), the flagged VJPs match the explicit-transpose ones, bad flags refused."""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.ops.inner import INNER, serial_matmul
from gtensor.runtime import cpu as cpu_runtime
from gtensor.testing import bits_equal, cpu_thread_runs, first_difference
from matmul_inputs import swapped, with_specials

# (m, k, n): 1, 7, 17, 33, 65 cross the cpu register tiles (8 / 6 / 4 / 2 / 1 rows, 2 / 1
# whole vectors of L lanes, a partial one) and the packed panel (2L columns); 260 crosses a k
# block (KC = 256); k = 0; empty outputs (test_matmul_tiles.py sweeps every branch)
SHAPES = [(1, 1, 1), (7, 17, 33), (65, 33, 17), (17, 65, 65), (33, 7, 1), (1, 65, 7),
          (9, 130, 40), (9, 260, 40), (33, 0, 7), (0, 5, 3), (4, 3, 0), (70, 1100, 19)]
FLAGS = [(True, False), (False, True), (True, True)]


def _check(be, op, a, b, inner, ta, tb, what=""):
    """Flagged ``op`` on (op^-1 a, op^-1 b) equals ``op`` on (a, b) and the numpy definition."""
    fn = getattr(be, op)
    want = be.to_numpy(fn(be.asarray(a), be.asarray(b), inner=inner))
    got = be.to_numpy(fn(be.asarray(swapped(a) if ta else a),
                         be.asarray(swapped(b) if tb else b),
                         inner=inner, ta=ta, tb=tb))
    ref = serial_matmul(a, b, inner)
    tag = f"{op} {a.dtype} {inner} ta={ta} tb={tb} {a.shape}@{b.shape} {what}"
    assert got.shape == ref.shape, tag
    assert bits_equal(ref, want), f"{tag} unflagged: {first_difference(ref, want)}"
    assert bits_equal(ref, got), f"{tag}: {first_difference(ref, got)}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("inner", INNER)
def test_flagged_matmul_is_transpose_then_matmul(be, dtype, inner):
    """Every flag pair, every shape class, normal and special values."""
    rng = np.random.default_rng(11)
    for m, k, n in SHAPES:
        for ta, tb in FLAGS:
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n)).astype(dtype)
            _check(be, "matmul", a, b, inner, ta, tb)
            _check(be, "matmul", with_specials(rng, (m, k), dtype, 9),
                   with_specials(rng, (k, n), dtype, 9),
                   inner, ta, tb, "special")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("inner", INNER)
def test_flagged_bmm_is_transpose_then_bmm(be, dtype, inner):
    """bmm: the last two axes of each operand swapped, per batch."""
    rng = np.random.default_rng(12)
    for m, k, n in [(1, 1, 1), (7, 17, 33), (17, 65, 9), (3, 0, 5), (0, 2, 3), (33, 130, 17)]:
        for ta, tb in FLAGS:
            a = with_specials(rng, (3, m, k), dtype, 9)
            b = rng.standard_normal((3, k, n)).astype(dtype)
            _check(be, "bmm", a, b, inner, ta, tb)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_flagged_matmul_thread_counts(be, threads):
    """The cpu kernel's row and panel splits (work threshold lowered to 1) change no bit;
    (200, 40, 200): 13 panels of f64, fewer than its 25 row tiles, at least 4 per thread:
    panels split; (65, 33, 17), (200, 64, 70): rows split; under ta op(a) is packed for
    (100, 170, 150) (panels split: b the larger) and (300, 170, 150) (rows split)."""
    if be.name != "cpu":
        pytest.skip("thread counts are the cpu backend's")
    with cpu_thread_runs(be, threads=(threads,)) as runs:
        for _ in runs:
            rng = np.random.default_rng(13)
            for m, k, n in [(9, 130, 200), (65, 33, 17), (200, 64, 70), (21, 203, 97),
                            (200, 40, 200), (100, 170, 150), (300, 170, 150)]:
                for inner in INNER:
                    for ta, tb in FLAGS:
                        a = rng.standard_normal((m, k))
                        b = rng.standard_normal((k, n))
                        _check(be, "matmul", a, b, inner, ta, tb, f"threads={threads}")
                        _check(be, "bmm", np.stack([a, a[::-1]]), np.stack([b, -b]), inner,
                               ta, tb, f"threads={threads}")


def test_flagged_vjps_match_explicit_transposes(be):
    """The VJP rules on flagged forwards: each gradient equals the gradient of the
    transpose-then-matmul composition (computed here with explicit transposes), bitwise."""
    from gtensor.ops import REGISTRY

    rng = np.random.default_rng(14)
    for inner in INNER:
        for op, (ash, bsh) in [("matmul", ((7, 17), (17, 33))), ("bmm", ((2, 5, 9), (2, 9, 4)))]:
            vjp = REGISTRY[op].vjp
            fn = getattr(be, op)
            a, b = rng.standard_normal(ash), rng.standard_normal(bsh)
            g = rng.standard_normal(ash[:-1] + bsh[-1:])
            A, B, G = be.asarray(a), be.asarray(b), be.asarray(g)
            axes = (1, 0) if op == "matmul" else (0, 2, 1)
            # the gradients of c = a @ b wrt a and b, with explicit transposes
            want_a = be.to_numpy(fn(G, be.transpose(B, axes), inner=inner))
            want_b = be.to_numpy(fn(be.transpose(A, axes), G, inner=inner))
            for ta, tb in [(False, False), *FLAGS]:
                xa, xb = (swapped(a) if ta else a), (swapped(b) if tb else b)
                ga, gb = vjp(be, G, (be.asarray(xa), be.asarray(xb)), None, (True, True),
                             inner=inner, ta=ta, tb=tb)
                tag = f"{op} {inner} ta={ta} tb={tb}"
                ga, gb = be.to_numpy(ga), be.to_numpy(gb)
                assert ga.shape == xa.shape and gb.shape == xb.shape, tag
                assert bits_equal(swapped(want_a) if ta else want_a, ga), tag
                assert bits_equal(swapped(want_b) if tb else want_b, gb), tag


@pytest.mark.parametrize("op, a, b, attrs, match", [
    ("matmul", (3, 4), (3, 5), {"ta": False}, r"matmul: inner dimensions differ: a \(3, 4\)"),
    ("matmul", (3, 4), (3, 5), {"tb": True},
     r"matmul: inner dimensions differ: a \(3, 4\) @ b\^T \(5, 3\) \(b \(3, 5\), tb=True\)"),
    ("matmul", (4, 3), (5, 3), {"ta": True},
     r"matmul: inner dimensions differ: a\^T \(3, 4\) \(a \(4, 3\), ta=True\) @ b \(5, 3\)"),
    ("bmm", (2, 4, 3), (2, 5, 4), {"ta": True},
     r"bmm: inner dimensions differ: a\^T \(2, 3, 4\) .* @ b \(2, 5, 4\)"),
    ("matmul", (3,), (3, 5), {"ta": True}, r"matmul: expected 2-D operands"),
    ("matmul", (2, 3, 4), (2, 4, 5), {}, r"matmul: expected 2-D operands, or a of rank >= 3"),
    ("matmul", (2, 3, 4), (2, 3, 5), {"ta": True, "tb": True}, r"got a \(2, 3, 4\) and b"),
    ("matmul", (2, 3, 4), (5, 3), {},
     r"inner dimensions differ: fold\(a\) \(6, 4\) \(a \(2, 3, 4\)\) @ b \(5, 3\)"),
    ("matmul", (2, 3, 4), (5, 3, 2), {"ta": True},
     r"fold\(a\)\^T \(4, 6\) \(a \(2, 3, 4\), ta=True\) @ fold\(b\) \(15, 2\)"),
])
def test_flagged_shape_errors(be, op, a, b, attrs, match):
    """Shape errors name the op, the operand as read (op(x)) and what is accepted."""
    with pytest.raises(ValueError, match=match):
        getattr(be, op)(be.asarray(np.zeros(a)), be.asarray(np.zeros(b)), **attrs)


@pytest.mark.parametrize("bad", [1, 0, "yes", None, 1.0])
def test_non_bool_flags_refused(be, bad):
    """ta / tb take bools only (1, 0, strings, None refused: TypeError naming the flag)."""
    x = be.asarray(np.ones((2, 2)))
    for flag in ("ta", "tb"):
        with pytest.raises(TypeError, match=rf"matmul: {flag} is .*; expected a bool"):
            be.matmul(x, x, **{flag: bad})
        with pytest.raises(TypeError, match=rf"bmm: {flag} is .*; expected a bool"):
            be.bmm(be.asarray(np.ones((1, 2, 2))), be.asarray(np.ones((1, 2, 2))),
                   **{flag: bad})


@pytest.mark.parametrize("threads", ["1", "2"])
def test_transpose_tiles_exact(be, monkeypatch, threads):
    """The transpose (the cpu kernel's buffered 32 x 32 tiles, partial bands in place): an
    exact copy, NaN payloads and signed zeros included (compared as raw bits)."""
    monkeypatch.setenv(cpu_runtime.THREADS_ENV, threads)
    rng = np.random.default_rng(15)
    for dtype, ui in (("float64", np.uint64), ("float32", np.uint32)):
        for shape in [(1024, 512), (200, 1024), (3, 64, 96), (65, 33), (32, 32), (31, 97)]:
            bits = rng.integers(0, np.iinfo(ui).max, size=shape, dtype=ui, endpoint=True)
            x = bits.view(dtype)
            got = be.to_numpy(be.transpose(be.asarray(x), (*range(len(shape) - 2),
                                                           len(shape) - 1, len(shape) - 2)))
            assert np.array_equal(got.view(ui), np.swapaxes(bits, -1, -2)), (dtype, shape)
