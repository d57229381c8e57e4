"""Kernel kinds are objects (``gtensor.kernels.Kind``): no source compares a kind with a string."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gtensor.kernels import KINDS, Kernel, Kind

ROOT = Path(__file__).resolve().parents[3]
NAMES = "|".join(k.value for k in Kind)
_TEST = (r"\s*(?:==|!=|\bis\b(?:\s+not)?|\bin\b|\bnot\s+in\b)\s*[\(\[\{]?\s*"
         rf"(?:[\"'](?:{NAMES})[\"']\s*,?\s*)+")
# a ``.kind`` attribute (a kernel's, a launch's) compared with, or tested against, a kind's
# name; in modules that use kernel kinds, a bare ``kind`` too (elsewhere ``kind`` names other
# things: gverify's trace leaves "forward" / "backward" / "update" are a wire format)
ATTRIBUTE = re.compile(r"\.kind" + _TEST)
BARE = re.compile(r"\bkind" + _TEST)


def string_kind_comparisons(text: str) -> list[str]:
    """The lines of ``text`` that compare a kernel kind with a kind's name as a string."""
    kernel_module = "gtensor.kernels" in text or "from ..kernels" in text or \
        "from .kernels" in text
    return [line.strip() for line in text.splitlines()
            if ATTRIBUTE.search(line) or (kernel_module and BARE.search(line))]


def test_the_scan_finds_a_string_comparison():
    """The scan can fail: each spelling of a string comparison is found."""
    for line in ('if info.kind == "matmul":', "ok = k.kind in ('zip', 'copy')",
                 'return self.kind not in ("map",)', 'x = launch.kernel.kind is "fill"'):
        assert string_kind_comparisons(line) == [line], line
    bare = 'from gtensor.kernels import Kind\nif kind != "update":'
    assert string_kind_comparisons(bare) == ['if kind != "update":']
    assert not string_kind_comparisons("if info.kind is Kind.MATMUL:")
    assert not string_kind_comparisons('if host.dtype.kind in "biu":')


def test_no_source_compares_a_kernel_kind_with_a_string():
    files = sorted(ROOT.glob("packages/*/src/**/*.py"))
    assert len(files) > 100
    found = [f"{f.relative_to(ROOT)}: {line}" for f in files
             for line in string_kind_comparisons(f.read_text())]
    assert not found, "kernel kinds compared as strings:\n" + "\n".join(found)


def test_a_kernel_refuses_a_string_kind():
    with pytest.raises(TypeError, match="kind 'map' is not a gtensor.kernels.Kind"):
        Kernel("k_x_f64", (), "", "map")
    assert Kernel("k_x_f64", (), "", Kind.MAP).kind is Kind.MAP
    assert KINDS == tuple(Kind) and Kind("matmul") is Kind.MATMUL
