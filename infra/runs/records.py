"""A run's record under the state home (``runs/<id>/``): ``options.json`` (the options it was started with,
``options.py``'s ``RunOptions``, with its cluster and handle: what ``run --resume`` reads again), its
result (``run.json``), and the listing ``ddpctl runs`` shows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..launch.launcher import REF_RE
from ..model import costs, locks
from ..model.errors import DdpctlError, UsageError
from ..model.schema import Doc, SchemaError, shown
from ..model.spec import MAX_NODES, check_cluster_name
from ..model.store import StateStore
from ..model.words import Word
from . import metrics
from .options import RunOptions

#: Under a run's record: what the run wrote to its snapshot folder, kept when its cluster went.
OUTPUTS = "outputs"
#: a run waiting for its turn on a busy cluster (``run_execute``): the run ahead, its job, its cluster
QUEUED = "queued.json"

#: in a run's folder here while it goes on on the cluster's side (the head node's supervisor, Slurm)
#: without a ddpctl here (`runs`: running; written by `on_cluster.py`)
ON_CLUSTER = "on-cluster"


class RunState(Word):
    """Where a recorded run is (``runs``' ``state``; its ``result`` says it in words, with the detail)."""

    QUEUED = "queued"  # waiting for the run ahead of it on its cluster
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    UNFINISHED = "unfinished"  # its ddpctl stopped before the end: `run --resume` goes on
    DAMAGED = "damaged"  # its record cannot be read


@dataclass(frozen=True)
class RunRecord:
    """A run as recorded under the state home (``ddpctl runs``)."""

    run_id: str
    job: str
    nodes: int | str  # "2:3" for an elastic run
    cluster: str
    started: float  # epoch seconds
    result: str  # succeeded | failed (exit N) | interrupted | unfinished (ddpctl stopped before the end)
    outputs: str = ""  # where what the run wrote was kept when its cluster went ("": nothing kept)
    duration_s: float | None = None  # how long the job ran (None: no end recorded)
    loss: float | None = None  # the last loss and held-out accuracy of its metrics.jsonl (None: none given)
    accuracy: float | None = None
    cost_usd: float | None = None  # nodes used x a node's $/h x duration, list price (None: not billed, not known)
    state: RunState = RunState.UNFINISHED

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", RunState(self.state))

    def to_dict(self) -> dict:
        return asdict(self)


def queued_behind(store: StateStore, run_id: str) -> dict[str, Any] | None:
    """A run waiting its turn on its cluster (``run`` behind another run, ``execute._queue``): what
    its ``queued.json`` says (``ahead``, ``job``, ``nodes``, ``cluster``) while its ddpctl waits;
    None for any other run."""
    run_dir = store.run_dir(run_id)
    queued = run_dir / QUEUED
    if (run_dir / "options.json").exists() or not queued.exists() or not locks.run_alive(store, run_id):
        return None
    try:
        wait = json.loads(queued.read_text())
    except (OSError, ValueError):
        return None
    return wait if isinstance(wait, dict) and isinstance(wait.get("ahead"), str) else None


def refuse_queued(store: StateStore, run_id: str, what: str) -> None:
    """One line for a command that needs a run that has not started, as it is queued: behind which
    run, and ``what`` (e.g. "no output yet: `ddpctl logs --follow ID` waits for it")."""
    wait = queued_behind(store, run_id)
    if wait is not None:
        raise DdpctlError(f"{queued_text(run_id, wait)}: it has not started, {what}")


def queued_text(run_id: str, wait: dict[str, Any]) -> str:
    return f"run {run_id} is queued on cluster {str(wait.get('cluster', '?'))!r} behind {wait['ahead']}"


def list_runs(store: StateStore) -> list[RunRecord]:
    """Every recorded run, oldest first; an unfinished one is what `run --resume` is for, a
    damaged one (a record that cannot be read) is listed as such."""
    records = []
    for run_dir in store.run_dirs():
        path = run_dir / "options.json"
        queued = run_dir / QUEUED
        if not path.exists() and queued.exists() and locks.run_alive(store, run_dir.name):
            record = _queued_record(run_dir, queued)
        elif path.exists():
            record = _record(store, run_dir, path)
        else:
            record = None  # not a run (or one that never got going)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: r.started)


def _queued_record(run_dir: Path, queued: Path) -> RunRecord | None:
    """A run waiting its turn (``run`` behind another), from its ``queued.json``; None while that is
    being written (listed on the next call)."""
    try:
        wait = Doc(json.loads(queued.read_text()))  # each field checked: shown as it is
        nodes = wait.raw("nodes")
        nodes = nodes if isinstance(nodes, str) else wait.count("nodes", low=1, high=MAX_NODES)
        said = f"queued (behind {wait.text('ahead')})"
        return RunRecord(
            run_dir.name, wait.text("job"), nodes, wait.text("cluster"), _mtime(queued), said, state=RunState.QUEUED
        )
    except (OSError, ValueError):  # SchemaError too
        return None


def _record(store: StateStore, run_dir: Path, path: Path) -> RunRecord:
    """A run that got going, from its ``options.json`` and (once it ended) its ``run.json``: its
    state, how long it ran, its last loss and accuracy, what it cost; damaged where unreadable."""
    try:
        doc, opts = read_options(path)
    except UsageError as exc:
        said = f"damaged (options.json: {_reason(exc.__cause__)})"
        return RunRecord(run_dir.name, "?", "?", "?", _mtime(path), said, state=RunState.DAMAGED)
    alive = locks.run_alive(store, run_dir.name) or (run_dir / ON_CLUSTER).exists()  # or on the cluster's side
    state = RunState.RUNNING if alive else RunState.UNFINISHED
    result = str(state)
    done, duration = path.with_name("run.json"), None
    if done.is_file():
        try:
            record = json.loads(done.read_text())
            code, duration, interrupted = read_result(record)
            if interrupted:
                state = RunState.INTERRUPTED
            else:
                state = RunState.SUCCEEDED if code == 0 else RunState.FAILED
            result = f"failed (exit {code})" if state is RunState.FAILED else str(state)
            result = sickness(record, result)
        except (OSError, ValueError) as exc:  # SchemaError too: the field, and what it holds
            state, result = RunState.DAMAGED, f"damaged (run.json: {_reason(exc)})"
    nodes = (opts.nodes or "all") if not opts.min_nodes else f"{opts.min_nodes}:{opts.nodes}"
    kept = str(run_dir / OUTPUTS) if (run_dir / OUTPUTS).is_dir() else ""
    last = metrics.summary(metrics.read(run_dir, tail=1 << 20))  # a long run's file: its end will do
    return RunRecord(
        run_dir.name,
        opts.job,
        nodes,
        doc.get("cluster", "?"),
        _mtime(path),
        result,
        kept,
        round(duration, 1) if isinstance(duration, (int, float)) else None,
        last["loss"],
        last["accuracy"],
        run_cost(doc, duration),
        state,
    )


def read_result(data: object) -> tuple[int | None, float | None, bool]:
    """What ``runs`` reads of a run's ``run.json`` (pure; ``SchemaError`` names a damaged field): the
    job's exit code (None: not known), how long it ran in seconds (None: not known) and whether it was
    interrupted; the rest of the record (its plan) is ``logs``' and ``check``'s."""
    result = Doc(data).doc("result")
    code = result.count("exit_code", None, low=-(1 << 16), high=1 << 16)
    return code, result.number("wall_s", None), result.flag("interrupted", False)


def sickness(data: object, said: str) -> str:
    """``said`` (a run's result in words) with what its watching found (launch/watch.py): a hung run's
    cause in place of "failed (exit 1)", its first clause (``hung: no progress for 61 s: rank 1 on node1
    is stopped (T)``); the nodes named slow after it; the named nodes found unhealthy after it (runs/health_in_runs.py
    ``after_run``), by name (pure; ``SchemaError`` names a damaged field)."""
    result = Doc(data).doc("result")
    if result.text("cause", "") == "hung":
        said = result.text("hint", "").split(";")[0] or said
    slow = result.texts("slow", ())
    said = f"{said}; slow: {', '.join(slow)}" if slow else said
    sick = [line.split(":")[0] for line in result.texts("health", ())]
    return f"{said}; unhealthy: {', '.join(sick)}" if sick else said


def slow_nodes(run_dir: Path) -> list[str]:
    """The nodes named slow while the run went (its ``run.json``), e.g. ``["node1 (1.60x)"]``; [] where
    none was, or the run has not ended, or its record cannot be read."""
    try:
        return list(Doc(json.loads((run_dir / "run.json").read_text())).doc("result").texts("slow", ()))
    except (OSError, ValueError):  # SchemaError too: `runs` names the damage
        return []


def run_cost(doc: dict, duration: object) -> float | None:
    """What a run cost (pure): the nodes it used at one node's price per hour as its record keeps them
    (``run_execute.run_cost_basis``), for as long as it ran; None where either is not known."""
    price, nodes = doc.get("node_usd_per_hour"), doc.get("nodes_used")
    numbers = (price, nodes, duration)
    if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
        return None
    return costs.so_far(price * nodes, 0.0, duration)


def read_options(path: Path) -> tuple[dict, RunOptions]:
    """A run's record (``options.json``), read through its schema (``check_record``): the record as a
    dict whose every field has its type, and its options; UsageError (caused by what is wrong) if the
    record cannot be read."""
    try:
        doc = json.loads(path.read_bytes().decode())
        return doc, check_record(doc)
    except (OSError, ValueError) as exc:  # SchemaError is a ValueError: the field, and what it holds
        raise UsageError(
            f"the record of run {path.parent.name!r} ({path}) is damaged ({_reason(exc)}): start the job again "
            "with `ddpctl run`"
        ) from exc


def check_record(data: object) -> RunOptions:
    """A run record's fields each checked (pure; ``SchemaError`` names the one that is not what
    ``run_execute`` writes): its options, its cluster's name and id, whether the run owned it, what its
    nodes cost, and the handle of a run on the cluster's side (``Handle.from_dict`` reads it)."""
    doc = Doc(data)
    options = RunOptions.from_dict(doc.raw("options"))
    cluster = doc.text("cluster")
    try:
        check_cluster_name(cluster)
    except UsageError:
        raise SchemaError("cluster", f"{shown(cluster)}, not a cluster name") from None
    doc.text("cluster_id", "")
    doc.flag("ephemeral", False)
    doc.count("nodes_used", None, low=1, high=MAX_NODES)
    doc.number("node_usd_per_hour", None)
    handle = doc.doc("handle", None)
    if handle is not None:
        handle.text("kind")  # a kind this ddpctl has no launcher for is ignored (Handle.from_dict)
        handle.text("ref")
        if not REF_RE.fullmatch(handle.data["ref"]):  # a pid or a job id, put into commands on the cluster
            raise SchemaError(handle.at("ref"), f"{shown(handle.data['ref'])}, not a process or job id")
        handle.text("folder")
        handle.text("run_id")
        handle.done()
    doc.obj("plan", {})
    # other keys are left as they are (a record has no version: an older ddpctl's, or a tool's note)
    return options


def _reason(exc: BaseException | None) -> str:
    if isinstance(exc, SchemaError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if isinstance(exc, (KeyError, TypeError, AttributeError)) else str(exc)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def resume_options(run_id: str, store: StateStore) -> tuple[RunOptions, bool]:
    """The options a run was started with (``name``: its cluster) and whether the run owned that cluster."""
    path = store.run_dir(run_id) / "options.json"
    if not path.is_file():
        known = [r.run_id for r in list_runs(store)]
        hint = f" (runs recorded: {', '.join(known[-5:])})" if known else ""
        raise UsageError(f"no run {run_id!r} to resume under {store.home}{hint}: `ddpctl runs` lists them")
    doc, opts = read_options(path)
    if not isinstance(doc.get("cluster"), str) or not isinstance(doc.get("ephemeral"), bool):
        raise UsageError(f"the record of run {run_id!r} ({path}) is damaged (no cluster): start the job again")
    return replace(opts, name=doc["cluster"]), doc["ephemeral"]
