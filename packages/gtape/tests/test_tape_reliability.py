"""Bad constructions and forged handles fail up front with a clear message; nothing changes."""

from __future__ import annotations

import gtape as g
import numpy as np
import pytest
from gtape.tape import Mark
from gtensor import testing


@pytest.mark.parametrize("backend", [42, None, object()])
def test_tape_refuses_a_bad_backend(backend):
    with pytest.raises(TypeError, match="expected a backend name"):
        g.Tape(backend)


@pytest.mark.parametrize("dtype", [">f8", "int64", None, "float16"])
def test_tape_refuses_a_bad_dtype(dtype):
    with pytest.raises(TypeError, match="expected float64 or float32"):
        g.Tape("numpy", dtype)


def test_arrays_of_another_backend_are_refused(bname):
    other = "sim" if bname != "sim" else "cpu"  # numpy arrays are host data everywhere
    foreign = testing.require_backend(other).asarray([1.0, 2.0])
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(2))
        n = len(tp)
        for call in (lambda: tp.const(foreign), lambda: tp.param(foreign),
                     lambda: w + foreign, lambda: tp.set_value(w, foreign)):
            with pytest.raises(TypeError, match="an array of another backend"):
                call()
        assert len(tp) == n


def test_forged_marks_and_negative_indices_are_refused(bname):
    with g.Tape(bname) as tp:
        tp.param(np.ones(2))
        m = tp.mark()
        g.exp(tp.params()[0])
        for forged in (Mark(m.tape_id, -1, m.serial), Mark(m.tape_id, 0, 7),
                       Mark(m.tape_id, 1.0, m.serial)):
            with pytest.raises(ValueError, match="not a mark this tape made"):
                tp.reset_to(forged)
        assert len(tp) == 2
        for bad in (-1, 2, 1.0):
            with pytest.raises((IndexError, TypeError), match="node"):
                tp.node(bad)


def test_unknown_op_names_the_known_ones(bname):
    with g.Tape(bname) as tp:
        w = tp.param(np.ones(2))
        with pytest.raises(KeyError, match="unknown op 'nope'; known ops"):
            g.apply("nope", (w,))
        assert len(tp) == 1
