"""Runs that go on on the cluster's side with no ddpctl here (their ddpctl was killed, the laptop
closed): a run submitted to a launcher that keeps it there (the head node's supervisor, Slurm)
records its handle in ``options.json``, and everything here works through that launcher's verbs
(``launch/launcher.py``): ``describe`` brings the run's record here up to date, ``logs`` copies
or follows its output, ``attach`` takes a resumed run up again, ``cancel`` stops it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..launch.launcher import Handle, Launcher, Phase, reopen
from ..launch.nodes import OutputLine, RunResult, read_log_line, result_of
from ..model import locks
from ..model.errors import DdpctlError
from ..model.store import StateStore, atomic_write
from .health_in_runs import recorded
from .records import ON_CLUSTER, RunRecord


def unfinished(store: StateStore, run_id: str, *, held: bool = False) -> tuple[str, Handle, dict] | None:
    """A run with a handle (its options.json), recorded here without a result, and held by no
    ddpctl here (``held``: but this process, a resume that attaches to it again): its cluster's
    name, its handle and its options."""
    run_dir = store.run_dir(run_id)
    if (run_dir / "run.json").exists() or not (run_dir / "options.json").exists():
        return None
    if not held and locks.run_alive(store, run_id):
        return None
    try:
        options = json.loads((run_dir / "options.json").read_text())
        cluster, handle = options["cluster"], Handle.from_dict(options.get("handle"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if handle is None or not store.exists(cluster):
        return None
    return cluster, handle, options


@contextmanager
def _opened(
    store: StateStore, run_id: str, *, held: bool = False, unreachable: set[str] | None = None
) -> Iterator[tuple[str, Handle, dict, Launcher] | None]:
    """For a run that ``unfinished`` finds: its cluster, handle, options and its launcher, open on
    the cluster's head node; None where there is none to reach (no such run or node, an
    unreachable head; ``unreachable``: clusters found so already, not tried again, and added to)."""
    found = unfinished(store, run_id, held=held)
    launcher = None
    if found is not None and found[0] not in (unreachable or ()):
        try:
            state = store.load(found[0])
            node = state.nodes[0] if state.nodes else None
            if node is not None and node.ssh is not None:
                launcher = reopen(found[1], node.ssh)
        except Exception:  # an unreachable head, a damaged state: the record stays as it is
            if unreachable is not None:
                unreachable.add(found[0])
            launcher = None
    if launcher is None:
        yield None
        return
    try:
        yield (*found, launcher)
    finally:
        launcher.close()


def _all_lines(launcher: Launcher, handle: Handle) -> list[str]:
    got: list[str] = []
    launcher.logs(handle, got.append, seen=[], follow=False)
    return got


def _update(store: StateStore, run_id: str, cluster: str, handle: Handle, options: dict, launcher: Launcher) -> bool:
    """The run's output here as its launcher has it, and its record once it has ended (True then);
    the ``ON_CLUSTER`` mark while it goes on there."""
    run_dir = store.run_dir(run_id)
    described = launcher.describe(handle)
    lines = _all_lines(launcher, handle)
    atomic_write(run_dir / "output.log", "".join(f"{raw}\n" for raw in lines))
    # the mark changes only once the launcher has answered: a look that fails half-way leaves it
    if described.phase is Phase.RUNNING:
        atomic_write(run_dir / ON_CLUSTER, "")
    else:
        (run_dir / ON_CLUSTER).unlink(missing_ok=True)
    if described.record is None:
        return False
    doc = {"plan": options.get("plan") or {}, **described.record, "cluster": cluster}
    result = doc.get("result", {})
    probes, looks = result.pop("probes", None) or {}, result.pop("looks", None) or {}
    if (probes or looks) and store.exists(cluster):  # the head's supervisor asked the nodes (named, on its timer)
        result["health"] = recorded(store.load(cluster), probes, looks)
    replaced = result.pop("replaced", None) or {}
    if replaced:  # and replaced lost nodes on new machines: recorded in the cluster's state here
        adopt_replaced(store, cluster, replaced, _quiet)
    atomic_write(run_dir / "run.json", json.dumps(doc, indent=2) + "\n")
    return True


def adopt_replaced(store: StateStore, name: str, replaced: dict, progress: Callable[[str], None]) -> None:
    """The nodes a run's supervisor on the head replaced (a record's ``replaced``, by node) recorded in
    cluster ``name``'s state (``Provider.adopt_replacements``), if it is still there; a failure is said
    (``down`` finds the instances by their tags all the same)."""
    from ..providers.registry import get_provider

    try:
        if store.exists(name):
            with locks.cluster(store, name, "runs", shared=True):  # as a run holds it: not during down
                state = store.load(name)
                get_provider(state.spec.provider).adopt_replacements(state, store, replaced, progress)
    except Exception as exc:  # the run's own result still counts
        progress(f"warning: could not record the nodes the head node replaced ({', '.join(replaced)}): {exc}")


def _quiet(_: str) -> None:
    pass


def bring_up_to_date(store: StateStore, run_id: str, unreachable: set[str] | None = None) -> bool:
    """The output (and record, once the run has ended) of ``run_id`` from its launcher. True where
    the record was written; False where there is nothing to do or reach (``unreachable``: the
    clusters whose head could not be reached, for the next call)."""
    with _opened(store, run_id, unreachable=unreachable) as found:
        if found is None:
            return False
        try:
            return _update(store, run_id, *found)
        except Exception:  # the head went away meanwhile: as unreachable, the record stays as it is
            return False


def bring_all_up_to_date(store: StateStore) -> None:
    """Every run's, a cluster whose head cannot be reached tried once (a laptop offline: `runs`
    waits one connection timeout per cluster, not one per run)."""
    unreachable: set[str] = set()
    for run_dir in store.run_dirs():
        bring_up_to_date(store, run_dir.name, unreachable)


def listed(store: StateStore) -> list[RunRecord]:
    """``ddpctl runs`` (the CLI's and the API's): the recorded runs, oldest first, each brought up to
    date first where it goes on on the cluster with no ddpctl here (``bring_all_up_to_date``)."""
    from .records import list_runs

    bring_all_up_to_date(store)
    return list_runs(store)


def is_on_cluster(store: StateStore, run_id: str) -> bool:
    """The run goes on on the cluster's side with no ddpctl here, as ``bring_up_to_date`` last found."""
    return (store.run_dir(run_id) / ON_CLUSTER).exists() and unfinished(store, run_id) is not None


