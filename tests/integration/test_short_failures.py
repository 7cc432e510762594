"""Short failures (issue 30, cli/failures.py): the terminal shows the first failing rank's own
traceback once, torchrun's root cause where no rank printed one, and a count of what it left out;
``output.log`` keeps every line. The rule on real captured outputs of failing runs
(tests/golden/fail-rank1-*.log: `ddpctl run ./fail.py --nodes 2`, rank 1 raising after
init_process_group; the same with torchelastic's ``@record``; rank 1 killed by SIGKILL), as a table,
through ``Output``, and one real failing run end to end.
Its pure tests (no process beyond Python) are in tests/unit/test_short_failures.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.cli import ddpctl
from tests.support.scripts import FAIL
from tests.support.short_failures import NOTE, TB


def test_a_failing_script_end_to_end(home: Path, tmp_path: Path) -> None:
    """A user's script failing on rank 1: the terminal has its traceback once, no ChildFailedError
    block, the count; `ddpctl logs` has every line."""
    (tmp_path / "fail.py").write_text(FAIL)
    res = ddpctl("run", "./fail.py", "--nodes", "2", "--run-id", "rshortfail", cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    out = res.stdout.splitlines()
    assert sum(line.endswith("ValueError: rank 1 fails on purpose") for line in out) == 1
    assert sum(TB in line for line in out) == 1
    assert not any("ChildFailedError" in line or "Root Cause" in line for line in out)
    notes = [m for m in map(NOTE.match, out) if m]
    assert len(notes) == 1 and notes[0][2] == "rshortfail"
    assert "failed on node1" in res.stderr
    logged = ddpctl("logs", "rshortfail").stdout.splitlines()
    assert (
        sum("ChildFailedError" in line for line in logged) >= 2
    )  # the failing agent's (the other may be stopped first)
    repeated = sum(int(m[1]) for m in map(re.compile(r"^ddpctl: (\d+) repeated agent line").match, out) if m)
    job_lines = [line for line in out if not line.startswith("ddpctl: ")]
    assert len(logged) == len(job_lines) + int(notes[0][1]) + repeated
