"""gtensor.host_backend: the compiled cpu backend where a C++ compiler is found, else numpy."""

from __future__ import annotations

import shutil

import gtensor
import pytest


def test_a_machine_with_a_compiler_gets_the_cpu_backend(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    if shutil.which("g++") is None:
        pytest.skip("no g++ on PATH here")
    assert gtensor.host_backend() == "cpu"


def test_without_a_compiler_the_numpy_reference(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-gtensor-test")
    assert gtensor.host_backend() == "numpy"
