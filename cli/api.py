"""ddpctl from Python (a script, a notebook): ``ddpctl.up``, ``run``, ``status``, ``runs``, ``logs``,
``check``, ``down``.

Each function is its command's code path (``infra/lifecycle/clusters.py``, ``run_prepare.py``,
``run_execute.py``, ``logs.py``, ``run_records.py``, ``check.py``) and returns the typed values
behind its ``--json`` document (``to_dict()`` gives that document's part). Errors are the CLI's:
``UsageError`` (bad input, nothing created) and ``DdpctlError`` with the same one line. Ctrl-C (a
notebook's "interrupt") stops a run as the CLI's does: every process of the run, the run's own
cluster taken down, then ``KeyboardInterrupt``.

Light to import: torch, boto3 and ansible load only when a function needs them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpctl.infra.hosts.autodown import Estimate
    from ddpctl.infra.launch.nodes import OutputLine
    from ddpctl.infra.model.state import ClusterState
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.base import LiveStatus
    from ddpctl.infra.runs.check import CheckReport
    from ddpctl.infra.runs.logs import LogLine
    from ddpctl.infra.runs.outputs import Downloaded
    from ddpctl.infra.runs.records import RunRecord

__all__ = [
    "ClusterStatus",
    "NodeOutcome",
    "RunOutcome",
    "check",
    "down",
    "download",
    "logs",
    "metrics",
    "print_line",
    "runs",
    "status",
    "up",
]
__all__ += ["run"]


def print_progress(message: str) -> None:
    """The default progress callback: the line on stderr, as the CLI prints it."""
    print(message, file=sys.stderr, flush=True)


def print_line(line: OutputLine) -> None:
    """The default job-line callback: ``[node1 r3] text`` on stdout, as ``ddpctl run`` prints it."""
    label = f"[{line.node} r{line.rank}]" if line.rank is not None else f"[{line.node}]"
    print(f"{label} {line.text}", flush=True)


def _quiet(_: Any) -> None:
    pass


class _Terminal:
    """``run``'s default: the lines as ``ddpctl run`` prints them (``print_line``), less the
    repeated agent lines (``repeats.py``) and a failure's secondary traces (``failures.py``)."""

    def __init__(self, run_id: str) -> None:
        from .failures import SecondaryTraces
        from .repeats import RepeatedAgentLines

        self.repeats, self.traces = RepeatedAgentLines(run_id), SecondaryTraces(run_id)

    def line(self, line: OutputLine) -> None:
        show = self.repeats.take(line)
        self._say(self.repeats.note())
        for each in self.traces.take(line) if show else []:
            print_line(each)

    def end(self) -> None:
        self.repeats.end()
        self._say(self.repeats.note())
        for each in self.traces.end():
            self._say(each) if isinstance(each, str) else print_line(each)
        self._say(self.traces.note())

    @staticmethod
    def _say(note: str | None) -> None:
        if note:
            print(note, flush=True)


def _store(home: str | Path | None) -> StateStore:
    from ddpctl.infra.model.store import StateStore

    store = StateStore(Path(home)) if home is not None else StateStore()
    store.check_home()
    return store


def _convert(kind: Any, value: Any, flag: str, sep: str = ",") -> Any:
    """A value as the CLI's parameter type takes it (``2:3``, ``"2,1"``), checked as the CLI checks
    its text and refused with the CLI's words."""
    import click

    from ddpctl.infra.model.errors import UsageError

    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        value = sep.join(map(str, value))
    elif isinstance(value, int):
        value = str(value)
    try:
        return kind.convert(value, None, None)
    except click.BadParameter as exc:
        raise UsageError(f"Invalid value for {flag!r}: {exc.message}") from None


# ---------------------------------------------------------------------------------------------- clusters


