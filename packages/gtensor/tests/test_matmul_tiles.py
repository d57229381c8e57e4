"""matmul / bmm across every branch of the cpu kernel's tiling, bit for bit against the numpy
definition (both contracts, both dtypes, ta / tb, batches, special values): the row tiles
(8, 6, 4, 2, 1 rows; 14 in the plain contract's tall tiles, one vector wide, which AMD Zen 3 / 4
take: on the cpu backend the plain contract runs in both tile forms on every host), the column
tiles (2 or 1 whole vectors, one partial vector over a zero-padded panel, L or L/2 lanes wide),
a k block resumed from c (KC = 256; 128 for the tall tiles), op(a) under ta
read in place or packed in groups of 8 rows, and panels of b read in place (m <= 16, or <= 32
with a small b; whole vectors; not when b's rows are 2 or 4 KB apart over many k-steps) or
copied (at first use, or, b over 256 KB, all in one pass over b's rows). Shapes are sized
from the lanes L of a 64-byte vector; on the other backends the same shapes are one more sweep
of the definition."""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.ops.inner import INNER, serial_matmul
from gtensor.testing import bits_equal, first_difference, matmul_tile_forms
from matmul_inputs import swapped, with_specials

KC = 256  # the cpu kernel's k block (a 32 KB slice of a 2L-wide panel, either dtype)


def _cases(dtype: str) -> list[tuple[int, int, int, int, bool, bool]]:
    """(batch, m, k, n, ta, tb) reaching each branch of the tiling for ``dtype``."""
    lanes = 64 // np.dtype(dtype).itemsize
    pw = 2 * lanes  # a packed panel's width
    big = 131072 // np.dtype(dtype).itemsize  # op(a) above this many values: packed under ta
    flags = [(False, False), (True, False), (False, True), (True, True)]
    out = []
    for m in range(1, 18):  # every row-tile mix: 8 / 6 / 4 / 2 / 1
        out += [(1, m, 5, pw + 3, ta, tb) for ta, tb in flags]
    for n in [*range(1, pw + 2), pw + lanes, pw + lanes + 1, 2 * pw + 3]:  # column tiles
        out += [(1, 9, 3, n, ta, tb) for ta, tb in flags]
    for n in (3, lanes - 1, lanes, lanes + 3, pw, pw + 5):  # a k block resumed, partial too
        out += [(1, 7, KC + 3, n, ta, tb) for ta, tb in flags]
    # under ta: a small (in place), one panel with a large a of few columns (in place), many
    # panels with a large a (packed), one panel with a large a of many columns (packed)
    out += [(1, 13, 40, 2 * pw + 1, True, False), (1, 100, big // 100 + 7, pw - 3, True, False),
            (1, 70, big // 70 + 9, 2 * pw + 5, True, False),
            (1, 2048 // np.dtype(dtype).itemsize + 3, 70, lanes + 1, True, True)]
    out += [(1, 24, 300, 1100, False, False), (1, 24, 9, 200, True, False)]  # b large / small
    # rows of a 4 KB apart: 8-row tiles even where tiles are tall (14 such rows share an L1 set)
    out += [(1, 17, 4096 // np.dtype(dtype).itemsize, pw + 3, False, False)]
    # few rows with b's rows 4 KB / 2 KB apart and many k-steps: its panels copied (read in
    # place, their lines would share an L1 set); 1 KB apart: read in place
    item = np.dtype(dtype).itemsize
    out += [(1, 16, 144, 4096 // item, False, False), (1, 9, 40, 2048 // item, False, False),
            (1, 5, 40, 1024 // item, False, False)]
    # b over 256 KB (k * n > 65536 values either dtype): its panels copied in one pass over its
    # rows; few rows (whole panels in place, the partial one copied), under ta, in batches
    out += [(1, 12, 300, 250, False, False), (1, 30, 270, 250, True, False),
            (2, 20, 300, 250, False, False), (2, 9, 260, 260, True, False)]
    out += [(3, 6, 4, lanes + 1, True, False), (2, 13, 9, pw + 1, True, True),  # batches
            (2, 9, 5, pw + lanes, False, False), (2, 40, 5, pw + lanes, True, False),
            (2, 70, big // 70 + 9, 2 * pw + 5, True, False), (3, 11, KC + 1, 5, False, True)]
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("inner", INNER)
def test_matmul_tiles_bitwise(be, dtype, inner):
    """Every tiling branch equals the serial definition, normal and special values."""
    with matmul_tile_forms(be, inner) as forms:
        for form in forms:
            _check_cases(be, dtype, inner, f"tiles={form} ")


def _check_cases(be, dtype: str, inner: str, label: str) -> None:
    """Every case of ``_cases``, normal and with special values, against the definition."""
    rng = np.random.default_rng(21)
    for batch, m, k, n, ta, tb in _cases(dtype):
        for special in (False, True):
            make = ((lambda r, s, d: with_specials(r, s, d, 7)) if special
                    else (lambda r, s, d: r.standard_normal(s).astype(d)))
            a, b = make(rng, (batch, m, k), dtype), make(rng, (batch, k, n), dtype)
            if batch == 1:
                a, b = a[0], b[0]
            fn = be.matmul if batch == 1 else be.bmm
            got = be.to_numpy(fn(be.asarray(swapped(a) if ta else a),
                         be.asarray(swapped(b) if tb else b),
                                 inner=inner, ta=ta, tb=tb))
            ref = serial_matmul(a, b, inner)
            tag = (f"{label}{dtype} {inner} batch={batch} {m}x{k}x{n} ta={ta} tb={tb} "
                   f"special={special}")
            assert got.shape == ref.shape, tag
            assert bits_equal(ref, got), f"{tag}: {first_difference(ref, got)}"