def runs_on_cluster(store: StateStore, cluster: str, exclude: str = "") -> list[str]:
    """The runs of ``cluster`` (but ``exclude``) that go on on its side with no ddpctl here, their
    records brought up to date on the way (``run``'s queue waits for them; not for a run on a head
    that cannot be reached)."""
    going: list[str] = []
    unreachable: set[str] = set()
    for run_dir in store.run_dirs():
        run_id = run_dir.name
        found = unfinished(store, run_id) if run_id != exclude else None
        if found is None or found[0] != cluster:
            continue
        bring_up_to_date(store, run_id, unreachable)
        if (run_dir / ON_CLUSTER).exists():  # found going on just now
            going.append(run_id)
    return going


def follow(store: StateStore, run_id: str, sink: Callable[[str], None]) -> bool:
    """``logs --follow`` of a run going on on the cluster's side with no ddpctl here: its lines
    after those here (``bring_up_to_date`` copied them) to ``sink`` and to the run's output.log
    here, as they come, until the run ends; then its record here. False where the run does not go
    on there. Ctrl-C stops following (the run goes on)."""
    with _opened(store, run_id) as found:
        if found is None:
            return False
        cluster, handle, options, launcher = found
        run_dir = store.run_dir(run_id)
        with open(run_dir / "output.log", "rb") as f:
            have = f.read()
        copied = have[: have.rfind(b"\n") + 1]
        seen = copied.decode(errors="replace").splitlines()
        if launcher.describe(handle).phase is Phase.RUNNING:
            with open(run_dir / "output.log", "r+b") as log:
                log.truncate(len(copied))  # a partial last line comes again whole
                log.seek(len(copied))

                def tee(raw: str) -> None:
                    log.write(raw.encode() + b"\n")
                    log.flush()
                    sink(raw)

                launcher.logs(handle, tee, seen=seen, follow=True)
            _update(store, run_id, cluster, handle, options, launcher)
            return True
        _update(store, run_id, cluster, handle, options, launcher)  # it ended since: the rest from the copy
        for raw in (run_dir / "output.log").read_text(errors="replace").splitlines()[len(seen) :]:
            sink(raw)
        return True


