"""The parameter-store protocol (gtape.ParamStore): a Tape implements it, and its check_param
names what was wrong."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape.params import MEMBERS, ParamStore, missing_members


def test_the_protocol_lists_its_members():
    declared = {n for n in vars(ParamStore) if not n.startswith("_")}
    assert declared == set(MEMBERS)


def test_a_tape_is_a_param_store():
    tp = g.Tape()
    assert isinstance(tp, g.ParamStore) and not missing_members(g.Tape)
    assert not isinstance(object(), g.ParamStore)
    assert missing_members(object()) == list(MEMBERS)


def test_check_param_names_the_problem():
    with g.Tape() as tp:
        w = tp.param(np.ones(3))
        c = tp.const(np.ones(3))
        assert tp.check_param("here", w) is w
        with pytest.raises(TypeError, match="here: param is .*; expected a parameter Var"):
            tp.check_param("here", np.ones(3))
        with pytest.raises(ValueError, match="here: .* is a 'const' node; expected a parameter"):
            tp.check_param("here", c)
        with g.Tape() as other:
            with pytest.raises(ValueError, match="belongs to another tape"):
                other.check_param("here", w)
    with pytest.raises(RuntimeError, match="here: the tape is closed"):
        tp.check_param("here", w)
