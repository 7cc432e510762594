"""Runs that outlive the command that started them (``run --detach``), and stopping a run from
another terminal (``ddpctl stop``).

A detached run is an ordinary ``ddpctl run`` in a session of its own (no terminal: closing one does
not reach it), its own output in ``runs/<id>/controller.log``. It holds the run's lock while it
lives, as any run does, which is how ``runs``, ``logs --follow`` and ``stop`` find it; ``stop``
sends it SIGINT, so it stops every process of the run and takes an owned cluster down as Ctrl-C does.

A run that goes on on the cluster's side (the head node's supervisor, Slurm) is waited for until it is
there (its handle in ``options.json``): returned earlier, a machine shut down at once would take the
background ddpctl, and the run it had not yet submitted, with it. The background ddpctl's messages
are shown meanwhile (the cluster's packages, the submission).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..model import locks
from ..model.errors import DdpctlError, UsageError
from ..model.store import StateStore
from ..model.words import Word
from .records import QUEUED

START_TIMEOUT_S = 120.0  # a run that brings its cluster up holds its lock once that is recorded
STOP_TIMEOUT_S = 60.0
POLL_S = 0.2


def controller_log(store: StateStore, run_id: str):
    return store.run_dir(run_id) / "controller.log"


class Handover(Word):
    """Where a detached run stands when ``run --detach`` returns."""

    HERE = "here"  # this machine's background ddpctl keeps it: it stops if this machine shuts down
    ON_CLUSTER = "on-cluster"  # submitted to the cluster's side: this machine may sleep or shut down
    QUEUED = "queued"  # waiting its turn behind another run, in the background here
    ENDED = "ended"  # it ended before it was seen anywhere else
    STARTING = "starting"  # the wait for its submission was interrupted: still on its way, from here


def handover(store: StateStore, run_id: str, before: int = 0) -> Handover | None:
    """Whether a run that will go on on the cluster's side has left this machine's hands (None: not
    yet): its handle in an ``options.json`` written since ``before`` (its ``st_mtime_ns`` then: a
    resumed run's is the earlier attempt's until the background ddpctl writes its own)."""
    path = store.run_dir(run_id) / "options.json"
    try:
        if path.stat().st_mtime_ns != before and json.loads(path.read_text()).get("handle"):
            return Handover.ON_CLUSTER
    except (OSError, ValueError, AttributeError):
        pass
    return Handover.QUEUED if (store.run_dir(run_id) / QUEUED).exists() else None


def _written(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def start_detached(
    run_argv: list[str],
    store: StateStore,
    run_id: str,
    *,
    on_cluster: bool = False,
    progress: Callable[[str], None] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> tuple[int, Handover]:
    """Start ``ddpctl run_argv...`` (a run with this ``run_id``) in the background; its pid once it
    holds the run and, for a run that goes ``on_cluster``, once it is there (the background ddpctl's
    lines to ``progress`` meanwhile), with where it stands; or its error (the ``Error:`` line it
    printed) if it stopped before."""
    store.make_run_dir(run_id)
    log = controller_log(store, run_id)
    with open(log, "ab") as out:
        os.chmod(log, 0o600)
        shown, before = out.tell(), _written(store.run_dir(run_id) / "options.json")
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddpctl", *run_argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not the terminal's: its Ctrl-C and hang-up do not reach it
            preexec_fn=_sigint_default,
        )
    deadline = time.monotonic() + timeout
    while not locks.run_alive(store, run_id):
        if _ended(proc, log, run_id, "at once"):
            return proc.pid, Handover.ENDED
        if time.monotonic() > deadline:
            raise DdpctlError(f"the detached run {run_id} did not start within {timeout:.0f} s: see {log}")
        time.sleep(POLL_S)
    if not on_cluster:
        return proc.pid, Handover.HERE
    try:  # no time limit: the background ddpctl holds the run, and may wait for the cluster's packages
        while (where := handover(store, run_id, before)) is None:
            shown = _show(log, shown, progress)
            if _ended(proc, log, run_id, "before the cluster had it"):
                where = Handover.ENDED
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # only this wait: the run goes on its way from the background ddpctl
        return proc.pid, Handover.STARTING
    _show(log, shown, progress)
    return proc.pid, where


def _ended(proc: subprocess.Popen, log: Path, run_id: str, when: str) -> bool:
    """Whether the background ddpctl has ended, and well; its error (its ``Error:`` line) where not."""
    code = proc.poll()
    if not code:
        return code == 0
    lines = log.read_text(errors="replace").strip().splitlines()
    error = next((line for line in reversed(lines) if line.startswith("Error: ")), f"exit {code}")
    raise (UsageError if code == 2 else DdpctlError)(
        f"the detached run {run_id} stopped {when}: {error.removeprefix('Error: ')}"
    )


def _show(log: Path, shown: int, progress: Callable[[str], None] | None) -> int:
    """The background ddpctl's whole new lines since ``shown`` (a byte offset) to ``progress``."""
    with open(log, "rb") as f:
        f.seek(shown)
        new = f.read()
    whole = new[: new.rfind(b"\n") + 1]
    if progress is not None:
        for line in whole.decode(errors="replace").splitlines():
            progress(line)
    return shown + len(whole)


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