class Reattached:
    """A resumed run still going on on the cluster's side (``run --resume``): attached to again,
    not started again. ``find`` (under the run's lock, held by this process) copies its output
    here, before the run's output.log is opened; ``attach`` streams the rest as an attached run's."""

    def __init__(self, handle: Handle, launcher: Launcher, lines: list[str], unseen: list[str]) -> None:
        self.handle, self.launcher = handle, launcher
        self.lines = lines  # the launcher's lines so far, as the run's output.log here has them now
        self.unseen = unseen  # those since this machine's output.log ended

    @classmethod
    def find(cls, store: StateStore, run_id: str) -> Reattached | None:
        found = unfinished(store, run_id, held=True)
        if found is None:
            return None
        cluster, handle, _ = found
        try:
            state = store.load(cluster)
            node = state.nodes[0] if state.nodes else None
            if node is None or node.ssh is None:
                return None
            launcher = reopen(handle, node.ssh)
        except Exception:  # an unreachable head: started again from its snapshot
            return None
        try:
            if launcher.describe(handle).phase is not Phase.RUNNING:
                launcher.close()
                return None
            run_dir = store.run_dir(run_id)
            try:
                here = (run_dir / "output.log").read_text(errors="replace").splitlines()
            except OSError:
                here = []
            lines = _all_lines(launcher, handle)
            atomic_write(run_dir / "output.log", "".join(f"{raw}\n" for raw in lines))
        except DdpctlError:  # its output cannot be read there: started again (its old supervisor stopped first)
            launcher.close()
            return None
        except BaseException:
            launcher.close()
            raise
        return cls(handle, launcher, lines, lines[first_unseen(here, lines) :])

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
        try:
            try:
                progress(said)
                for raw in self.unseen:
                    sink(read_log_line(raw))
                return self.launcher.attach(self.handle, tee, seen=self.lines, progress=progress)
            except KeyboardInterrupt:  # one that landed outside the launcher's own handling: the run stops
                self.launcher.cancel(self.handle)
            record = self.launcher.describe(self.handle).record
            if record is None:
                raise DdpctlError(f"run {self.handle.run_id} was stopped, but its record cannot be read")
            return result_of(record)
        finally:
            self.launcher.close()


def first_unseen(here: list[str], lines: list[str]) -> int:
    """Where the launcher's lines (``lines``) go on past this machine's (``here``): a copy of them
    (`runs`, `logs`), or what the killed ddpctl logged, every line but the nodes' reach checks
    (``launch/reach_plan.py``)."""
    if lines[: len(here)] == here:
        return len(here)
    kept = [i for i, raw in enumerate(lines) if not _reach_line(raw)]
    return kept[len(here)] if len(here) < len(kept) else len(lines)


def _reach_line(raw: str) -> bool:
    from ..launch.reach_plan import REACH_LINE  # (its planning imports, only where a line is asked)

    line = read_log_line(raw)
    return line.rank is None and REACH_LINE.match(line.text.strip()) is not None


def stop(store: StateStore, run_id: str) -> bool:
    """Cancel a run that goes on on the cluster's side with no ddpctl here (as Ctrl-C), and wait
    for its record. False where the run does not go on there."""
    with _opened(store, run_id) as found:
        if found is None:
            return False
        _, handle, _, launcher = found
        if launcher.describe(handle).phase is not Phase.RUNNING:
            return False
        launcher.cancel(handle)
    bring_up_to_date(store, run_id)
    return True
