"""The launcher verbs (``launch/launcher.py``) for a run whose controller is a ``ddpctl`` process
on this machine: the local provider's runs (its processes are that ddpctl's children), runs
supervised here (``DDPCTL_SUPERVISOR=here``, an elastic spot run), and any run while the ddpctl
that started it (attached, or ``--detach``ed) still holds it. The handle is that process (it holds
the run's lock) and the run's record here: ``describe`` reads the lock and ``run.json``, ``logs``
the run's ``output.log``, ``cancel`` signals that ddpctl as Ctrl-C does (which stops the run
wherever it goes: its nodes, or the head node's supervisor).

Runs on the cluster's side with no ddpctl here are ``on_cluster.py``'s, through their own launcher.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from ..launch.launcher import Described, Handle, Phase
from ..launch.nodes import OutputLine, RunResult, result_of
from ..model import locks
from ..model.errors import DdpctlError
from ..model.store import StateStore
from . import logs as run_logs

POLL_S = 0.2


class HereLauncher:
    def __init__(self, store: StateStore, progress: Callable[[str], None] | None = None) -> None:
        self.store, self.progress = store, progress or (lambda text: None)

    def handle(self, run_id: str) -> Handle | None:
        """The run's ddpctl here while one holds it (None: none does)."""
        holders = locks.run_holders(self.store, run_id)
        if not holders:
            return None
        return Handle("here", str(holders[0].pid), str(self.store.run_dir(run_id)), run_id)

    def close(self) -> None:
        pass

    def describe(self, handle: Handle) -> Described:
        alive = locks.run_alive(self.store, handle.run_id)  # first: its ddpctl writes the record, then lets go
        try:
            return Described(Phase.ENDED, json.loads((self.store.run_dir(handle.run_id) / "run.json").read_text()))
        except (OSError, ValueError):
            pass
        return Described(Phase.RUNNING if alive else Phase.GONE)

    def logs(self, handle: Handle, sink: Callable[[str], None], *, seen: list[str], follow: bool) -> None:
        path = self.store.run_dir(handle.run_id) / "output.log"
        everything = run_logs.LogFilter()
        for i, line in enumerate(run_logs.read(self.store, handle.run_id, path, everything, follow=follow)):
            if i >= len(seen):
                sink(f"[{line.node}{'' if line.rank is None else f' r{line.rank}'}] {line.text}")

    def attach(
        self,
        handle: Handle,
        sink: Callable[[OutputLine], None],
        *,
        seen: list[str],
        progress: Callable[[str], None] | None = None,
    ) -> RunResult:
        try:
            self.logs(handle, lambda raw: sink(_output_line(raw)), seen=seen, follow=True)
        except KeyboardInterrupt:
            self.cancel(handle)
        record = self.describe(handle).record
        if record is None:
            raise DdpctlError(
                f"run {handle.run_id}'s ddpctl ended without its record: see `ddpctl logs {handle.run_id}`"
            )
        return result_of(record)

    def cancel(self, handle: Handle, timeout: float = 60.0) -> None:
        """SIGINT to the run's ddpctl (SIGTERM, which it takes as Ctrl-C, where SIGINT is ignored,
        or after ``timeout``), and wait until it has let go of the run."""
        pid = int(handle.ref)
        self.progress(f"stopping run {handle.run_id} (its ddpctl, pid {pid}): every process of the run, as Ctrl-C does")
        signals = [(signal.SIGINT, timeout), (signal.SIGTERM, 10.0)]
        if ignores_sigint(pid):
            signals = [(signal.SIGTERM, timeout)]
        for sig, wait in signals:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if not locks.run_alive(self.store, handle.run_id):
                    return
                time.sleep(POLL_S)
        raise DdpctlError(
            f"run {handle.run_id} (pid {pid}) did not stop within {timeout:.0f} s: `kill -9 {pid}`, then `ddpctl down`"
        )


def ignores_sigint(pid: int) -> bool:
    """The process ignores SIGINT (started with nohup, or with ``&`` from a script): read from
    /proc/PID/status (False where there is none to read)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, ValueError):
        pass
    return False


def _output_line(raw: str) -> OutputLine:
    line = run_logs.parse(raw)
    return OutputLine(line.node, line.rank, line.text)
