"""Every ```python block in the READMEs and docs runs as written (in a fresh namespace, in a
temporary working directory). A block that is not meant to run must use another fence
(```text, ```bash). A block whose first line is ``# continues the block above`` runs after
the blocks above it in that file (the code is joined: a walk-through split in steps)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([ROOT / "README.md", *ROOT.glob("packages/*/README.md"), *ROOT.glob("docs/*.md")])
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


CONTINUES = "# continues the block above"


def _blocks() -> list[tuple[str, str]]:
    out = []
    for path in FILES:
        code = ""
        for k, m in enumerate(BLOCK.finditer(path.read_text())):
            block = m.group(1)
            code = code + block if block.startswith(CONTINUES) else block
            out.append((f"{path.relative_to(ROOT)}#{k}", code))
    return out


BLOCKS = _blocks()


def test_there_are_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("name,code", BLOCKS, ids=[n for n, _ in BLOCKS])
def test_block_runs(name, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # run as a script runs: __main__ (dataclasses look their module up in sys.modules, and
    # cloudpickle ships __main__'s functions to Dask workers by value)
    exec(compile(code, name, "exec"), {"__name__": "__main__"})


def test_gtape_readme_example_on_every_backend(tmp_path, monkeypatch):
    """The gtape README's MLP regression lands on the same final loss on numpy, sim, cpu."""
    import gtensor

    monkeypatch.chdir(tmp_path)
    code = dict(BLOCKS)["packages/gtape/README.md#0"]
    assert 'BACKEND = "numpy"' in code
    finals = {}
    for name in gtensor.BACKENDS:
        if name == "cuda":
            continue  # the device run covers cuda (benchmarks/device_check.sh)
        ns: dict = {}
        exec(compile(code.replace('BACKEND = "numpy"', f'BACKEND = "{name}"'), name, "exec"), ns)
        finals[name] = ns["last"]
    assert len(set(finals.values())) == 1, finals
