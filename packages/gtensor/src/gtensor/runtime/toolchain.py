"""The host C++ toolchain shared by the sim and cpu runtimes: finding the compiler, its
identity (part of every cache key), runtime headers as a translation unit holds them, and one
compile of a translation unit into a shared library."""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

INSTALL_HINT = "install g++ (Debian/Ubuntu: apt-get install g++) or set CXX to a C++17 compiler"
_LOCAL_INCLUDE = re.compile(r'^#include "([\w.]+)"[^\n]*\n', re.M)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one): how many
    compilers to run side by side."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def compiler_command() -> list[str]:
    """The C++ compiler command: $CXX (may carry arguments) or g++, resolved on PATH."""
    words = shlex.split(os.environ.get("CXX", "").strip() or "g++")
    path = shutil.which(words[0])
    if path is None:
        raise RuntimeError(f"C++ compiler {words[0]!r} not found: {INSTALL_HINT}")
    return [path, *words[1:]]


@functools.lru_cache(maxsize=8)
def compiler_identity(command: tuple[str, ...]) -> str:
    """Compiler path plus its ``--version`` output (part of the cache key)."""
    try:
        proc = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False)
    except OSError as exc:
        msg = f"cannot run C++ compiler {command[0]!r} ({exc}): {INSTALL_HINT}"
        raise RuntimeError(msg) from exc
    return " ".join(command) + "\n" + proc.stdout


def header_text(path: Path) -> str:
    """The runtime header at ``path`` as a translation unit holds it (sim's and cpu's): each
    ``#include "x.h"`` of a header next to it replaced by that header's text, all marked with
    ``#line``, so the unit compiles from anywhere and its hash (the cache key) covers them."""
    text = path.read_text()
    out, pos = [f'#line 1 "{path.name}"\n'], 0
    for m in _LOCAL_INCLUDE.finditer(text):
        resume = text.count("\n", 0, m.end()) + 1  # the line after the #include
        out += [text[pos:m.start()], header_text(path.with_name(m.group(1))),
                f'\n#line {resume} "{path.name}"\n']
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def compile_shared(who: str, command: Sequence[str], flags: Sequence[str], src: Path,
                   out: Path) -> None:
    """Compile the C++ translation unit ``src`` into the shared library ``out`` with
    ``flags``; RuntimeError naming ``who`` (the runtime) with the compiler's stderr on failure."""
    proc = subprocess.run([*command, *flags, "-x", "c++", str(src), "-o", str(out)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{who}: compiling the kernel module failed (source kept at "
                           f"{src}):\n{proc.stderr}")
