"""A run's rendezvous store while it runs (``LaunchPlan.store``, ``node_programs/rdzv_store.py``).

The executors start it first and start the agents once it listens (``RdzvStore.start``: the port is
its, or the run stops there), then wait until it serves (``ready``: it imports torch meanwhile, as
the agents do, whose clients wait in its backlog), and stop it after the last agent has left, in
the supervisor's ``cleanup`` (``stop``), whatever ended the run. It is not a node: the supervisor's
rules (fail fast, elastic loss) are about agents only. Executor-agnostic, like the supervisor: it
drives a ``NodeProcess`` (a local subprocess, an SSH session) and the executor's way of stopping
that process alone.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..model.errors import DdpctlError
from .diagnose import RENDEZVOUS_TIMEOUT, Agent, Diagnosis, never_joined, rendezvous_hint
from .nodes import NodeProcess, OutputLine, RunResult

#: What the store prints (node_programs/rdzv_store.py): its port bound, then served; or why not.
LISTENING = re.compile(r"^LISTENING \S+$")
READY = re.compile(r"^READY \S+$")
#: ... and as it stops, every agent the rendezvous saw (``ADDR:PID``), when told the rendezvous id.
JOINED = re.compile(r"^JOINED(?: (.*))?$")
ERROR = re.compile(r"^ERROR (.*)$")
#: Starting Python and binding a port; then importing torch, which a cold node takes seconds over.
LISTEN_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 120.0


class StoreFailed(DdpctlError):
    """The rendezvous store did not start (it is stopped)."""


class RdzvStore:
    """One run's store, started: its lines read by a thread of their own until it exits."""

    def __init__(self, node: str, proc: NodeProcess, sink: Callable[[OutputLine], None], stop: Callable[[], None]):
        self.node = node
        self.proc = proc
        self.sink = sink
        self._stop = stop
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stopped = False
        self.joined: list[str] | None = None  # ADDR:PID of every agent that joined, once stopped
        threading.Thread(target=self._pump, daemon=True).start()

    @classmethod
    def start(
        cls,
        node: str,
        proc: NodeProcess,
        sink: Callable[[OutputLine], None],
        stop: Callable[[], None],
        timeout_s: float = LISTEN_TIMEOUT_S,
    ) -> RdzvStore:
        """The store that ``proc`` runs on ``node``, once it listens: ``StoreFailed`` if it cannot
        (it is stopped then, as on Ctrl-C while it starts). ``stop`` stops that process alone."""
        store = cls(node, proc, sink, stop)
        try:
            store._wait_for(LISTENING, timeout_s, "listen on its port")
        except BaseException:
            store.stop()
            raise
        return store

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until it serves; ``StoreFailed`` if it ends or says ERROR first (the caller stops
        what it started since, the store with it)."""
        self._wait_for(READY, timeout_s, "serve (is its Python slow to import torch?)")

    def alive(self) -> bool:
        """It still runs (its process, or the SSH session it runs in)."""
        return self.proc.poll() is None

    def _pump(self) -> None:
        try:
            for line in self.proc.lines():
                self._lines.put(line.rstrip("\n"))
        finally:
            self._lines.put(None)

    def _wait_for(self, pattern: re.Pattern[str], timeout_s: float, what: str) -> None:
        """Read its lines until one matches ``pattern``: an ``ERROR`` line is kept for the error,
        any other goes to the sink (a warning, a shell's "not found")."""
        deadline = time.monotonic() + timeout_s
        errors: list[str] = []
        said: list[str] = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                text = self._lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if text is None:
                raise StoreFailed(self._failure(errors or said[-3:]))
            if pattern.match(text):
                return
            if m := ERROR.match(text):
                errors.append(m.group(1))
            elif not (LISTENING.match(text) or READY.match(text)):
                said.append(text)
                self.sink(OutputLine(self.node, None, text))
        raise StoreFailed(f"the rendezvous store on the head node {self.node} did not {what} within {timeout_s:.0f} s")

    def _failure(self, said: list[str]) -> str:
        """One line: what the store said (``cannot listen on port P: Address already in use``), and
        what to do where that is a known cause (``diagnose.py``)."""
        diagnosis = Diagnosis()
        for text in said:
            diagnosis.feed(OutputLine(self.node, None, text))
        deadline = time.monotonic() + 2.0  # its output ended: its exit status is a moment away
        while (code := self.proc.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        hint = diagnosis.hint(self.node)
        return (
            f"the rendezvous store did not start on the head node {self.node}"
            f"{f' (exit {code})' if code not in (None, 1) else ''}: {'; '.join(said) or 'it said nothing'}"
            f"{f'; {hint}' if hint else ''}"
        )

    def stop(self) -> None:
        """Stop it (once; SIGTERM, SIGKILL after the executor's grace period) and pass on what it
        printed since it served (nothing, when all is well)."""
        if self._stopped:
            return
        self._stopped = True
        if self.proc.poll() is None:
            self._stop()
        deadline = time.monotonic() + 5.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                text = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if text is None:
                break
            if m := JOINED.match(text):
                self.joined = (m.group(1) or "").split()
            elif not (LISTENING.match(text) or READY.match(text)):
                self.sink(OutputLine(self.node, None, text))

    def explain(self, result: RunResult, agents: Sequence[Agent]) -> RunResult:
        """``result`` with a rendezvous timeout's hint naming the nodes that never joined, where
        the stopped store said who did (``JOINED``) and that tells them apart."""
        if result.cause != RENDEZVOUS_TIMEOUT.name or self.joined is None:
            return result
        missing = never_joined(agents, self.joined)
        return result if missing is None else replace(result, hint=rendezvous_hint(missing))


def stop_process(proc: NodeProcess, grace_s: float, tick_s: float = 0.05) -> None:
    """SIGTERM (the handle's ``terminate``), then SIGKILL if it still runs after ``grace_s``."""
    proc.terminate()
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(tick_s)
    if proc.poll() is None:
        proc.kill()
