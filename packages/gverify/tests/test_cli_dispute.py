"""``gverify record | serve | audit | referee`` as a user runs them: a real ``gverify serve``
process on an ephemeral port, the audit's and the referee's exit codes, usage errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from gverify import cli, server

REC = ["--set", "steps=6", "--checkpoint-every", "3"]


def test_record_serve_audit_referee(tmp_path, child_env, capsys):
    honest, cheat = tmp_path / "honest", tmp_path / "cheat"
    assert cli.main(["record", str(honest), *REC]) == 0
    assert cli.main(["record", str(cheat), *REC, "--drill", "ulp", "--step", "4", "--op",
                     "matmul", "--phase", "backward"]) == 0
    assert "recorded" in capsys.readouterr().out
    proc = subprocess.Popen([sys.executable, "-m", "gverify", "serve", str(cheat), "--port",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env)
    try:
        line = proc.stdout.readline()  # printed once the socket listens
        url = re.search(r"http://[0-9.]+:[0-9]+", line)
        assert url, (line, proc.stderr.read() if proc.poll() is not None else "")
        v = tmp_path / "v.json"
        assert cli.main(["audit", url.group(), "--out", str(v), "--quiet"]) == 1
        out = capsys.readouterr().out
        assert out.startswith("dispute: step 4, phase backward, node ") and "(matmul)" in out
        verdict = json.loads(v.read_text())
        assert verdict["queries"]["total"] >= verdict["queries"]["phase1"] > 1
        assert cli.main(["referee", str(v)]) == 1
        assert capsys.readouterr().out.startswith("ruling: auditor")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    with server.Server(honest) as srv:
        v = tmp_path / "h.json"
        assert cli.main(["audit", srv.url, "--out", str(v), "--quiet", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["outcome"] == "agree"
        assert cli.main(["referee", str(v), "--json"]) == 0
        capsys.readouterr()
        liar = tmp_path / "liar.json"  # a lying auditor: the referee rules for the trainer
        assert cli.main(["audit", srv.url, "--out", str(liar), "--quiet", "--drill", "flip",
                         "--step", "5", "--bit", "3"]) == 1
        assert cli.main(["referee", str(liar)]) == 0
        assert capsys.readouterr().out.splitlines()[-1].startswith("ruling: trainer")


def test_usage_errors_exit_2(tmp_path, capsys):
    assert cli.main(["record", str(tmp_path / "r"), "--drill", "ulp", "--op", "tanh"]) == 2
    assert "--drill needs --step" in capsys.readouterr().err
    assert cli.main(["record", str(tmp_path / "r"), "--task", "nope"]) == 2
    assert "no task 'nope'" in capsys.readouterr().err
    assert cli.main(["record", str(tmp_path / "r"), "--set", "steps"]) == 2
    assert cli.main(["audit", "ftp://example.org", "--out", str(tmp_path / "v.json")]) == 2
    assert "expected http(s)://host:port" in capsys.readouterr().err
    assert cli.main(["serve", str(tmp_path / "nothing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert cli.main(["referee", str(tmp_path / "none.json")]) == 2
