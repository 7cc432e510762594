"""Repeated agent lines shown once on the terminal (issue 18, cli/repeats.py): the rule as a table of
line sequences and what the terminal shows of them, the wiring through ``Output`` and ``run
--all-lines``, and a real 3-node run whose torchrun agents all print the same start-up lines.
Its pure tests (no process beyond Python) are in tests/unit/test_repeated_lines.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.support.cli import ddpctl


@pytest.mark.slow
def test_three_nodes_start_up_lines_once(home: Path) -> None:
    """A real 3-node local run whose torchrun agents log at INFO (LOGLEVEL, which each agent inherits):
    each repeated start-up line on the terminal once, every rank's lines, the note before the first
    rank line; output.log and `ddpctl logs` with every node's copy."""
    env = {**os.environ, "LOGLEVEL": "INFO"}
    result = ddpctl("run", "message-passing", "--nodes", "3", "--run-id", "mprepeat", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout.splitlines()
    assert sum("Starting elastic_operator with launch configs:" in line for line in out) == 1
    assert sum(re.search(r"\bentrypoint +: .*message_passing\.py$", line) is not None for line in out) == 1
    for node in range(3):  # what differs per node is shown from each
        assert sum(f"/node{node}/logs/mprepeat" in line for line in out) == 1
        assert sum(f"group_rank={node}" in line for line in out) == 1
    for rank in (1, 2):
        assert f"[node{rank} r{rank}] rank {rank} received 42.0 from rank 0" in out
    assert sum("all_reduce OK (6.0 == 6.0)" in line for line in out) == 3

    notes = [i for i, line in enumerate(out) if line.startswith("ddpctl: ")]
    assert len(notes) == 1, result.stdout
    found = re.fullmatch(
        r"ddpctl: (\d+) repeated agent lines from [23] nodes not shown \(`ddpctl logs mprepeat` has them all; "
        r"`run --all-lines` shows them\)",
        out[notes[0]],
    )
    assert found, out[notes[0]]
    first_rank = next(i for i, line in enumerate(out) if re.match(r"\[node\d r\d\] ", line))
    assert notes[0] == first_rank - 1

    log = (home / "runs" / "mprepeat" / "output.log").read_text().splitlines()
    agent = re.compile(r"\[node\d\] ")
    hidden = sum(bool(agent.match(line)) for line in log) - sum(bool(agent.match(line)) for line in out)
    assert hidden == int(found.group(1)) > 0  # exactly what the note counts is missing from the terminal
    logs = ddpctl("logs", "mprepeat").stdout
    for node in range(3):
        assert re.search(rf"^\[node{node}\] .*Starting elastic_operator with launch configs:$", logs, re.M)
