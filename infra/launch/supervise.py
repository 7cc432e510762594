"""Run one agent per node, stream their output, fail fast, stop everything on Ctrl-C.

Executor-agnostic: it drives ``NodeProcess`` handles (a local subprocess, an SSH session...), so the
local and SSH executors share the same fail-fast and clean-up behaviour.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

RANK_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$", re.S)


class NodeProcess(Protocol):
    """One node's torchrun agent, however it was started."""

    node: str

    def lines(self) -> Iterator[str]: ...  # stdout and stderr, merged, until the agent exits
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...  # ask the agent (and so its workers) to stop
    def kill(self) -> None: ...


@dataclass(frozen=True)
class OutputLine:
    node: str
    rank: int | None  # global rank, None for the agent's own lines
    text: str


@dataclass
class NodeResult:
    node: str
    exit_code: int | None
    status: str  # ok | failed | stopped | lost (elastic: the run went on without it)


@dataclass
class RunResult:
    run_id: str
    exit_code: int  # 0 ok, 1 a node failed, 130 interrupted
    wall_s: float
    nodes: list[NodeResult] = field(default_factory=list)
    failed_node: str | None = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def parse_line(node: str, raw: str) -> OutputLine:
    text = raw.rstrip("\n")
    match = RANK_LINE.match(text)
    if match:
        return OutputLine(node, int(match.group(1)), match.group(2))
    return OutputLine(node, None, text)


@dataclass(frozen=True)
class Elastic:
    """An elastic run's rules: which nodes may be lost, and how a lost node is brought back."""

    min_nodes: int
    #: start a lost node's agent again (it joins the survivors at their next rendezvous); raises if
    #: the node cannot be reached. None: lost nodes stay lost.
    relaunch: Callable[[int], NodeProcess] | None = None
    #: long enough for the survivors to start their smaller round first (plan.ELASTIC_RDZV_CONF)
    relaunch_after_s: float = 30.0
    relaunches: int = 3  # per node
    #: call ``relaunch`` in a thread of its own (it may wait on a network); False for local
    #: processes, whose PR_SET_PDEATHSIG fires when the thread that started them ends
    threaded: bool = True


