"""nox sessions for the grad monorepo.

`nox` (no arguments) runs what CI runs: lint, every package's unit tests on every backend
(``suite``: one virtualenv per package, the backends one after another in it), the
cross-package parity matrix on every backend and the docs' examples (``matrix``), and the LoRA
oracle. The cuda backend runs where an NVIDIA GPU is and is skipped with the reason elsewhere.
Each package's session installs only its package and the siblings its pyproject declares,
which proves a user can install just the layers they need. ``unit(package, backend)`` and
``parity(backend)`` run one backend alone.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox
import nox.command
import nox.virtualenv

nox.needs_version = ">=2024.10.9"
nox.options.error_on_external_run = True
# pip-based virtualenvs (nox's default backend). NOTE: not uv - uv ignores this machine's pip
# configuration, so torch==2.13.0 would come as a multi-GB CUDA download instead of the CPU wheel.
nox.options.default_venv_backend = "virtualenv"
nox.options.sessions = ["lint", "suite", "matrix", "lora_oracle"]

ROOT = Path(__file__).parent
BACKENDS = ["numpy", "sim", "cuda", "cpu"]
TORCH = "torch==2.13.0"  # exactly this version: a CPU wheel on these machines
# A full run builds 12 virtualenvs (5 with torch): each is deleted when its session ends unless
# this is set (then `nox -r` can reuse them).
KEEP_VENVS = os.environ.get("GRAD_NOX_KEEP_VENVS") == "1"


def _pyproject(package: str) -> dict:
    return tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())


def _packages() -> list[str]:
    """Packages under packages/, bottom layer first (dependency order)."""
    found = {p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml")}
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in _siblings(name, found):
            visit(dep)
        order.append(name)

    for name in sorted(found):
        visit(name)
    return order


def _siblings(package: str, found: set[str]) -> list[str]:
    """Sibling packages named in ``package``'s dependencies."""
    deps = _pyproject(package)["project"].get("dependencies", [])
    names = [d.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
             for d in deps]
    return [n for n in names if n in found]


def _closure(package: str) -> list[str]:
    """``package`` and every sibling it needs, bottom layer first."""
    found = set(_packages())
    out: list[str] = []

    def visit(name: str) -> None:
        for dep in _siblings(name, found):
            visit(dep)
        if name not in out:
            out.append(name)

    visit(package)
    return out


def _has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible (nvidia-smi lists one)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def _has_nvcc() -> bool:
    return bool(shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists())


def _discard_venv(session: nox.Session) -> None:
    """Delete ``session``'s own virtualenv under .nox (never a --no-venv/passthrough one)."""
    env = session.virtualenv
    if KEEP_VENVS or type(env) is not nox.virtualenv.VirtualEnv or not env.location:
        return
    location = Path(env.location).resolve()
    if location.parent.name == ".nox" and location.is_dir():
        shutil.rmtree(location, ignore_errors=True)


def _one_shot(fn):
    """Session decorator: the session's virtualenv is deleted when it ends, pass or fail."""

    @functools.wraps(fn)
    def run(session: nox.Session, *args, **kwargs) -> None:
        try:
            fn(session, *args, **kwargs)
        finally:
            _discard_venv(session)

    return run


BUILD_BACKEND = "setuptools>=68"  # every package's [build-system] requires exactly this


def _install(session: nox.Session, packages: list[str], extras: dict[str, str]) -> None:
    """Editable installs of ``packages`` (siblings resolve to each other, never to PyPI).

    The build backend is installed into the venv once and the packages are built against it
    (``--no-build-isolation``): an isolated build env per package was half of an install's
    time."""
    args = []
    for name in packages:
        extra = extras.get(name)
        args += ["-e", f"packages/{name}[{extra}]" if extra else f"packages/{name}"]
    session.install(BUILD_BACKEND)
    session.install("--no-build-isolation", *args)


def _test_env(backend: str) -> dict[str, str]:
    env = {"GRAD_TEST_BACKEND": backend}
    if os.environ.get("CI"):
        env["HYPOTHESIS_PROFILE"] = "ci"
    return env


