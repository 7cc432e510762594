"""A run's output after the fact (``ddpctl logs``): its record's ``output.log``, read back as the
lines the run printed, filtered by node and rank, and followed while the run is alive.

Each line of ``output.log`` is ``[NODE rRANK] text`` (a rank's line) or ``[NODE] text`` (the
node's agent), as ``run_execute.execute`` writes it.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..model import locks
from ..model.errors import UsageError
from ..model.store import StateStore
from .records import list_runs, queued_behind, queued_text, refuse_queued

LINE = re.compile(r"\[(?P<node>[^\] ]+)(?: r(?P<rank>\d+))?\] (?P<text>.*)")
POLL_S = 0.5


@dataclass(frozen=True)
class LogLine:
    node: str
    rank: int | None
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LogFilter:
    node: str | None = None
    rank: int | None = None

    def keeps(self, line: LogLine) -> bool:
        return (self.node is None or line.node == self.node) and (self.rank is None or line.rank == self.rank)


def parse(raw: str) -> LogLine:
    m = LINE.fullmatch(raw.rstrip("\n"))
    if m is None:  # not a line ddpctl wrote (a hand edit): shown as it is
        return LogLine("?", None, raw.rstrip("\n"))
    return LogLine(m["node"], int(m["rank"]) if m["rank"] else None, m["text"])


def log_path(store: StateStore, run_id: str | None) -> tuple[str, Path]:
    """The run meant (``None``: the last one started) and its output.log."""
    if run_id is None:
        records = list_runs(store)
        if not records:
            raise UsageError(f"no runs under {store.home / 'runs'}: start one with `ddpctl run`")
        run_id = records[-1].run_id
    path = store.run_dir(run_id) / "output.log"
    if not path.is_file():
        refuse_queued(store, run_id, f"so it has no output yet: `ddpctl logs --follow {run_id}` waits for its turn")
        known = [r.run_id for r in list_runs(store)][-5:]
        hint = f" (recent: {', '.join(known)})" if known else ""
        raise UsageError(f"run {run_id!r} has no output under {store.home / 'runs'}{hint}: `ddpctl runs` lists them")
    return run_id, path


def wait_turn(
    store: StateStore,
    run_id: str,
    progress: Callable[[str], None],
    *,
    alive: Callable[[StateStore, str], bool] = locks.run_alive,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """``logs --follow`` of a queued run: wait (said once) until its turn has come and its output.log
    is there, or its ddpctl has gone (``stop`` took it out of the queue: ``log_path`` then says so)."""
    said = False
    while True:
        wait = queued_behind(store, run_id)
        if wait is None and ((store.run_dir(run_id) / "output.log").is_file() or not alive(store, run_id)):
            return
        if wait is not None and not said:
            progress(f"{queued_text(run_id, wait)}: waiting for its turn (Ctrl-C stops waiting; the run stays queued)")
            said = True
        sleep(POLL_S)


def check_filter(store: StateStore, run_id: str, keep: LogFilter) -> None:
    """A ``--node`` or ``--rank`` the run never had is one line naming what it had (from the plan
    its record keeps; a run without one, as an sbatch run's, is not checked)."""
    import json

    try:
        plan = json.loads((store.run_dir(run_id) / "run.json").read_text()).get("plan") or {}
        nodes, world = [n["node"] for n in plan["nodes"]], int(plan["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if keep.node is not None and keep.node not in nodes:
        raise UsageError(f"run {run_id!r} ran on {', '.join(nodes)}, not {keep.node}: give one of them to --node")
    if keep.rank is not None and keep.rank >= world:
        raise UsageError(f"run {run_id!r} had ranks 0-{world - 1}, not {keep.rank}: give one of them to --rank")


def read(
    store: StateStore,
    run_id: str,
    path: Path,
    keep: LogFilter,
    *,
    tail: int | None = None,
    follow: bool = False,
    alive: Callable[[StateStore, str], bool] = locks.run_alive,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[LogLine]:
    """The run's lines that ``keep`` keeps (the last ``tail`` of them), then, with ``follow``, new
    ones as the run writes them, until it has ended."""
    with open(path, errors="replace") as f:
        lines: Iterator[LogLine] = (line for line in map(parse, _complete_lines(f)) if keep.keeps(line))
        yield from deque(lines, maxlen=tail) if tail is not None else lines
        while follow:
            running = alive(store, run_id)  # read before the last lines: none is missed at the end
            yield from (line for line in map(parse, _complete_lines(f)) if keep.keeps(line))
            if not running:
                return
            sleep(POLL_S)


def _complete_lines(f) -> Iterator[str]:
    """Whole lines from where ``f`` stands; a partial last line is left for the next read."""
    while True:
        where = f.tell()
        raw = f.readline()
        if not raw:
            return
        if not raw.endswith("\n"):
            f.seek(where)
            return
        yield raw


def show(
    store: StateStore,
    run_id: str | None,
    sink: Callable[[LogLine], None],
    *,
    node: str | None = None,
    rank: int | None = None,
    tail: int | None = None,
    follow: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[str, Path]:
    """``ddpctl logs`` (the CLI's and the API's): the run ``run_id`` (else the last one) has its lines
    that ``node``/``rank`` keep, the last ``tail`` of them, given to ``sink``; with ``follow``, then
    its new ones until it ends (a queued run once it starts; a run going on on the cluster with no
    ddpctl here through its launcher). A run whose ddpctl was killed has its output brought from the
    cluster first. Returns the run's id and its log's path."""
    from . import on_cluster

    if follow and run_id is not None:  # a queued run (`run --detach` behind another): followed once it starts
        wait_turn(store, run_id, progress)
    run_id, path = log_path(store, run_id)
    on_cluster.bring_up_to_date(store, run_id)  # a run whose ddpctl here was killed: its output from the cluster
    keep = LogFilter(node, rank)
    check_filter(store, run_id, keep)
    there = follow and on_cluster.is_on_cluster(store, run_id)  # followed through its launcher
    for line in read(store, run_id, path, keep, tail=tail, follow=follow and not there):
        sink(line)
    if there:

        def each(raw: str) -> None:
            line = parse(raw)
            if keep.keeps(line):
                sink(line)

        on_cluster.follow(store, run_id, each)
    return run_id, path
