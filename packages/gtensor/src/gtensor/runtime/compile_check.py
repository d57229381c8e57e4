"""Compile a kernel module for the GPU without a GPU: nvcc if present, else NVRTC from the wheel."""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

NVCC_FLAGS = ("--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true", "-std=c++17")
NVRTC_FLAGS = NVCC_FLAGS
_INSTALL_HINT = (
    "install the CUDA toolkit (nvcc) or the NVRTC wheel (pip install nvidia-cuda-nvrtc)"
)


def find_nvcc() -> str | None:
    """Path of nvcc on PATH or in /usr/local/cuda/bin, or None."""
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.access(default, os.X_OK) else None


def _site_dirs() -> list[str]:
    """Candidate site-packages directories (sys.path plus site's lists)."""
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some virtualenv builds lack it
        pass
    dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if d and os.path.isdir(d)]


def find_nvrtc() -> str | None:
    """Path of libnvrtc.so* from the nvidia-cuda-nvrtc wheel (or $CUDA_HOME/lib64), or None."""
    patterns = [os.path.join(d, "nvidia", "**", "libnvrtc.so*") for d in _site_dirs()]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    patterns.append(os.path.join(cuda_home, "lib64", "libnvrtc.so*"))
    for pattern in patterns:
        hits = sorted(p for p in glob.glob(pattern, recursive=True) if "builtins" not in p)
        if hits:
            return hits[-1]
    return None


def available_compiler() -> str | None:
    """The device compiler compile_for_device would use (nvcc or libnvrtc path), or None."""
    return find_nvcc() or find_nvrtc()


def _compile_nvcc(nvcc: str, source: str, arch: str) -> None:
    """Compile to a cubin with nvcc; RuntimeError with the log on failure."""
    with tempfile.TemporaryDirectory(prefix="gtensor-nvcc-") as tmp:
        src = Path(tmp) / "module.cu"
        src.write_text(source)
        cmd = [nvcc, f"-arch={arch}", *NVCC_FLAGS, "-cubin", "-o", str(Path(tmp) / "m.cubin")]
        proc = subprocess.run([*cmd, str(src)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc failed for {arch}:\n{proc.stderr}{proc.stdout}")


def _nvrtc_check(lib: ctypes.CDLL, status: int, what: str, log: str = "") -> None:
    """Raise RuntimeError for a non-zero NVRTC status."""
    if status != 0:
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        name = lib.nvrtcGetErrorString(status).decode()
        raise RuntimeError(f"NVRTC {what} failed ({name}):\n{log}")


def _compile_nvrtc(path: str, source: str, arch: str) -> None:
    """Compile with NVRTC (loaded via ctypes); RuntimeError with the program log on failure."""
    lib = ctypes.CDLL(path)
    prog = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(
        ctypes.byref(prog), source.encode(), b"module.cu", 0, None, None
    )
    _nvrtc_check(lib, status, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(f.encode() for f in NVRTC_FLAGS)]
        argv = (ctypes.c_char_p * len(opts))(*opts)
        status = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(max(size.value, 1))
        lib.nvrtcGetProgramLog(prog, buf)
        _nvrtc_check(lib, status, f"compile for {arch}", buf.value.decode(errors="replace"))
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def compile_for_device(source: str, arch: str = "sm_90") -> None:
    """Compile ``source`` for ``arch`` (no GPU needed); RuntimeError with the log on failure."""
    nvcc = find_nvcc()
    if nvcc:
        _compile_nvcc(nvcc, source, arch)
        return
    nvrtc = find_nvrtc()
    if nvrtc:
        _compile_nvrtc(nvrtc, source, arch)
        return
    raise RuntimeError(f"no CUDA device compiler found: {_INSTALL_HINT}")
