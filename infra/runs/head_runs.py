"""A run's record on this machine brought up to date from the head node, where its supervisor
(``launch/head_agent.py``) writes ``output.log`` and ``run.json``: for a run whose ddpctl here
ended (SIGKILL, a closed laptop) before it read the end of the run.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

from ..launch import head
from ..launch.head_agent import read_log_line
from ..launch.reach_plan import REACH_LINE
from ..launch.supervise import OutputLine, RunResult
from ..model import locks
from ..model.store import StateStore, atomic_write
from .records import ON_HEAD


def unfinished(store: StateStore, run_id: str, *, held: bool = False) -> str | None:
    """The cluster of a run supervised on its head node (``on_head`` in its options.json), recorded
    here without a result and with no ddpctl here holding it (``held``: but this process, a resume
    that attaches to it again)."""
    run_dir = store.run_dir(run_id)
    if (run_dir / "run.json").exists() or not (run_dir / "options.json").exists():
        return None
    if not held and locks.run_alive(store, run_id):
        return None
    try:
        options = json.loads((run_dir / "options.json").read_text())
        cluster, on_head = options["cluster"], options.get("on_head") is True
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cluster if on_head and store.exists(cluster) else None


def _head(store: StateStore, run_id: str, *, held: bool = False):
    """For a run supervised on its head node, recorded here without a result and held by no ddpctl
    here (``held``: but this process): its cluster's name, an open connection to the head node and
    the run's folder there; None where there is none to reach (no such run or node, an unreachable
    head)."""
    from ..hosts.connections import connect

    cluster = unfinished(store, run_id, held=held)
    if cluster is None:
        return None
    try:
        state = store.load(cluster)
        node = state.nodes[0] if state.nodes else None
        if node is None or node.ssh is None:
            return None
        return cluster, connect(node.ssh), head.folder(node.workdir, run_id)
    except Exception:  # an unreachable head, a damaged state: the record stays as it is
        return None


def _copy_log(conn, where: str, run_dir: Path, *, whole: bool) -> list[str] | None:
    """The head's output.log into the run's output.log here: its whole lines (``whole``: all of it,
    a run that has ended); those lines, or None where it cannot be read."""
    got = conn.run(f"cat {shlex.quote(where)}/output.log", hide=True, warn=True, in_stream=False)
    if not got.ok:
        return None
    text = got.stdout if whole else got.stdout[: got.stdout.rfind("\n") + 1]  # a partial line: next time
    atomic_write(run_dir / "output.log", text)
    return text.splitlines()


def bring_up_to_date(store: StateStore, run_id: str) -> bool:
    """Copy the head's output.log (and run.json, once written) of ``run_id`` here. True where the
    head's supervisor has written the record; False where there is nothing to do or reach."""
    found = _head(store, run_id)
    if found is None:
        return False
    cluster, conn, where = found
    try:
        return _update(store, run_id, cluster, conn, where)
    finally:
        conn.close()


def _update(store: StateStore, run_id: str, cluster: str, conn, where: str) -> bool:
    run_dir = store.run_dir(run_id)
    doc = head.read_record(conn, where)
    (run_dir / ON_HEAD).unlink(missing_ok=True)  # unless its supervisor is found alive there now
    if _copy_log(conn, where, run_dir, whole=doc is not None) is None:
        return False
    if doc is None:
        if head.pid_alive(conn, where):
            atomic_write(run_dir / ON_HEAD, "")
        return False
    doc["cluster"] = cluster
    atomic_write(run_dir / "run.json", json.dumps(doc, indent=2) + "\n")
    return True


def bring_all_up_to_date(store: StateStore) -> None:
    for run_dir in sorted((store.home / "runs").glob("*/")):
        bring_up_to_date(store, run_dir.name)


def goes_on_head(store: StateStore, run_id: str) -> bool:
    """The run goes on on its head node with no ddpctl here, as ``bring_up_to_date`` last found."""
    return (store.run_dir(run_id) / ON_HEAD).exists() and unfinished(store, run_id) is not None


def going_on_head(store: StateStore, cluster: str, exclude: str = "") -> list[str]:
    """The runs of ``cluster`` (but ``exclude``) that go on its head node with no ddpctl here, their
    records brought up to date on the way (``run``'s queue waits for them; not for a run on a head
    that cannot be reached)."""
    going = []
    for run_dir in sorted((store.home / "runs").glob("*/")):
        run_id = run_dir.name
        if run_id == exclude or unfinished(store, run_id) != cluster:
            continue
        found = _head(store, run_id)
        if found is None:  # an unreachable head: not waited for (a run there fails on its own)
            continue
        _, conn, where = found
        try:
            _update(store, run_id, cluster, conn, where)
        except Exception:  # the head went away meanwhile: as unreachable
            continue
        finally:
            conn.close()
        if (run_dir / ON_HEAD).exists():  # found alive there just now
            going.append(run_id)
    return going


