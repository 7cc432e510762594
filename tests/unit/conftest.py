"""Keeps tests/unit/ true to its name: a unit test that starts a process fails, naming what it started
(through Python's audit events, so a subprocess, a fork or an exec anywhere below the test counts)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

_STARTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.system", "os.exec", "os.spawn"})
#: what the running unit test started (None: no unit test is running in this process)
_started: list[list[str]] = []
#: a library's own lookup, not the test's doing: ctypes.util.find_library runs `ldconfig -p` (importing
#: torch does, through its CUDA library finder, the first time in a process)
_LOOKUPS = ("/sbin/ldconfig", "ldconfig")


def _audit(event: str, args: tuple) -> None:
    if _started and event in _STARTS:
        if event == "subprocess.Popen" and str(args[0]) in _LOOKUPS:
            return
        _started[-1].append(f"{event} {str(args[:2])[:120]}")


sys.addaudithook(_audit)  # once per process: a hook cannot be removed, it acts only while a unit test runs


@pytest.fixture(autouse=True)
def _starts_no_process() -> Iterator[None]:
    _started.append([])
    try:
        yield
    finally:
        started = _started.pop()
    assert not started, f"a unit test started a process (move it to tests/integration/): {started}"


@pytest.fixture(autouse=True)
def _no_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local provider counts this machine's GPUs with `nvidia-smi -L`, a process, when it plans: unit
    tests plan on a machine without GPUs, wherever they run (tests/unit/test_local_gpus.py splits given ones)."""
    monkeypatch.setattr("ddpctl.infra.providers.local.local_gpus", lambda: ())
