"""transpose's cpu tiles (32 x 32, or 8-column micro tiles where the input's row stride is a
multiple of 2 KiB) against the numpy reference, bit for bit (raw bits: a copy keeps NaN
payloads and signed zeros): power-of-two and odd sizes, tiles ending mid-way, batched
planes, 1 and 2 threads on cpu (split threshold lowered to 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from gtensor.testing import cpu_thread_runs

CASES = [((256, 4096), None), ((4096, 256), None), ((256, 256), None), ((128, 256), None),
         ((704, 256), None), ((256, 704), None), ((33, 512), None), ((512, 37), None),
         ((3, 64, 520), (0, 2, 1)), ((2, 3, 256, 9), (0, 1, 3, 2)), ((8, 128, 128), (0, 2, 1)),
         ((1, 1), None), ((7, 1024), None)]


def _x(shape: tuple, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    ui = np.uint64 if dtype == "float64" else np.uint32
    special = np.array([np.inf, -np.inf, -0.0, 0.0], dtype)
    flat[::7] = special[np.arange(flat[::7].size) % 4]
    nan = np.array(0x7FF0000000000123 if dtype == "float64" else 0x7FC00123, ui).view(dtype)
    flat[3::11] = nan  # a NaN with a payload
    return x


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,axes", CASES)
def test_transpose_raw_bits(ref, other, shape, axes, dtype):
    x = _x(shape, dtype)
    ui = np.uint64 if dtype == "float64" else np.uint32
    want = ref.to_numpy(ref.apply("transpose", [ref.asarray(x)], axes=axes))
    assert want.view(ui).tobytes() == np.transpose(x, axes).copy().view(ui).tobytes()
    with cpu_thread_runs(other) as threads:
        for t in threads:
            got = other.to_numpy(other.apply("transpose", [other.asarray(x)], axes=axes))
            assert got.shape == want.shape
            diff = np.flatnonzero(got.view(ui) != want.view(ui))
            assert diff.size == 0, f"threads={t}: {diff.size} elements differ, first at " \
                                   f"flat {diff[:1]}"
