"""A cluster's lock (``infra/model/locks.py``) when its holder is not yet known: the CI failure of
9f7dcdb, two `up`s of one name on a loaded machine, the loser refused before the winner had written
who it is (``another ddpctl command``). A refused command now waits (a liveness bound) for the holder's
name, or takes the lock once it is let go. Their real parts: tests/integration/test_concurrency.py."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest


def test_a_lock_let_go_before_its_holder_is_known_is_taken(home: Path) -> None:
    from ddpctl.infra.model.locks import ClusterLock
    from ddpctl.infra.model.store import StateStore

    store = StateStore(home)
    path = store.lock_path("c")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held by one that has not written who it is (yet)
    threading.Timer(0.3, lambda: os.close(fd)).start()  # then lets go
    lock = ClusterLock(store, "c", "up").take()
    lock.release()


def test_a_holder_that_says_who_it_is_is_named_at_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.store import StateStore

    store = StateStore(home)
    first = locks.ClusterLock(store, "c", "up").take()
    monkeypatch.setattr(locks.os, "getpid", lambda: 1)  # another process's view (pid 1 is alive)
    with pytest.raises(locks.Busy, match=r"is busy: `ddpctl up` \(pid \d+\)"):
        locks.ClusterLock(store, "c", "down").take()
    monkeypatch.undo()
    first.release()
