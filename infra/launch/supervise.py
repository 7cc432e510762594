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
    status: str  # ok | failed | stopped


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


def supervise(
    run_id: str,
    procs: list[NodeProcess],
    sink: Callable[[OutputLine], None],
    *,
    cleanup: Callable[[], None],
    grace_s: float = 3.0,
) -> RunResult:
    """Stream every node's lines to ``sink`` until all agents exit.

    When any agent exits non-zero, the others are terminated (SIGKILL after ``grace_s``). On
    KeyboardInterrupt the same happens to all. ``cleanup`` runs last, always, to stop any process
    of the run that outlived its agent.
    """
    start = time.monotonic()
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    for i, proc in enumerate(procs):
        threading.Thread(target=_pump, args=(i, proc, lines), daemon=True).start()
    open_streams = len(procs)
    failed: str | None = None
    interrupted = False
    stop_at: float | None = None
    stopped: set[str] = set()
    exited_at: float | None = None

    def stop() -> float:
        for proc in procs:
            if proc.poll() is None:
                stopped.add(proc.node)
                proc.terminate()
        return time.monotonic() + grace_s

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
            codes = [p.poll() for p in procs]
            if failed is None and not interrupted:
                bad = next((p for p, c in zip(procs, codes) if c not in (None, 0)), None)
                if bad is not None:
                    failed = bad.node
                    stop_at = stop()
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
    for proc in procs:
        code = proc.poll()
        if proc.node in stopped:
            status = "stopped"
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
