"""Bad parameter groups are refused with errors naming the group index and key, and the
optimizer (and tape) are unchanged after each refusal."""

from __future__ import annotations

import math

import gtape as g
import numpy as np
import pytest
from gopt import SGD, Adam, AdamW


def _tape(bname: str = "numpy"):
    tp = g.Tape(bname)
    return tp, [tp.param(np.full((2, 2), 1.0 + k)) for k in range(3)]


def _snapshot(opt) -> tuple:
    """Everything a refusal must leave alone: the state (parameters included), the groups as
    torch shows them, and every configuration version."""
    state = {k: np.asarray(v).tobytes() for k, v in opt.state_dict().items()}
    groups = [[(k, [p.index for p in v] if k == "params" else v) for k, v in grp.items()]
              for grp in opt.param_groups]
    versions = {n: v.version for n, v in opt._versions.items()}
    return state, groups, versions


CONSTRUCTION = [  # (make(ps, other_tape_param), error, message)
    ("param in two groups", lambda ps, o: AdamW([{"params": [ps[0], ps[1]]},
                                                 {"params": [ps[1]]}]),
     ValueError, r"AdamW: param_groups\[1\]\['params'\]\[0\] \(<Var 1.*\) is also "
                 r"param_groups\[0\]\['params'\]\[1\]; expected each parameter in one group"),
    ("param twice in a list", lambda ps, o: SGD([ps[0], ps[0]], lr=0.1),
     ValueError, r"SGD: params\[1\] .* is also params\[0\]"),
    ("unknown key", lambda ps, o: Adam([{"params": [ps[0]]}, {"params": [ps[1]],
                                                              "momentum": 0.9}]),
     ValueError, r"Adam: param_groups\[1\] has key 'momentum'; expected keys among "
                 r"\['params', 'lr', 'betas', 'eps', 'weight_decay'\]"),
    ("betas on SGD", lambda ps, o: SGD([{"params": [ps[0]], "betas": (0.9, 0.99)}], lr=0.1),
     ValueError, r"SGD: param_groups\[0\] has key 'betas'"),
    ("two tapes", lambda ps, o: AdamW([{"params": [ps[0]]}, {"params": [o]}]),
     ValueError, r"AdamW: param_groups\[1\]\['params'\]\[0\] belongs to <Tape .*, "
                 r"param_groups\[0\]\['params'\]\[0\] to <Tape .*expected the parameters of "
                 "one tape"),
    ("empty list", lambda ps, o: AdamW([]), ValueError, "AdamW: params is empty"),
    ("empty group", lambda ps, o: AdamW([{"params": [ps[0]]}, {"params": []}]),
     ValueError, r"AdamW: param_groups\[1\]\['params'\] is empty"),
    ("no params key", lambda ps, o: AdamW([{"lr": 0.1}]),
     ValueError, r"AdamW: param_groups\[0\] has no 'params'"),
    ("bad lr", lambda ps, o: AdamW([{"params": [ps[0]]}, {"params": [ps[1]], "lr": -1.0}]),
     ValueError, r"AdamW: param_groups\[1\]\['lr'\] is -1.0 \(a float\); expected a finite "
                 "real number >= 0"),
    ("nan lr", lambda ps, o: SGD([{"params": [ps[0]], "lr": math.nan}], lr=0.1),
     ValueError, r"SGD: param_groups\[0\]\['lr'\] is nan"),
    ("text lr", lambda ps, o: SGD([{"params": [ps[0]], "lr": "0.1"}], lr=0.1),
     TypeError, r"SGD: param_groups\[0\]\['lr'\] is '0.1' \(a str\)"),
    ("beta of 1", lambda ps, o: Adam([{"params": [ps[0]], "betas": (1.0, 0.9)}]),
     ValueError, r"Adam: param_groups\[0\]\['betas'\]\[0\] is 1.0 .*in \[0, 1\)"),
    ("betas not a pair", lambda ps, o: Adam([{"params": [ps[0]], "betas": 0.9}]),
     TypeError, r"Adam: param_groups\[0\]\['betas'\] is 0.9 .*expected a pair"),
    ("bad eps", lambda ps, o: AdamW([{"params": [ps[0]], "eps": -1e-8}]),
     ValueError, r"param_groups\[0\]\['eps'\] is -1e-08"),
    ("bad decay", lambda ps, o: AdamW([{"params": [ps[0]], "weight_decay": math.inf}]),
     ValueError, r"param_groups\[0\]\['weight_decay'\] is inf"),
    ("bad default", lambda ps, o: AdamW([ps[0]], lr=-0.1),
     ValueError, "AdamW: lr is -0.1"),
    ("a single Var", lambda ps, o: AdamW(ps[0]),
     TypeError, r"AdamW: params is one parameter .*\(wrap it in a list\)"),
    ("a single dict", lambda ps, o: AdamW({"params": [ps[0]]}),
     TypeError, r"AdamW: params is a dict.*wrap one group in a list"),
    ("a set", lambda ps, o: AdamW({ps[0]}), TypeError, "AdamW: params is a set"),
    ("a mix", lambda ps, o: AdamW([ps[0], {"params": [ps[1]]}]),
     TypeError, r"AdamW: params\[1\] is a dict among parameters.*not a mix"),
    ("a non-Var", lambda ps, o: AdamW([{"params": [np.ones(2)]}]),
     TypeError, r"AdamW: param_groups\[0\]\['params'\]\[0\] is a plain numpy.ndarray"),
    ("store with a tape", lambda ps, o: AdamW(ps[0].tape, store=ps[0].tape),
     TypeError, "AdamW: store= is given with a tape"),
]