def follow(store: StateStore, run_id: str, sink: Callable[[str], None]) -> bool:
    """``logs --follow`` of a run going on its head node with no ddpctl here: the head's output.log
    after the lines already here (``bring_up_to_date`` copied them) to ``sink`` and to the run's
    output.log here, as they come, until the run ends; then its record here. False where the run
    does not go on its head node. Ctrl-C stops following (the run goes on)."""
    found = _head(store, run_id)
    if found is None:
        return False
    cluster, conn, where = found
    run_dir = store.run_dir(run_id)
    try:
        with open(run_dir / "output.log", "rb") as f:
            have = f.read()
        copied = have[: have.rfind(b"\n") + 1]
        start = copied.count(b"\n") + 1
        pid = head.pid_alive(conn, where)
        if pid:
            with open(run_dir / "output.log", "r+b") as log:
                log.truncate(len(copied))  # a partial last line comes again whole
                log.seek(len(copied))

                def tee(raw: str) -> None:
                    log.write(raw.encode() + b"\n")
                    log.flush()
                    sink(raw)

                head.stream(conn, where, pid, tee, start=start)
        _update(store, run_id, cluster, conn, where)
        if not pid:  # it ended since its lines were copied: the rest from the copy
            for raw in (run_dir / "output.log").read_text(errors="replace").splitlines()[start - 1 :]:
                sink(raw)
        return True
    finally:
        conn.close()


class Reattached:
    """A resumed run still going on its head node (``run --resume``): attached to again, not
    started again. ``find`` (under the run's lock, held by this process) copies the head's output
    here, before the run's output.log is opened; ``attach`` streams the rest as an attached run's."""

    def __init__(self, conn, where: str, pid: int, start: int, unseen: list[str]) -> None:
        self.conn, self.where, self.pid = conn, where, pid
        self.start = start  # the head's line that comes next
        self.unseen = unseen  # the head's lines since this machine's output.log ended

    @classmethod
    def find(cls, store: StateStore, run_id: str) -> Reattached | None:
        found = _head(store, run_id, held=True)
        if found is None:
            return None
        _, conn, where = found
        try:
            pid = head.pid_alive(conn, where)
            run_dir = store.run_dir(run_id)
            try:
                here = (run_dir / "output.log").read_text(errors="replace").splitlines()
            except OSError:
                here = []
            lines = _copy_log(conn, where, run_dir, whole=False) if pid else None
        except BaseException:
            conn.close()
            raise
        if lines is None:
            conn.close()
            return None
        return cls(conn, where, pid, len(lines) + 1, lines[first_unseen(here, lines) :])

    def attach(
        self,
        said: str,
        progress: Callable[[str], None],
        sink: Callable[[OutputLine], None],
        tee: Callable[[OutputLine], None],
    ) -> RunResult:
        """``said`` to ``progress``, the lines not seen here to ``sink``, then the run's new lines to
        ``tee`` (its output.log and ``sink``) until it ends; its result. Ctrl-C from here on stops the
        run as with an attached run."""
        interrupt, streamed = False, 0

        def counted(line: OutputLine) -> None:
            nonlocal streamed
            tee(line)
            streamed += 1

        try:
            try:
                progress(said)
                for raw in self.unseen:
                    sink(read_log_line(raw))
            except KeyboardInterrupt:
                interrupt = True
            while True:
                try:
                    start = self.start + streamed
                    return head.attach(self.conn, self.where, self.pid, counted, interrupt=interrupt, start=start)
                except KeyboardInterrupt:  # one that landed outside the stream's own handling: the run stops
                    interrupt = True
        finally:
            self.conn.close()


def first_unseen(here: list[str], lines: list[str]) -> int:
    """Where the head's output.log (``lines``) goes on past this machine's (``here``): a copy of the
    head's (`runs`, `logs`), or what the killed ddpctl logged, every line but the nodes' reach
    checks (``launch/reach_plan.py``)."""
    if lines[: len(here)] == here:
        return len(here)
    kept = [i for i, raw in enumerate(lines) if not _reach_line(raw)]
    return kept[len(here)] if len(here) < len(kept) else len(lines)


def _reach_line(raw: str) -> bool:
    line = read_log_line(raw)
    return line.rank is None and REACH_LINE.match(line.text.strip()) is not None


def stop_on_head(store: StateStore, run_id: str) -> bool:
    """Ask the head's supervisor of a run that no ddpctl here holds to stop it (SIGINT, as Ctrl-C),
    and wait for its record. False where the run does not run on its head node."""
    found = _head(store, run_id)
    if found is None:
        return False
    _, conn, where = found
    try:
        pid = head.pid_alive(conn, where)
        if not pid:
            return False
        head.attach(conn, where, pid, lambda line: None, interrupt=True)
    finally:
        conn.close()
    bring_up_to_date(store, run_id)
    return True
