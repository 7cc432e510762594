"""The ranks' environment from a dotenv file and from the Python API (issue 37), on a real local run:
``--env-file`` read as python-dotenv reads a ``.env`` (``export``, quotes, inline comments), the API's
``env=`` a mapping of values and ``env_from=`` names passed through from the caller's environment;
secrets reach the ranks and no record. Pure cases: tests/unit/test_env_files.py."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest

import ddpctl
from tests.support.cli import ddpctl as cli

SECRET = "s3cr3t-" + uuid.uuid4().hex
SHOW = (
    "import hashlib, os\n"
    "for k in ('SEED', 'WANDB_API_KEY', 'HF_HOME', 'PLAIN'):\n"
    "    v = os.environ.get(k, '<unset>')\n"
    "    print(k, repr(v) if k in ('SEED', 'HF_HOME', 'PLAIN') else hashlib.sha256(v.encode()).hexdigest()[:16])\n"
)


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def test_dotenv_file_and_api_env_reach_the_ranks(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    dotenv = tmp_path / ".env"
    dotenv.write_text("export HF_HOME='/data/hf # kept'  # where the models go\nPLAIN=\"quoted value\" # note\n")
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("SEED", "from-my-shell")  # the mapping's value wins: env= means values
    lines: list = []
    result = ddpctl.run(
        str(script),
        nodes=1,
        run_id="renvapi001",
        env={"SEED": "7"},
        env_from=["WANDB_API_KEY"],
        env_files=[dotenv],
        on_line=lines.append,
        progress=None,
    )
    said = [line.text for line in lines if line.rank is not None]
    assert result.ok, said
    assert "SEED '7'" in said and f"WANDB_API_KEY {digest(SECRET)}" in said, said
    assert "HF_HOME '/data/hf # kept'" in said and "PLAIN 'quoted value'" in said, said
    options = json.loads((home / "runs" / "renvapi001" / "options.json").read_text())["options"]
    assert options["env"] == ["SEED=7", "WANDB_API_KEY"]  # the name passed through, not its value
    for path in home.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_a_bad_dotenv_line_is_one_error_line(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text('export GOOD="v"  # fine\nnot a variable\n')
    res = cli("run", "message-passing", "--dry-run", "--env-file", str(bad))
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        f"Error: --env-file {bad}, line 2: 'not a variable' is not KEY=VALUE (python-dotenv's format: KEY=VALUE, "
        "export KEY=VALUE, quoted values, # comments)"
    ], res.stderr
