"""Atomic writes: a failure at any point leaves the previous file intact and no debris."""

from __future__ import annotations

import os
import stat

import pytest
from gtensor.files import write_atomic


def test_writes_exactly_the_path_with_normal_permissions(tmp_path):
    path = tmp_path / "out"
    write_atomic(path, lambda f: f.write(b"hello"))
    assert path.read_bytes() == b"hello"
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace"])
def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch, fail_at):
    path = tmp_path / "ckpt"
    path.write_bytes(b"old contents")

    def write(f):
        f.write(b"new but incomplete")
        if fail_at == "write":
            raise OSError(28, "No space left on device")

    if fail_at == "fsync":
        monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "EIO")))
    if fail_at == "replace":
        monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(27, "EFBIG")))
    with pytest.raises(OSError):
        write_atomic(path, write)
    assert path.read_bytes() == b"old contents"
    assert os.listdir(tmp_path) == ["ckpt"]
