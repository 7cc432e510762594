"""Broken state, full disks and secrets (issue 16): what a user cannot get out of without editing
files by hand, tested with the real CLI.

- a damaged cluster state file (truncated, garbled, not ddpctl's shape): `status` shows it as
  damaged, `run` refuses in one line, `down` cleans up from what can still be read (local: the
  processes by their marker; aws: the resources by tag, on the moto server);
- a damaged run record: `runs` lists it as damaged, `run --resume` refuses in one line;
- temp files of an interrupted state write are removed;
- the state home is private: folders 0700, records and logs 0600;
- secrets (`run -e KEY`, `--env-file`): the ranks get the value, no record, no `--dry-run` and no
  `--json` shows it;
- a full disk (a small tmpfs; needs root to mount it): `run` fails in one line and leaves no
  process behind, also when the disk fills up mid-run, and `down` still works.

Its tests that start processes (real parts) are in tests/integration/test_broken_state.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.infra.model.env_vars import run_env
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.runs.options import RunOptions
from ddpctl.infra.runs.prepare import prepare
from tests.support.specs import cluster_spec


def test_env_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "x.env"
    path.write_text("A=1\n  # note\nB= two words \nC\n\nD=x=y\n")
    env, secret = run_env(("E=5", "A=override"), (str(path),), environ={"C": "from-env"})
    assert env == {"A": "override", "B": "two words", "C": "from-env", "D": "x=y", "E": "5"}  # as python-dotenv
    assert secret == {"B", "C", "D"}  # A was given on the command line: not a secret any more
    path.write_text("1BAD=x\n")
    with pytest.raises(UsageError, match="invalid environment variable name '1BAD' in --env-file"):
        run_env((), (str(path),), environ={})


def test_secrets_go_to_sbatch_in_a_file_not_the_script(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41: an sbatch run takes secrets; their values go in the plan's secrets file (written 0600 on
    the login node, read and removed by the job), never into the script, its record or its dry run."""
    store = StateStore(home)
    head = NodeInfo(
        name="login",
        host="10.0.0.1",
        workdir="/home/u/ddpctl",
        bundle_dir="/home/u/b",
        python="/home/u/venv/bin/python",
        ssh=Host(name="login", address="10.0.0.1"),
    )
    spec = cluster_spec(name="slurm", provider="onprem", inventory="/dev/null")
    store.save(ClusterState(spec=spec, cluster_id="abc", status="up", nodes=[head], launcher="sbatch"))
    monkeypatch.setenv("TOKEN_X", "s3cr3t-value")
    plan = prepare(RunOptions(job="mnist", name="slurm", env=("TOKEN_X", "PLAIN=1")), store).plan
    assert dict(plan.secrets) == {"TOKEN_X": "s3cr3t-value"}
    assert plan.secrets_file == f"/home/u/ddpctl/slurm/ddpctl-{plan.run_id}.secrets"
    assert "s3cr3t-value" not in plan.script and "export PLAIN=1" in plan.script
    shown = "\n".join(plan.dry_run_lines()) + repr(plan) + repr(plan.to_dict())
    assert "s3cr3t-value" not in shown and "TOKEN_X" in shown


def test_a_script_of_ones_own_through_sbatch_that_is_not_there_is_one_line(home: Path, tmp_path: Path) -> None:
    """sbatch runs a user's script too (issue 37, tests/unit/test_sbatch_plan.py); a script that is
    not there, or a --workdir that does not hold it, is one line before anything is shipped."""
    store = StateStore(home)
    head = NodeInfo(
        name="login", host="10.0.0.1", workdir="/w", bundle_dir="/w/b", ssh=Host(name="login", address="10.0.0.1")
    )
    spec = cluster_spec(name="slurm", provider="onprem", inventory="/dev/null")
    store.save(ClusterState(spec=spec, cluster_id="abc", status="up", nodes=[head], launcher="sbatch"))
    missing = tmp_path / "train.py"
    with pytest.raises(UsageError, match=f"^script '{missing}' does not exist: give the path to a Python file$"):
        prepare(RunOptions(job=str(missing), name="slurm"), store)
    missing.write_text("print('hi')\n")
    (tmp_path / "other").mkdir()
    with pytest.raises(UsageError, match="^--workdir .*other does not contain .*train.py: give the directory"):
        prepare(RunOptions(job=str(missing), name="slurm", workdir=str(tmp_path / "other")), store)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_secret_values_are_one_line() -> None:
    with pytest.raises(UsageError, match="must be one line"):
        run_env(("K",), (), environ={"K": "a\nb"})