def up(
    nodes: int | None = None,
    *,
    provider: str = "local",
    name: str = "default",
    inventory: str | Path | None = None,
    nproc_per_node: int | None = None,
    port: int | None = None,
    env: Sequence[str] = (),
    playbook_vars: Sequence[str] = (),
    python: str | None = None,
    options: dict[str, Any] | None = None,
    down_on_failure: bool = True,
    autodown: str | None = None,
    yes: bool = False,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> ClusterState:
    """``ddpctl up``: bring a cluster up and return its state (``status --json``'s cluster).

    ``options`` are the provider's own (``region``, ``instance_type``, ``tags``...: the keys of
    ``ddpctl.toml``'s ``[cluster]``); ``env``/``playbook_vars`` are ``KEY=VALUE`` strings. A billed
    provider (aws, pcluster) needs ``yes=True``, as the CLI's ``--yes``. ``autodown``: the CLI's
    ``--autodown`` (``"30m"``). ``progress=None``: quiet.
    """
    from ddpctl.infra.hosts.autodown import parse
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.model.spec import ClusterSpec, parse_env
    from ddpctl.infra.providers import get_provider

    progress = progress or _quiet
    impl = get_provider(provider)
    impl.check_up_flags(down_on_failure=down_on_failure)
    kwargs = {"python": python} if python else {}
    spec = ClusterSpec(
        name=name,
        provider=provider,
        nodes=impl.default_nodes(str(inventory or "")) if nodes is None else nodes,
        nproc_per_node=nproc_per_node or 0,
        port=port,
        env=parse_env(tuple(env)),
        inventory=str(Path(inventory).resolve()) if inventory else "",
        playbook_vars=parse_env(tuple(playbook_vars), flag="--playbook-var"),
        options=dict(options or {}),
        autodown_s=parse(autodown or "off"),
        **kwargs,
    )
    store = _store(home)
    with locks.cluster(store, spec.name, "up"):
        provider_impl, state = clusters.plan_up(spec, store, clean=True, progress=progress)
        if impl.billed and not yes:
            cost = impl.hourly_cost(state.spec)
            price = f", about ${cost:.2f}/h" if cost is not None else ""
            raise UsageError(
                f"create {spec.nodes} {provider} node(s) for cluster {spec.name!r}{price} until `ddpctl down`: "
                "pass yes=True to confirm"
            )
        return clusters.up(provider_impl, state, store, progress, down_on_failure=down_on_failure)


def down(
    name: str | None = None,
    *,
    all: bool = False,  # the CLI's --all
    keep_outputs: bool = True,
    yes: bool = False,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> list[str]:
    """``ddpctl down``: take a cluster down (``name``, else the only one; ``all=True``: every one),
    first copying its runs' outputs into their records unless ``keep_outputs=False``. One billed
    cluster (aws, pcluster) needs ``yes=True``, as the CLI's ``--yes``. Returns the names taken
    down (``down --json``'s ``down``)."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs import outputs

    progress = progress or _quiet
    store = _store(home)
    if all and name:
        raise UsageError(f"--all and --name {name} contradict: --all takes every cluster down; give one of them")
    if all:
        names = store.names()
    else:
        resolved = clusters.resolve_name(store, name)
        names = [resolved] if resolved else []
    if not names:
        progress(f"no cluster is up under {store.home}: nothing to take down")

    def ask(question: str) -> None:
        if not yes:
            raise UsageError(f"{question}: pass yes=True to confirm")

    before = outputs.before_down(progress, ask=None if all else ask, keep=keep_outputs)
    return [clusters.down(n, store, progress, before=before) for n in names]


@dataclass
class ClusterStatus:
    """One cluster as ``ddpctl status`` shows it: its recorded state, what its provider says runs
    now (``live``), or why its state file cannot be read (``damaged``)."""

    name: str
    provider: str
    status: str  # up | creating | ... | damaged
    state: ClusterState | None = None  # None: damaged
    live: LiveStatus | None = None
    damaged: str = ""  # why the state file cannot be read
    message: str = ""  # a damaged one: the line that says what to do (`down`'s command)
    readable: dict[str, Any] = field(default_factory=dict)  # what `down` can still read of a damaged one
    #: its autodown and when it would fire (None: off); ``infra/hosts/autodown.py``
    autodown: Estimate | None = None
    #: it took itself down (autodown), and this status deleted what was left of it
    took_itself_down: bool = False

    @property
    def nodes(self) -> list:
        return list(self.state.nodes) if self.state is not None else []

    @property
    def age_s(self) -> float:
        """Seconds since ddpctl recorded the cluster (0 for a damaged one)."""
        return time.time() - self.state.created_at if self.state is not None else 0.0

    @property
    def cost_so_far_usd(self) -> float | None:
        """What it has cost so far at list price (None: not billed, or the price is not known)."""
        if self.state is None or self.live is None:
            return None
        from ddpctl.infra.model import costs

        return costs.so_far(self.live.cost_per_hour_usd, self.state.created_at, time.time())

    def to_dict(self) -> dict[str, Any]:
        """``status --json``'s entry for this cluster."""
        if self.took_itself_down:
            return {"name": self.name, "provider": self.provider, "status": "down", "took_itself_down": True}
        if self.state is None:
            return {"name": self.name, "status": "damaged", "damaged": self.damaged, "readable": self.readable}
        from .output_json import iso

        doc = {**self.state.to_dict(), "created_at": iso(self.state.created_at), "age_s": round(self.age_s)}
        doc["autodown"] = self.autodown.to_dict() if self.autodown else None
        if self.live:
            doc["live"] = self.live.to_dict()
            doc["cost_so_far_usd"] = self.cost_so_far_usd
        return doc


def cluster_statuses(
    store: StateStore, name: str | None = None, progress: Callable[[str], None] = _quiet
) -> list[ClusterStatus]:
    """The clusters under the state home (or just ``name``), each with what its provider says runs
    now and its autodown; damaged state files last (what ``ddpctl status`` lists). A cluster that
    took itself down (autodown) has what its nodes could not delete deleted now, said to ``progress``."""
    from ddpctl.infra.hosts import autodown
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.state import DamagedState
    from ddpctl.infra.providers import get_provider
    from ddpctl.infra.runs.records import list_runs

    found, damaged = [], []
    runs = None
    for each in [name] if name else store.names():
        try:
            state = store.load(each)
        except DamagedState as exc:  # shown as such: `down` still cleans it up
            salvage = store.salvage(exc.name)
            damaged.append(
                ClusterStatus(
                    exc.name,
                    salvage.provider or "?",
                    "damaged",
                    damaged=exc.reason,
                    message=str(exc),
                    readable=salvage.to_dict(),
                )
            )
            continue
        estimate = None
        if state.spec.autodown_s:
            try:
                with locks.cluster(store, state.name, "status"):  # as `down`: one command changes it
                    if clusters.clean_taken_down(store, store.load(state.name), progress):
                        found.append(ClusterStatus(state.name, state.spec.provider, "down", took_itself_down=True))
                        continue
            except locks.Busy:
                pass  # another command has it now: shown as it is
            runs = list_runs(store) if runs is None else runs
            estimate = autodown.fires_at(state, runs)
        live = get_provider(state.spec.provider).status(state)
        found.append(ClusterStatus(state.name, state.spec.provider, state.status, state, live, autodown=estimate))
    return found + damaged


def status(
    name: str | None = None, *, home: str | Path | None = None, progress: Callable[[str], None] | None = print_progress
) -> list[ClusterStatus]:
    """``ddpctl status``: the clusters under the state home (or just ``name``), each with its autodown
    (``ClusterStatus.autodown``); one that took itself down is cleaned up (``took_itself_down``)."""
    return cluster_statuses(_store(home), name, progress or _quiet)


def check(
    name: str | None = None,
    *,
    port: int | None = None,
    size_mb: float = 32,
    bandwidth: bool = True,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> CheckReport:
    """``ddpctl check``: every pair of a cluster's nodes, reachability and all-reduce bandwidth
    (``to_dict()`` is ``check --json``'s report; ``.unreachable`` lists the broken links)."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.providers import get_provider
    from ddpctl.infra.runs.check import run_check

    if not 0.001 <= size_mb <= 8192:
        raise UsageError(f"Invalid value for '--size-mb': {size_mb} is not in the range 0.001<=x<=8192.")
    progress = progress or _quiet
    state = clusters.load(_store(home), name)
    provider = get_provider(state.spec.provider)
    port = provider.rdzv_port(state, port)
    targets, executor_for = provider.check_targets(state, progress)
    return run_check(targets, executor_for, port, progress, bandwidth=bandwidth, size_mb=size_mb)


# ---------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    exit_code: int | None
    status: str  # ok | failed | stopped | lost


@dataclass(frozen=True)
class RunOutcome:
    """What ``ddpctl.run`` returns: ``run --json``'s ``result``, and where the run's record is."""

    run_id: str
    exit_code: int  # 0 ok, 1 a node failed (130, interrupted, raises KeyboardInterrupt instead)
    wall_s: float
    nodes: tuple[NodeOutcome, ...]
    failed_node: str | None
    interrupted: bool
    hint: str  # a failure's known cause, what it means and what to do ("" where none is known)
    cause: str  # that cause's name, e.g. "rendezvous-timeout"
    log: Path  # the run's output.log (`ddpctl logs RUN_ID`, `ddpctl.logs(run_id)`)
    #: the run's metric lines (`ddpctl metrics RUN_ID --json`'s `lines`: step, epoch, loss, accuracy,
    #: samples_per_s...), [] where it wrote none; `metrics[-1]` is the last
    metrics: list[dict[str, Any]] = field(default_factory=list)
    metrics_file: Path | None = None  # the run's metrics.jsonl in its record, where it has one

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_codes(self) -> dict[str, int | None]:
        """Each node's agent's exit code."""
        return {n.node: n.exit_code for n in self.nodes}

    def to_dict(self) -> dict[str, Any]:
        """``run --json``'s ``result`` (and ``run.json``'s)."""
        doc = asdict(self)
        doc.pop("log"), doc.pop("metrics"), doc.pop("metrics_file")
        return {**doc, "nodes": list(doc["nodes"])}


def run(
    job: str,
    *args: str,
    nodes: int | str | tuple[int, int] | None = None,
    nproc_per_node: int | str | tuple[int, ...] | None = None,
    max_restarts: int | None = None,
    name: str | None = None,
    port: int | None = None,
    run_id: str = "",
    launcher: str | None = None,
    snapshot_dir: str = "",
    workdir: str | Path | None = None,
    resume_from: str | None = None,
    env: Sequence[str] = (),
    env_files: Sequence[str | Path] = (),
    python: str | None = None,
    on_line: Callable[[OutputLine], None] | None = print_line,
    progress: Callable[[str], None] | None = print_progress,
    all_lines: bool = False,
    home: str | Path | None = None,
) -> RunOutcome:
    """``ddpctl run JOB [-- ARGS]``: run a bundled job or a script on ``nodes`` nodes and wait for it.

    ``args`` go to the job (``ddpctl run mnist -- --epochs 1`` is ``run("mnist", "--epochs", "1")``);
    the other keywords are ``run``'s options (``nodes="2:3"``: elastic). Every line goes to the
    run's ``output.log`` and to ``on_line`` (an ``OutputLine``: ``node``, ``rank``, ``text``; None:
    quiet). The default prints them as ``ddpctl run`` does, ``[node1 r0] text`` on stdout: the
    agents' repeated start-up lines once, a failure's first traceback only (``all_lines=True``:
    every line). ddpctl's own messages go to ``progress`` (default: stderr). A job that fails returns ``ok`` False with the ``hint``; Ctrl-C stops every process of
    the run and raises ``KeyboardInterrupt``.
    """
    from ddpctl.infra.runs.execute import execute
    from ddpctl.infra.runs.prepare import prepare
    from ddpctl.infra.runs.records import RunOptions

    from .options import NodeCount, NprocList, RunId

    nodes = _convert(NodeCount(), nodes, "--nodes", sep=":")
    nproc_per_node = _convert(NprocList(), nproc_per_node, "--nproc-per-node")
    for flag, value in (("--run-id", run_id), ("--resume-from", resume_from)):
        _convert(RunId(flag, allow_empty=True), value, flag)
    opts = RunOptions.given(
        job,
        args,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        max_restarts=max_restarts,
        name=name,
        port=port,
        run_id=run_id,
        env=env,
        env_files=env_files,
        python=python,
        launcher=launcher,
        snapshot_dir=snapshot_dir,
        resume_from=resume_from,
        workdir=workdir,
    )
    store = _store(home)
    prep = prepare(opts, store)
    terminal = _Terminal(prep.run.run_id) if on_line is print_line and not all_lines else None
    try:
        result = execute(prep, store, terminal.line if terminal else on_line or _quiet, progress or _quiet)
    finally:
        if terminal is not None:
            terminal.end()
    if result.interrupted:  # the CLI's Ctrl-C path ended in a result: the notebook's interrupt goes on
        raise KeyboardInterrupt
    from ddpctl.infra.runs import metrics as run_metrics

    run_dir = store.run_dir(result.run_id)
    metrics_file = run_dir / run_metrics.FILE
    return RunOutcome(
        run_id=result.run_id,
        exit_code=result.exit_code,
        wall_s=result.wall_s,
        nodes=tuple(NodeOutcome(n.node, n.exit_code, n.status) for n in result.nodes),
        failed_node=result.failed_node,
        interrupted=result.interrupted,
        hint=result.hint,
        cause=result.cause,
        log=run_dir / "output.log",
        metrics=run_metrics.read(run_dir),
        metrics_file=metrics_file if metrics_file.is_file() else None,
    )


def runs(*, home: str | Path | None = None) -> list[RunRecord]:
    """``ddpctl runs``: the recorded runs, oldest first (``to_dict()``: ``runs --json``'s entry,
    ``started`` in epoch seconds); a run going on on the cluster with no ddpctl here is asked there."""
    from ddpctl.infra.runs.on_cluster import bring_all_up_to_date
    from ddpctl.infra.runs.records import list_runs

    store = _store(home)
    bring_all_up_to_date(store)  # a run whose ddpctl was killed: its record from the cluster, as `runs`
    return list_runs(store)


def logs(
    run_id: str | None = None,
    *,
    node: str | None = None,
    rank: int | None = None,
    tail: int | None = None,
    home: str | Path | None = None,
) -> list[LogLine]:
    """``ddpctl logs``: a run's lines from its ``output.log`` (default: the last run started),
    filtered by node and rank, the last ``tail`` of them."""
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs import logs as run_logs

    from .options import RunId

    if run_id is not None:
        _convert(RunId("RUN_ID"), run_id, "RUN_ID")
    if tail is not None and tail < 0:
        raise UsageError(f"Invalid value for '--tail': {tail} is not in the range 0<=x<=10000000.")
    from ddpctl.infra.runs.on_cluster import bring_up_to_date

    store = _store(home)
    run_id, path = run_logs.log_path(store, run_id)
    bring_up_to_date(store, run_id)  # a run whose ddpctl was killed: its output from the cluster, as `logs`
    keep = run_logs.LogFilter(node, rank)
    run_logs.check_filter(store, run_id, keep)
    return list(run_logs.read(store, run_id, path, keep, tail=tail, follow=False))


def download(
    run_id: str,
    *,
    to: str | Path | None = None,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> Downloaded:
    """``ddpctl download RUN_ID [--to DIR]``: the run's outputs from its cluster (while that is up) into
    ``DIR/RUN_ID``, default its record's ``outputs``; ``to_dict()`` is ``download --json``'s."""
    from ddpctl.infra.runs.outputs import download as fetch_outputs

    from .options import RunId

    _convert(RunId("RUN_ID"), run_id, "RUN_ID")
    return fetch_outputs(_store(home), run_id, Path(to) if to else None, progress or _quiet)


def metrics(run_id: str | None = None, *, home: str | Path | None = None) -> list[dict[str, Any]]:
    """``ddpctl metrics --json``'s ``lines``: a run's metric lines (default: the last run started),
    one dict a line, [] where it wrote none. During a run, the lines brought so far (every few seconds)."""
    from ddpctl.infra.runs import metrics as run_metrics
    from ddpctl.infra.runs.logs import log_path

    from .options import RunId

    if run_id is not None:
        _convert(RunId("RUN_ID"), run_id, "RUN_ID")
    store = _store(home)
    run_id, _ = log_path(store, run_id)  # an unknown run: the CLI's one line
    return run_metrics.read(store.run_dir(run_id))
