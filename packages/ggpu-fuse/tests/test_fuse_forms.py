"""Fusion asks a launch's form (``Kernel.form``), never its kind: the kind is a label (and what
``fuse(alone=...)`` names); the form says whether a launch fuses, its maps and statements."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
from ggpu_fuse.analysis import analyse
from gtensor.dtypes import F64
from gtensor.kernels import Kind
from gtensor.ops.elementwise import EXP, form_kernel
from gtensor.ops.forms import GATHER, MAP, RANDOM, Product
from gtensor.recording import Launch

SRC = Path(__file__).resolve().parents[1] / "src" / "ggpu_fuse"


def _launch(kernel, *args) -> Launch:
    return Launch(kernel, (1, 1, 1), (1, 1, 1), tuple(args), "t", lambda: None)


def kind_dispatch(text: str) -> list[str]:
    """The code lines of ``text`` that test a launch's kind, or name a kind member, other than
    the ``alone`` list and the generated kernels' ``Kind.OTHER`` label."""
    out = []
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        if "alone" in code:
            continue
        members = [m for m in re.findall(r"\bKind\.([A-Z_]+)", code) if m != "OTHER"]
        if members or re.search(r"\.kind\s*(?:is\b|==|!=|in\b|not\b)", code):
            out.append(line.strip())
    return out


def test_the_kind_scan_can_fail():
    for line in ("if info.kind is Kind.MATMUL:", "elif r.kind in FUSABLE:",
                 "x = Kind.REDUCE", "ok = launch.kernel.kind != k"):
        assert kind_dispatch(line) == [line], line
    assert not kind_dispatch("if infos[pick].kind in alone:\n# Kind.MATMUL in a comment")
    assert not kind_dispatch("kernel = Kernel(name, params, body, Kind.OTHER, calls)")


def test_fusion_source_reads_no_kind():
    """The only kind fusion tests is against the user's ``alone`` list (the planner); the
    generated kernels are labelled ``Kind.OTHER``; nothing else dispatches on a kind."""
    files = sorted(SRC.glob("*.py"))
    assert len(files) >= 6
    found = [f"{f.name}: {line}" for f in files for line in kind_dispatch(f.read_text())]
    assert not found, "fusion dispatches on kinds:\n" + "\n".join(found)


def test_a_launch_fuses_by_its_form_whatever_its_kind():
    """A map kernel labelled OTHER fuses (its form is Map); the same kernel with an opaque
    form, or reading int64 data, keeps its launch; matmul's form fuses one product only."""
    x, y = np.arange(4.0), np.zeros(4)
    k = form_kernel(Kind.MAP, "k_e_f64", F64, EXP[F64])
    other = dataclasses.replace(k, kind=Kind.OTHER)
    info = analyse(0, _launch(other, x, y, 4))
    assert info.form is MAP and info.fusable and info.aligned("x") and info.out_identity
    for form in (GATHER, RANDOM):
        assert not analyse(0, _launch(dataclasses.replace(k, form=form), x, y, 4)).fusable
    typed = dataclasses.replace(k, params=tuple(
        dataclasses.replace(p, ctype="const long long*") if p.name == "x" else p
        for p in k.params))
    assert not analyse(0, _launch(typed, np.arange(4), y, 4)).fusable
    assert not analyse(0, _launch(dataclasses.replace(k, form=None), x, y, 4)).fusable

    mm = next(kk for kk in _matmul_kernels() if kk.form.inner == "plain")
    a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.zeros((2, 4))
    one = analyse(0, _launch(mm, a, b, c, 1, 2, 3, 4, 0, 1))
    assert isinstance(one.form, Product) and one.fusable and one.transposed == {"b": b}
    assert one.row_aligned("a", 2) and not one.row_aligned("b", 2)
    assert not analyse(0, _launch(mm, a, b, c, 2, 1, 3, 4, 0, 0)).fusable
    opaque = dataclasses.replace(mm, form=GATHER)  # the MATMUL kind does not make it fuse
    assert opaque.kind is Kind.MATMUL
    assert not analyse(0, _launch(opaque, a, b, c, 1, 2, 3, 4, 0, 0)).fusable


def _matmul_kernels():
    from gtensor.ops import REGISTRY

    return list(REGISTRY["matmul"].kernel_set(F64).kernels)
