"""Issue 41's papercuts through the real ``ddpctl`` command: global flags after the command, run
ids never cut in a narrow terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.cli import ddpctl

LONG_ID = "a-rather-long-run-id-for-a-narrow-terminal"


def test_global_flags_after_the_command(home: Path) -> None:
    quiet = ddpctl("status", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr  # no progress line
    loud = ddpctl("down", "--name", "nope", "-v")  # an error: with -v, its traceback too
    assert loud.returncode != 0 and "Traceback" in loud.stderr, loud.stderr
    plain = ddpctl("down", "--name", "nope")
    assert plain.returncode == loud.returncode and "Traceback" not in plain.stderr


def test_runs_never_cuts_a_run_id(home: Path) -> None:
    run = ddpctl("run", "message-passing", "--nodes", "2", "--run-id", LONG_ID)
    assert run.returncode == 0, run.stdout + run.stderr
    for columns in ("60", "80", "100"):
        table = ddpctl("runs", env={**os.environ, "COLUMNS": columns})
        assert table.returncode == 0, table.stderr
        assert LONG_ID in table.stdout, (columns, table.stdout)


def test_up_of_a_local_cluster_checks_torch_first(home: Path, tmp_path: Path) -> None:
    """A local cluster on a controller-only install came up, and its first run failed for want of
    torch: `up` now says so first, with the command that adds it, and creates nothing. The install:
    a venv holding this one's packages (ddpctl's editable install too), torch left out."""
    venv = tmp_path / "controller"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(("torch", "functorch", "triton", "nvidia")):
            (site / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    up = ddpctl_with(python, "up", "--nodes", "2")
    assert up.returncode == 2, up.stdout + up.stderr
    last = up.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: torch is not installed for ") and "pip install" in last, up.stderr
    assert not (home / "clusters" / "default.json").exists()


def ddpctl_with(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "ddpctl", *args], capture_output=True, text=True, timeout=120)


def test_a_configured_provider_is_not_run_locally_without_a_word(home: Path, tmp_path: Path) -> None:
    """`provider = "aws"` in ddpctl.toml was ignored by a `run` that brings its own cluster up (it
    planned a local one): now one line that says to `ddpctl up` first; nothing made."""
    (tmp_path / "ddpctl.toml").write_text('[cluster]\nprovider = "aws"\nssh_cidr = "203.0.113.7/32"\n')
    env = {k: v for k, v in os.environ.items() if k != "DDPCTL_CONFIG"}
    for args in (["run", "mnist", "--nodes", "2", "--dry-run"], ["run", "message-passing"]):
        result = ddpctl(*args, cwd=tmp_path, env=env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "ddpctl.toml's [cluster] says provider = 'aws'" in result.stderr.strip().splitlines()[-1]
    assert not home.exists()
    (tmp_path / "ddpctl.toml").write_text('[cluster]\nprovider = "local"\n')  # what run brings up: fine
    assert ddpctl("run", "mnist", "--dry-run", cwd=tmp_path, env=env).returncode == 0


def test_one_name_per_option_across_commands(home: Path) -> None:
    """`autodown` takes --name as every other command (NAME before DURATION still works), `metrics`
    takes --tail as `logs` does (--last still works)."""
    for args in (["autodown", "--name", "nope", "30m"], ["autodown", "nope", "30m"]):
        result = ddpctl(*args)
        assert result.returncode != 0 and "no cluster named 'nope'" in result.stderr, (args, result.stderr)
    both = ddpctl("autodown", "--name", "a", "b", "30m")
    assert both.returncode == 2 and "--name a and NAME b contradict" in both.stderr, both.stderr
    run = ddpctl("run", "message-passing", "--nodes", "1", "--run-id", "rtail1")
    assert run.returncode == 0, run.stderr
    for flag in ("--tail", "--last"):
        result = ddpctl("metrics", "rtail1", flag, "1")
        assert result.returncode == 0 or "no metric lines" in result.stderr, (flag, result.stderr)
