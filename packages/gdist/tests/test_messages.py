"""gdist's small messages travel as plain data (msgpack) and come back as they left: a step's
plan, its index microbatches and a reply with a loss whose bits must not change."""

from __future__ import annotations

import numpy as np
import pytest
from gdist import messages
from gdist.service import Plan

protocol = pytest.importorskip("distributed.protocol")


def _through_dask(x):
    """``x`` dumped and loaded by Dask's protocol, as a comm does."""
    return protocol.loads(protocol.dumps({"op": "gdist", "payload": messages.wrap(x)}))["payload"]


def test_a_plan_and_index_parts_go_plain_and_come_back_equal():
    plan = Plan(7, 12, 28, 4, (0, 0, 1, 1), ("tcp://a:1", "tcp://b:2"), "workers", True,
                (0.1, 3e-4), None, 60.0)
    parts = {2: np.arange(5, 11, dtype=np.int64), 3: np.array([9, 0, 4], np.int64)}
    body = {"plan": plan.plain(), "me": 1, "parts": messages.encode_parts(parts)}
    assert messages.is_plain(body)
    got = _through_dask(body)
    assert Plan.of(got["plan"]) == plan
    back = messages.decode_parts(got["parts"])
    assert set(back) == {2, 3}
    for i in parts:
        assert back[i].dtype == np.int64 and np.array_equal(back[i], parts[i])
    assert Plan.of(plan) is plan


def test_data_microbatches_and_arrays_keep_to_serialize():
    data = {0: {"x": np.ones((2, 3)), "y": np.zeros(2, np.int64)}}
    assert messages.encode_parts(data) is data
    assert not messages.is_plain({"parts": data})
    assert type(messages.wrap({"root": np.ones(3)})).__name__ == "Serialize"
    assert not messages.is_plain({"loss": np.float64(1.0)})  # a numpy scalar: not plain
    assert not messages.is_plain({(1, 2): 3})  # a tuple key


@pytest.mark.parametrize("loss", [0.1, -0.0, 5e-324, 1.7976931348623157e308,
                                  float(np.float32(2.3))])
def test_a_reply_loss_keeps_its_bits(loss):
    got = _through_dask({"loss": loss, "steps": 3, "seconds": {"leaves": 0.5}})
    assert np.float64(got["loss"]).tobytes() == np.float64(loss).tobytes()
