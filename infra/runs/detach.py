"""Runs that outlive the command that started them (``run --detach``), and stopping a run from
another terminal (``ddpctl stop``).

A detached run is an ordinary ``ddpctl run`` in a session of its own (no terminal: closing one does
not reach it), its own output in ``runs/<id>/controller.log``. It holds the run's lock while it
lives, as any run does, which is how ``runs``, ``logs --follow`` and ``stop`` find it; ``stop``
sends it SIGINT, so it stops every process of the run and takes an owned cluster down as Ctrl-C does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from ..model import locks
from ..model.errors import DdpctlError, UsageError
from ..model.store import StateStore

START_TIMEOUT_S = 120.0  # a run that brings its cluster up holds its lock once that is recorded
STOP_TIMEOUT_S = 60.0
POLL_S = 0.2


def controller_log(store: StateStore, run_id: str):
    return store.run_dir(run_id) / "controller.log"


def start_detached(run_argv: list[str], store: StateStore, run_id: str, timeout: float = START_TIMEOUT_S) -> int:
    """Start ``ddpctl run_argv...`` (a run with this ``run_id``) in the background; its pid once it
    holds the run, or its error (the ``Error:`` line it printed) if it stopped before."""
    store.make_run_dir(run_id)
    log = controller_log(store, run_id)
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddpctl", *run_argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not the terminal's: its Ctrl-C and hang-up do not reach it
            preexec_fn=_sigint_default,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if locks.run_alive(store, run_id):
            return proc.pid
        code = proc.poll()
        if code is not None:
            lines = log.read_text(errors="replace").strip().splitlines()
            error = next((line for line in reversed(lines) if line.startswith("Error: ")), f"exit {code}")
            raise (UsageError if code == 2 else DdpctlError)(
                f"the detached run {run_id} stopped at once: {error.removeprefix('Error: ')}"
            )
        time.sleep(POLL_S)
    raise DdpctlError(f"the detached run {run_id} did not start within {timeout:.0f} s: see {log}")


def _sigint_default() -> None:  # pragma: no cover - in the child between fork and exec
    """`ddpctl stop` sends SIGINT: the child must not inherit an ignored SIGINT (nohup, a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_run(store: StateStore, run_id: str, progress: Callable[[str], None], timeout: float = STOP_TIMEOUT_S) -> str:
    """Stop a live run (detached, in another terminal, or going on on the cluster with no ddpctl
    here) as Ctrl-C would, through its launcher's ``cancel``, and wait until it has ended. Returns
    how it ended: ``stopped``, or the run's own result where it ended by itself before the signal
    reached it (``succeeded``, ``failed (exit N)``)."""
    from . import on_cluster
    from .here import HereLauncher

    here = HereLauncher(store, progress)
    handle = here.handle(run_id)
    if handle is not None:  # its ddpctl here: Ctrl-C for it
        here.cancel(handle, timeout)
        return ended_as(store, run_id)
    if on_cluster.stop(store, run_id):  # its ddpctl here was killed; it goes on on the cluster
        return ended_as(store, run_id)
    raise UsageError(
        f"run {run_id!r} is not running (`ddpctl runs` lists runs): if ddpctl was killed, `ddpctl down` "
        "stops what is left of it, and `ddpctl run --resume` continues it"
    )


def ended_as(store: StateStore, run_id: str) -> str:
    """``stopped`` where the run's record says it was interrupted (or says nothing), else its result."""
    import json

    try:
        result = json.loads((store.run_dir(run_id) / "run.json").read_text())["result"]
    except (OSError, ValueError, KeyError, TypeError):
        return "stopped"
    if result.get("interrupted"):
        return "stopped"
    code = result.get("exit_code")
    return "succeeded" if code == 0 else f"failed (exit {code})"