@pytest.mark.parametrize("case", CONSTRUCTION, ids=[c[0] for c in CONSTRUCTION])
def test_bad_groups_at_construction(case):
    _, make, error, match = case
    tp, ps = _tape()
    other = g.Tape().param(np.ones(2))
    n = len(tp)
    with pytest.raises(error, match=match):
        make(ps, other)
    assert len(tp) == n  # nothing recorded on the tape


def test_a_non_parameter_in_a_group(bname):
    tp, ps = _tape(bname)
    c = tp.const(np.ones(2))
    with pytest.raises(ValueError, match=r"AdamW: param_groups\[1\]\['params'\]\[0\]: .*"
                                         "'const' node; expected a parameter"):
        AdamW([{"params": [ps[0]]}, {"params": [c]}])


def _opt():
    tp, ps = _tape()
    opt = AdamW([{"params": [ps[0]], "weight_decay": 0.1},
                 {"params": [ps[1]], "lr": 3e-3, "weight_decay": 0.0}], lr=1e-3)
    return tp, ps, opt


WRITES = [  # (group key, value, error, message)
    ("lr", -1.0, ValueError, r"AdamW: param_groups\[1\]\['lr'\] is -1.0"),
    ("lr", "fast", TypeError, r"AdamW: param_groups\[1\]\['lr'\] is 'fast'"),
    ("lr", math.nan, ValueError, r"param_groups\[1\]\['lr'\] is nan"),
    ("betas", (0.9, 1.0), ValueError, r"param_groups\[1\]\['betas'\]\[1\] is 1.0"),
    ("betas", [0.9], TypeError, r"param_groups\[1\]\['betas'\] is a list; expected a pair"),
    ("eps", -1.0, ValueError, r"param_groups\[1\]\['eps'\] is -1.0"),
    ("weight_decay", math.inf, ValueError, r"param_groups\[1\]\['weight_decay'\] is inf"),
    ("params", [], TypeError, r"param_groups\[1\]\['params'\] cannot be assigned; add "
                              "parameters with add_param_group"),
    ("momentum", 0.9, ValueError, r"AdamW: param_groups\[1\] has no key 'momentum'; expected "
                                  r"one of \['lr', 'betas', 'eps', 'weight_decay'\]"),
]


@pytest.mark.parametrize("case", WRITES, ids=[f"{c[0]}={c[1]!r}" for c in WRITES])
def test_bad_writes_to_param_groups_change_nothing(case):
    key, value, error, match = case
    _, _, opt = _opt()
    before = _snapshot(opt)
    with pytest.raises(error, match=match):
        opt.param_groups[1][key] = value
    assert _snapshot(opt) == before


def test_other_refusals_change_nothing(bname):
    tp, ps, opt = _opt()
    before = _snapshot(opt)
    grp = opt.param_groups[0]
    with pytest.raises(KeyError):
        _ = grp["momentum"]
    with pytest.raises(TypeError, match=r"param_groups\[0\]: keys cannot be removed"):
        del grp["lr"]
    with pytest.raises(ValueError, match="AdamW.lr: lr is -1.0"):
        opt.lr = -1.0
    with pytest.raises(TypeError, match="AdamW.add_param_group: param_group is a list"):
        opt.add_param_group([ps[2]])
    with pytest.raises(ValueError, match=r"AdamW.add_param_group: param_groups\[2\]\['params'\]"
                                         r"\[0\] .* is registered already"):
        opt.add_param_group({"params": [ps[0]]})
    with pytest.raises(ValueError, match=r"AdamW.add_param_group: param_groups\[2\] has key "
                                         "'nesterov'"):
        opt.add_param_group({"params": [ps[2]], "nesterov": True})
    with pytest.raises(ValueError, match=r"add_param_group: param_groups\[2\]\['lr'\] is -2.0"):
        opt.add_param_group({"params": [ps[2]], "lr": -2.0})
    with pytest.raises(ValueError, match="belongs to another tape"):
        opt.add_param_group({"params": [g.Tape(bname).param(np.ones(2))]})
    with pytest.raises(ValueError, match=r"AdamW.set_clip: rule is 'Torch'"):
        opt.set_clip(1.0, rule="Torch")
    assert _snapshot(opt) == before
    tp.backward(g.sum(ps[0] * ps[1]))
    opt.step()
    before = _snapshot(opt)
    with pytest.raises(RuntimeError, match=r"add_param_group: 1 step\(s\) were already taken"):
        opt.add_param_group({"params": [ps[2]]})
    assert _snapshot(opt) == before


def test_state_of_another_group_layout_is_refused(tmp_path):
    tp, ps, opt = _opt()
    tp.backward(g.sum(ps[0] * ps[1]))
    opt.step()
    state = opt.state_dict()
    one = AdamW([ps[0], ps[1]], lr=1e-3)  # the same parameters in one group
    before = _snapshot(one)
    with pytest.raises(ValueError, match=r"AdamW.load_state_dict: the state has 2 parameter "
                                         r"group\(s\), parameters in groups \[0, 1\]; this "
                                         r"optimizer has 1, parameters in groups \[0, 0\]"):
        one.load_state_dict(state)
    assert _snapshot(one) == before
    swapped = AdamW([{"params": [ps[0]]}, {"params": [ps[1]]}], lr=1e-3)
    bad = dict(state, **{"group.1.hyper.lr": np.array(-1.0)})
    before = _snapshot(swapped)
    with pytest.raises(ValueError, match=r"load_state_dict: group.1.hyper.lr is -1.0"):
        swapped.load_state_dict(bad)
    assert _snapshot(swapped) == before
    two = AdamW([{"params": [ps[0]]}, {"params": [ps[1]]}], lr=1e-3)
    legacy = one.state_dict()
    with pytest.raises(ValueError, match="the state has 1 parameter group"):
        two.load_state_dict(legacy)
