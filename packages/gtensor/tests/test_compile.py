"""Every kernel's CUDA source compiles for sm_90 (nvcc, or NVRTC from its wheel): no GPU needed."""

from __future__ import annotations

from gtensor.cuda_source import module_source
from gtensor.runtime import available_compiler, compile_for_device


def test_module_compiles_for_sm90():
    # NOTE: no skip here: the nox session guarantees a compiler (nvcc or the NVRTC wheel).
    assert available_compiler() is not None, (
        "no CUDA compiler: install the CUDA toolkit (nvcc) or `pip install nvidia-cuda-nvrtc`")
    compile_for_device(module_source(), "sm_90")