@nox.session
@_one_shot
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


def _unit_install(session: nox.Session, package: str, cuda: bool) -> None:
    """``package`` and its siblings (test extra; gtensor's cuda extra when ``cuda``)."""
    extras = {package: "test"}
    if cuda:
        extras["gtensor"] = "cuda" if package != "gtensor" else "test,cuda"
    _install(session, _closure(package), extras)
    if package in ("gtensor", "gemit") and not _has_nvcc():
        # the CUDA source (gemit: the emitted grad) must compile for sm_90 in every run: NVRTC
        # from its wheel stands in
        session.install("nvidia-cuda-nvrtc")


def _backends_here(session: nox.Session) -> list[str]:
    """Every backend this machine runs (cuda only with a GPU; the skip is logged)."""
    if _has_gpu():
        return BACKENDS
    session.log("cuda backend skipped: no NVIDIA GPU on this machine (it is tested where one is)")
    return [b for b in BACKENDS if b != "cuda"]


def _run_each(session: nox.Session, runs: list[tuple[str, list[str], dict[str, str]]]) -> None:
    """Run every (label, pytest args, env) even when one fails; fail the session at the end
    naming the failed ones."""
    failed = []
    for label, args, env in runs:
        try:
            session.run("pytest", *args, *session.posargs, env=env)
        except nox.command.CommandFailed:
            failed.append(label)
    if failed:
        session.error(f"failed: {', '.join(failed)}")


@nox.session
@nox.parametrize("package", _packages())
@_one_shot
def suite(session: nox.Session, package: str) -> None:
    """One package's unit tests on every backend here, in one venv (what CI runs)."""
    backends = _backends_here(session)
    _unit_install(session, package, "cuda" in backends)
    _run_each(session, [(f"{package} on {b}", [f"packages/{package}/tests"], _test_env(b))
                        for b in backends])


@nox.session
@nox.parametrize("backend", BACKENDS)
@nox.parametrize("package", _packages())
@_one_shot
def unit(session: nox.Session, package: str, backend: str) -> None:
    """One package's unit tests on one backend, in a venv holding only what it declares."""
    if backend == "cuda" and not _has_gpu():
        session.skip("no NVIDIA GPU on this machine: the cuda backend is tested where one is")
    _unit_install(session, package, backend == "cuda")
    session.run("pytest", f"packages/{package}/tests", *session.posargs, env=_test_env(backend))


def _parity_runs(backend: str) -> list[tuple[str, list[str], dict[str, str]]]:
    """The parity matrix's pytest runs for one backend (sim: again in reverse thread order)."""
    runs = [(f"parity {backend}", ["tests-integration"], _test_env(backend))]
    if backend == "sim":
        # the race detector (docs/testing.md): again with every block's threads in reverse order
        reverse = _test_env(backend) | {"GTENSOR_SIM_SCHEDULE": "reverse"}
        runs += [("gtensor parity sim reversed", ["packages/gtensor/tests/test_parity.py"],
                  reverse),
                 ("parity sim reversed", ["tests-integration"], reverse)]
    return runs


def _parity_install(session: nox.Session, cuda: bool) -> None:
    """Every package (gtensor's test extra; cuda with a GPU) and torch."""
    extras = {"gtensor": "test,cuda" if cuda else "test"}
    _install(session, _packages(), extras)
    session.install(TORCH)


# the gtape README's digits classifier; docs/tape.md's from_torch example
DOCS_EXTRAS = ("pytest>=8", "scikit-learn>=1.3", TORCH)
_DOCS_RUN = ("docs examples", ["tests-docs"], _test_env("numpy"))


@nox.session
@_one_shot
def matrix(session: nox.Session) -> None:
    """The parity matrix on every backend here and the docs' examples, in one venv (CI)."""
    backends = _backends_here(session)
    _parity_install(session, "cuda" in backends)
    session.install(*DOCS_EXTRAS)
    _run_each(session, [run for b in backends for run in _parity_runs(b)] + [_DOCS_RUN])


