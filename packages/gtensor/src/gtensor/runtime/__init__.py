"""Runtimes that compile and launch gtensor kernel modules: ``sim`` (CPU) and ``cuda`` (GPU)."""

from gtensor.runtime.args import check_args, check_launch_dims
from gtensor.runtime.compile_check import available_compiler, compile_for_device
from gtensor.runtime.cuda import CudaModule
from gtensor.runtime.sim import SimModule

__all__ = [
    "CudaModule",
    "SimModule",
    "available_compiler",
    "check_args",
    "check_launch_dims",
    "compile_for_device",
]