def supervise(
    run_id: str,
    procs: list[NodeProcess],
    sink: Callable[[OutputLine], None],
    *,
    cleanup: Callable[[], None],
    grace_s: float = 3.0,
    elastic: Elastic | None = None,
) -> RunResult:
    """Stream every node's lines to ``sink`` until all agents exit.

    When any agent exits non-zero, the others are terminated (SIGKILL after ``grace_s``), except in
    an ``elastic`` run: there a node other than the head (``procs[0]``, which hosts the
    rendezvous) may be lost while ``min_nodes`` remain; the survivors' torchrun agents
    re-rendezvous and go on, and the lost node's agent is started again after a pause (if the node
    answers), to join at the next rendezvous. On KeyboardInterrupt every agent is stopped.
    ``cleanup`` runs last, always, to stop any process of the run that outlived its agent.
    """
    start = time.monotonic()
    procs = list(procs)
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    rejoins: queue.Queue[tuple[int, NodeProcess | BaseException]] = queue.Queue()

    def pump(i: int) -> None:
        threading.Thread(target=_pump, args=(i, procs[i], lines), daemon=True).start()

    for i in range(len(procs)):
        pump(i)
    open_streams = len(procs)
    failed: str | None = None
    interrupted = False
    stop_at: float | None = None
    stopped: set[str] = set()
    lost: dict[int, float] = {}  # node index -> when to try starting it again (inf: never)
    relaunched: dict[int, int] = {}
    head_done_at: float | None = None
    exited_at: float | None = None

    def note(i: int, text: str) -> None:
        sink(OutputLine(procs[i].node, None, f"ddpctl: {text}"))

    def stop() -> float:
        for proc in procs:
            if proc.poll() is None:
                stopped.add(proc.node)
                proc.terminate()
        return time.monotonic() + grace_s

    def try_rejoin(i: int) -> None:
        assert elastic is not None and elastic.relaunch is not None
        try:
            rejoins.put((i, elastic.relaunch(i)))
        except BaseException as exc:
            rejoins.put((i, exc))

    try:
        while True:
            try:
                while True:  # drain what is there before looking at exit codes
                    i, line = lines.get(timeout=0.05)
                    if line is None:
                        open_streams -= 1
                    else:
                        sink(parse_line(procs[i].node, line))
            except queue.Empty:
                pass
            while not rejoins.empty():  # a lost node's agent started again, or not
                i, got = rejoins.get()
                if isinstance(got, BaseException):
                    note(i, f"{procs[i].node} does not answer ({got}); trying again later")
                    lost[i] = time.monotonic() + elastic.relaunch_after_s
                elif failed or interrupted or head_done_at:
                    got.kill()
                else:
                    procs[i] = got
                    del lost[i]
                    open_streams += 1
                    pump(i)
                    note(i, f"{procs[i].node} started again: it joins at the next rendezvous")
            codes = [p.poll() for p in procs]
            if failed is None and not interrupted:
                for i, (p, c) in enumerate(zip(procs, codes)):
                    if c in (None, 0) or i in lost:
                        continue
                    if elastic and i > 0 and len(procs) - len(lost) - 1 >= elastic.min_nodes and not head_done_at:
                        can_retry = elastic.relaunch is not None and relaunched.get(i, 0) < elastic.relaunches
                        lost[i] = time.monotonic() + elastic.relaunch_after_s if can_retry else float("inf")
                        left = len(procs) - len(lost)
                        again = f"; starting it again in {elastic.relaunch_after_s:.0f} s" if can_retry else ""
                        note(i, f"{p.node} lost (exit {c}); the run goes on with {left} node(s){again}")
                        continue
                    failed = p.node
                    stop_at = stop()
                    break
                now = time.monotonic()
                for i, when in list(lost.items()):
                    if now >= when and not head_done_at:
                        lost[i] = float("inf")  # until the attempt reports back
                        relaunched[i] = relaunched.get(i, 0) + 1
                        if elastic.threaded:
                            threading.Thread(target=try_rejoin, args=(i,), daemon=True).start()
                        else:
                            try_rejoin(i)
            if elastic and codes[0] == 0 and head_done_at is None:
                head_done_at = time.monotonic()  # done: a node still waiting to rejoin has nothing to join
            if head_done_at and stop_at is None and time.monotonic() - head_done_at > max(grace_s, 10.0):
                for i, p in enumerate(procs):
                    if p.poll() is None:
                        note(i, f"{p.node} is still waiting to rejoin a finished run: stopping it")
                        lost[i] = float("inf")
                        p.terminate()
                stop_at = time.monotonic() + grace_s
            if stop_at is not None and time.monotonic() > stop_at:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                stop_at = None
            if all(c is not None for c in codes):
                exited_at = exited_at or time.monotonic()
                # Every agent is gone: finish reading, but don't wait on a pipe a stray holds open.
                if open_streams == 0 or time.monotonic() - exited_at > 2.0:
                    break
    except KeyboardInterrupt:
        interrupted = True
        stop()
        deadline = time.monotonic() + grace_s
        try:
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.05)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: kill at once
        for p in procs:
            if p.poll() is None:
                p.kill()
    finally:
        cleanup()

    results = []
    for i, proc in enumerate(procs):
        code = proc.poll()
        if proc.node in stopped:
            status = "stopped"
        elif i in lost:
            status = "lost"
        else:
            status = "ok" if code == 0 else "failed"
        results.append(NodeResult(proc.node, code, status))
    exit_code = 130 if interrupted else (0 if failed is None else 1)
    return RunResult(
        run_id=run_id,
        exit_code=exit_code,
        wall_s=round(time.monotonic() - start, 3),
        nodes=results,
        failed_node=failed,
        interrupted=interrupted,
    )


def _pump(i: int, proc: NodeProcess, out: queue.Queue) -> None:
    try:
        for line in proc.lines():
            out.put((i, line))
    finally:
        out.put((i, None))
