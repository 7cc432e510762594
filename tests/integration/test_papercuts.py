"""Issue 41's papercuts through the real ``ddpctl`` command: global flags after the command, run
ids never cut in a narrow terminal."""

from __future__ import annotations

import os
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
