"""Child processes: ``spawn`` for every child a test or a benchmark may signal, and a local run's
processes found by their marker (as `ddpctl down` finds them)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from ddpctl.infra.tools.procs import RUN_KEY, find_tagged


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(argv: Sequence[str | Path], **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, ...)`` with SIGINT's default action in the child, so that a SIGINT a
    test sends acts as Ctrl-C whatever this process inherited.

    Started from a background job or ``nohup``, pytest has SIGINT ignored, and a child inherits an
    ignored signal through exec: the child's Python then never raises KeyboardInterrupt and the
    SIGINT is lost. ``restore_signals`` does not help (it restores SIGPIPE, SIGXFZ and SIGXFSZ only).
    """
    if "preexec_fn" in popen_kwargs:
        raise TypeError("spawn sets preexec_fn itself")
    return subprocess.Popen(argv, preexec_fn=_default_sigint, **popen_kwargs)


def run_processes(run_id: str) -> list[psutil.Process]:
    """Every process of a run, found by its marker in the environment (as `ddpctl down` finds them)."""
    return find_tagged(RUN_KEY, run_id)


def wait_for_worker(run_id: str, rank: int, timeout: float = 120, script: str = "mnist.py") -> psutil.Process:
    """The worker process of global ``rank`` running ``script``, once it is training (4 s after it started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in run_processes(run_id):
            try:
                if (
                    proc.environ().get("RANK") == str(rank)
                    and script in " ".join(proc.cmdline())
                    and time.time() - proc.create_time() > 4  # past init_process_group: in training
                ):
                    return proc
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no worker of rank {rank} for run {run_id}")


def assert_nothing_left(run_id: str, home: Path) -> None:
    """No process of the run, and no cluster state in the state home ``home``."""
    assert run_processes(run_id) == []
    for state in (home / "clusters").glob("*.json"):
        raise AssertionError(f"cluster left behind: {state}")