@nox.session
@nox.parametrize("backend", BACKENDS)
@_one_shot
def parity(session: nox.Session, backend: str) -> None:
    """The cross-package parity matrix: every engine bitwise against the numpy tape."""
    if backend == "cuda" and not _has_gpu():
        session.skip("no NVIDIA GPU on this machine: the cuda column runs where one is")
    _parity_install(session, backend == "cuda")
    _run_each(session, _parity_runs(backend))


@nox.session
@_one_shot
def oracle(session: nox.Session) -> None:
    """Heavy oracles (not in the default run): large hypothesis profiles and slow tests."""
    _install(session, _packages(), {name: "test" for name in _packages()})
    session.install(TORCH)
    env = _test_env("sim") | {"HYPOTHESIS_PROFILE": "oracle"}
    session.run("pytest", "packages", "tests-integration", *session.posargs, env=env)


@nox.session
@_one_shot
def mutants(session: nox.Session) -> None:
    """Mutation testing of the definitions (not in the default run); see docs/testing.md."""
    _install(session, _packages(), {name: "test" for name in _packages()})
    session.run("python", "tools/mutants.py", *(session.posargs or ["--cap", "60", "--seed", "1"]))


@nox.session
@_one_shot
def lora_oracle(session: nox.Session) -> None:
    """Rung 3 against transformers' Qwen2 and PEFT on torch CPU (float64): its own venv."""
    _install(session, _closure("gdemos"), {"gdemos": "lora-oracle"})
    session.run("pytest", "packages/gdemos/tests/test_lora_oracle.py", *session.posargs,
                env=_test_env("numpy"))


@nox.session
@_one_shot
def docs(session: nox.Session) -> None:
    """Every ```python block of the READMEs and docs/ runs as written (also part of matrix)."""
    _install(session, _packages(), {})
    session.install(*DOCS_EXTRAS)
    _run_each(session, [_DOCS_RUN])


def _install_once(session: nox.Session, packages: list[str], extras: dict[str, str]) -> None:
    """``_install`` unless this (reused) venv already holds exactly these packages and extras.

    Editable installs follow source edits by themselves; only a changed pyproject.toml (or
    other packages/extras) needs a new install.
    """
    texts = {name: (ROOT / "packages" / name / "pyproject.toml").read_text() for name in packages}
    key = hashlib.sha256(json.dumps([packages, extras, texts], sort_keys=True).encode()).hexdigest()
    stamp = Path(session.virtualenv.location) / ".grad-install-stamp"
    if stamp.exists() and stamp.read_text() == key:
        session.log("reusing this environment: its packages and pyprojects are unchanged "
                    "(rm -r .nox/demo to rebuild it)")
        return
    session.log(f"installing {', '.join(packages)} (editable, with extras {extras}) and "
                "their dependencies: a minute or two on the first run")
    _install(session, packages, extras)
    stamp.write_text(key)


@nox.session(reuse_venv=True)
def demo(session: nox.Session) -> None:
    """The main job: the demo ladder on the CPU (every rung, one verdict line each)."""
    _install_once(session, _closure("gdemos"), {"gdemos": "demo"})  # the ladder's extras
    out = Path(session.posargs[0]) if session.posargs else ROOT / "out"  # git-ignored
    session.run("gdemos", "ladder", "--out", str(out))


@nox.session
@_one_shot
def bench(session: nox.Session) -> None:
    """Benchmarks against peers (not a test): writes tables under benchmarks/results/."""
    _install(session, _closure("gdemos"), {})
    session.install(TORCH)
    # the JAX column is optional: the benchmark leaves it out when jax does not install
    # (pinned: the version benchmarks/results/ae_sweep.md was measured with)
    session.run("python", "-m", "pip", "install", "jax==0.10.2", "jaxlib==0.10.2",
                success_codes=[0, 1])
    session.run("python", "benchmarks/bench_ae_step.py", *session.posargs)
