"""The kernel cache verifies what it loads, never caches a failed or empty build, writes
files others may read but not write, and refuses folders others could have written."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest
from gtensor.kernels import Kernel, params
from gtensor.runtime import cache, sim

KERNEL = Kernel("k_cache_probe", params("double* y, long long n"),
                "    for (long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = 2.0;")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GTENSOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _build():
    return sim.build(KERNEL.source(), [KERNEL])


def test_a_build_is_recorded_and_private(cache_dir):
    key, lib = _build()
    meta = json.loads(lib.with_suffix(".json").read_text())
    assert meta["size"] == lib.stat().st_size > 0 and len(meta["sha256"]) == 64
    assert stat.S_IMODE(lib.stat().st_mode) == 0o644
    assert not list(lib.parent.glob("*.tmp"))
    assert _build() == (key, lib)  # found, verified, not rebuilt


@pytest.mark.parametrize("damage", ["truncate", "garbage", "no-record"])
def test_a_damaged_entry_is_rebuilt_once_with_a_message(cache_dir, damage, capsys):
    key, lib = _build()
    good = lib.read_bytes()
    if damage == "truncate":
        lib.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        lib.write_bytes(bytes(reversed(good)))
    else:
        lib.with_suffix(".json").unlink()
    assert _build() == (key, lib)
    assert "rebuilding it" in capsys.readouterr().err
    assert cache.verified(lib) and lib.stat().st_size == len(good)
    _build()
    assert "rebuilding" not in capsys.readouterr().err  # once


def test_an_empty_or_failed_build_is_never_cached(cache_dir, monkeypatch):
    monkeypatch.setattr(sim, "_run_compiler", lambda command, src, out: None)  # exits 0, no output
    with pytest.raises(RuntimeError, match="wrote an empty library"):
        _build()
    assert not list((cache_dir / "sim").glob("*.so")) and not list(
        (cache_dir / "sim").glob("*.tmp"))

    def failing(command, src, out):
        raise RuntimeError("sim: compiling the kernel module failed")

    monkeypatch.setattr(sim, "_run_compiler", failing)
    with pytest.raises(RuntimeError, match="compiling the kernel module failed"):
        _build()
    assert not list((cache_dir / "sim").glob("*.so"))


def test_a_folder_others_can_write_is_refused(cache_dir):
    _build()
    os.chmod(cache_dir / "sim", 0o777)
    with pytest.raises(RuntimeError, match=r"writable by group or others .* chmod go-w"):
        _build()
    os.chmod(cache_dir / "sim", 0o755)
    _build()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to give a cache file to another user")
def test_a_library_of_another_user_is_refused(cache_dir):
    key, lib = _build()
    os.chown(lib, 65534, 65534)
    with pytest.raises(RuntimeError, match="belongs to another user"):
        _build()


def test_an_uncreatable_cache_names_the_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GTENSOR_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(RuntimeError, match="set GTENSOR_CACHE_DIR to a directory you own"):
        _build()


def test_the_key_covers_the_shared_runtime_header():
    """sim's and cpu's units hold common_runtime.h's text itself (not an #include), so the
    cache key (a hash of the unit) changes with it."""
    from gtensor.runtime import cpu

    common = sim.HEADER_PATH.with_name("common_runtime.h").read_text()
    for unit in (sim.translation_unit(KERNEL.source(), [KERNEL]),
                 cpu.kernel_unit(KERNEL.source(), [KERNEL]), cpu.runtime_unit()):
        assert common in unit and not re.search(r'^#include "', unit, re.M)


def test_a_first_build_prints_one_line_and_a_cached_one_nothing(cache_dir, capfd):
    """The first compile says what, where and roughly how long; a warm cache is silent."""
    key, lib = _build()
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(r"gtensor: compiling 1 sim kernels \(CUDA source on the CPU, g\+\+\) "
                        r"\(first use; about \d+ s\), cached in " + re.escape(str(cache_dir))
                        + r"/sim", err[0]), err[0]
    assert json.loads(lib.with_suffix(".json").read_text())["seconds"] > 0
    assert _build() == (key, lib)
    assert capfd.readouterr().err == ""  # warm: nothing


def test_the_estimate_is_the_last_build_recorded_here(cache_dir, capfd):
    folder = cache.directory("probe")
    (folder / "old.json").write_text(json.dumps({"size": 1, "sha256": "x", "seconds": 42.4}))

    def fake_compiler(src, out):
        out.write_bytes(b"not really a library")

    cache.library("probe", "k1", "int x;", fake_compiler, "the probe module")
    line = capfd.readouterr().err.strip()
    assert line == ("gtensor: compiling the probe module (first use; about 42 s), cached in "
                    f"{folder}")
    cache.library("probe", "k1", "int x;", fake_compiler, "the probe module")
    assert capfd.readouterr().err == ""
