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


def test_a_run_for_the_cluster_is_handed_over_once_its_handle_is_written(home: Path) -> None:
    """`run --detach` of a run the head node or Slurm keeps returns once its handle is in a new
    options.json (a resumed run's earlier one does not count), or once it is queued here."""
    import os

    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.detach import Handover, handover

    store = StateStore(home)
    store.make_run_dir("r1")
    options = store.run_dir("r1") / "options.json"
    assert handover(store, "r1") is None
    options.write_text(json.dumps({"cluster": "c"}))  # recorded, not yet submitted
    assert handover(store, "r1") is None
    options.write_text(json.dumps({"cluster": "c", "handle": {"kind": "head", "ref": "7"}}))
    earlier = options.stat().st_mtime_ns
    assert handover(store, "r1", before=earlier) is None  # the earlier attempt's, as a resume finds it
    os.utime(options, ns=(earlier + 10**9, earlier + 10**9))  # written again by the background ddpctl
    assert handover(store, "r1", before=earlier) is Handover.ON_CLUSTER
    store.make_run_dir("r2")
    (store.run_dir("r2") / "queued.json").write_text("{}")
    assert handover(store, "r2") is Handover.QUEUED
