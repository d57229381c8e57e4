"""A short rung-1 run on the backend under test lands on the numpy run's bits."""

from __future__ import annotations

from gdemos import AEConfig, train
from gtensor.testing import bits_equal


def test_short_run_bitwise_equal_to_numpy(other):
    cfg = AEConfig(epochs=2)
    ref = train(cfg)
    got = train(AEConfig(backend=other, epochs=2))
    assert got.losses == ref.losses
    assert got.epoch_mse == ref.epoch_mse
    assert all(bits_equal(a, b) for a, b in zip(got.params, ref.params))


def test_same_seed_same_bits_different_seed_different_run(bname):
    a = train(AEConfig(backend=bname, epochs=1))
    b = train(AEConfig(backend=bname, epochs=1))
    c = train(AEConfig(backend=bname, epochs=1, seed=1))
    assert a.losses == b.losses and all(bits_equal(x, y) for x, y in zip(a.params, b.params))
    assert a.losses != c.losses
