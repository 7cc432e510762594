"""Runs that go on on the head node after their ddpctl here was killed (issue 28), their pure parts:
where a resumed run's output goes on past this machine's log, and the queue that waits for such a
run (refused with --no-wait, queued meanwhile). Their real parts: tests/integration/test_head_supervisor.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

HEAD_LOG = [
    "[node1] REACH node0:29500 node1 ok",
    "[node0 r0] started rank 0",
    "[node1 r1] started rank 1",
    "[node0 r0] step 1",
]


@pytest.mark.parametrize(
    ("here", "first"),
    [
        ([], 0),
        (HEAD_LOG[:2], 2),  # a copy of the head's (`runs`, `logs`)
        (HEAD_LOG[1:3], 3),  # the killed ddpctl's: no reach lines
        (HEAD_LOG, 4),
        (HEAD_LOG[1:] + ["[node0 r0] more than the head has"], 4),
    ],
)
def test_a_resumed_run_shows_the_head_lines_past_this_machines_log(here, first) -> None:
    from ddpctl.infra.runs.on_cluster import first_unseen

    assert first_unseen(here, HEAD_LOG) == first


def _prep(cluster: str, run_id: str):
    run = SimpleNamespace(run_id=run_id, job="mnist", nodes=2, elastic=False, min_nodes=0)
    return SimpleNamespace(cluster=SimpleNamespace(name=cluster), run=run)


def test_no_wait_is_refused_behind_a_run_on_the_head(home: Path, monkeypatch) -> None:
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs import execute

    store = StateStore(home)
    asked = []
    monkeypatch.setattr(execute.on_cluster, "runs_on_cluster", lambda s, c, exclude="": asked.append(exclude) or ["rA"])
    slot = locks.RunSlot(store, "c", "run rB (mnist)")
    try:
        with pytest.raises(locks.Busy, match="busy with run rA .*--no-wait"):
            execute._take_turn(slot, store, _prep("c", "rB"), lambda m: None, wait=False)
    finally:
        slot.release()
    assert asked == ["rB"]  # a resumed run does not wait for itself
    assert not (home / "runs" / "rB").exists()


def test_a_run_waits_queued_behind_a_run_on_the_head(home: Path, monkeypatch) -> None:
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs import execute
    from ddpctl.infra.runs.records import QUEUED

    store = StateStore(home)
    marker = home / "runs" / "rB" / QUEUED
    seen = []

    def going(s, cluster, exclude=""):  # rA goes on for two asks, then has ended
        if marker.exists():
            seen.append(json.loads(marker.read_text()))
        return ["rA"] if len(seen) < 2 else []

    monkeypatch.setattr(execute.on_cluster, "runs_on_cluster", going)
    monkeypatch.setattr(execute, "POLL_S", 0.0)
    said: list[str] = []
    slot = locks.RunSlot(store, "c", "run rB (mnist)")
    try:
        execute._take_turn(slot, store, _prep("c", "rB"), said.append, wait=True)
    finally:
        slot.release()
    assert seen[0]["ahead"].startswith("run rA") and seen[0]["cluster"] == "c"
    assert "busy with run rA" in said[0] and "rB waits its turn" in said[0]
    assert said[-1] == "run rB: its turn on 'c'"
    assert not marker.exists()


def test_ctrl_c_waits_until_a_request_to_the_head_is_out() -> None:
    """A Ctrl-C while a request goes out on the head's SSH connection (where a KeyboardInterrupt
    would break paramiko's packet) is acted on once it is out."""
    import os
    import signal

    from ddpctl.infra.tools.signals import sigint_deferred

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with sigint_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("the request went out")
        assert done == ["the request went out"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
