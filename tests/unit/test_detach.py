"""Detached runs and `ddpctl stop` (issue 15), on the local provider with real runs: `run --detach`
returns once the run has started, the run goes on in a session of its own (no terminal reaches it),
`runs` shows it running, `logs --follow` reattaches, and `stop` stops it everywhere as Ctrl-C does.

Its tests that start processes (real parts) are in tests/integration/test_detach.py.
"""

from __future__ import annotations

import json
from pathlib import Path


def test_stop_says_how_a_run_that_ended_by_itself_ended(home: Path) -> None:
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.detach import ended_as

    store = StateStore(home)
    for result, said in (
        ({"exit_code": 0, "interrupted": False}, "succeeded"),
        ({"exit_code": 1, "interrupted": False}, "failed (exit 1)"),
        ({"exit_code": 130, "interrupted": True}, "stopped"),
    ):
        (home / "runs" / "r1").mkdir(parents=True, exist_ok=True)
        (home / "runs" / "r1" / "run.json").write_text(json.dumps({"result": result}))
        assert ended_as(store, "r1") == said
