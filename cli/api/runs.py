"""The Python API's run verbs: ``run``, ``runs``, ``logs``, ``download``, ``metrics``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpctl.infra.model.results import OutputLine, RunResult
    from ddpctl.infra.runs.download import Downloaded
    from ddpctl.infra.runs.logs import LogLine
    from ddpctl.infra.runs.records import RunRecord

from .common import _checked, _env_pairs, _quiet, _store, _Terminal, print_line, print_progress


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
    cause: str  # that cause's name, e.g. "rendezvous-timeout", "hung"
    log: Path  # the run's output.log (`ddpctl logs RUN_ID`, `ddpctl.logs(run_id)`)
    #: the run's metric lines (`ddpctl metrics RUN_ID --json`'s `lines`: step, epoch, loss, accuracy,
    #: samples_per_s...), [] where it wrote none; `metrics[-1]` is the last
    metrics: list[dict[str, Any]] = field(default_factory=list)
    metrics_file: Path | None = None  # the run's metrics.jsonl in its record, where it has one
    slow: tuple[str, ...] = ()  # the nodes named slow while it ran, with their worst ratio: "node1 (1.60x)"
    #: the nodes the run named (failed, hung, lost, slow) found unhealthy after it: "node1: unhealthy: GPU 0: ..."
    health: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_codes(self) -> dict[str, int | None]:
        """Each node's agent's exit code."""
        return {n.node: n.exit_code for n in self.nodes}

    @classmethod
    def of(cls, result: RunResult, run_dir: Path) -> RunOutcome:
        """The outcome of ``result``, with what its record in ``run_dir`` holds (its log, its metrics)."""
        from ddpctl.infra.runs import metrics as run_metrics

        metrics_file = run_dir / run_metrics.FILE
        return cls(
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
            slow=tuple(result.slow),
            health=tuple(result.health),
        )

    def to_dict(self) -> dict[str, Any]:
        """``run --json``'s ``result`` (and ``run.json``'s)."""
        doc = asdict(self)
        doc.pop("log"), doc.pop("metrics"), doc.pop("metrics_file")
        return {**doc, "nodes": list(doc["nodes"]), "slow": list(doc["slow"]), "health": list(doc["health"])}


def run(
    job: str,
    *args: str,
    nodes: int | str | tuple[int, int] | None = None,
    nproc_per_node: int | str | tuple[int, ...] | None = None,
    max_restarts: int | None = None,
    name: str | None = None,
    port: int | None = None,
    run_id: str | None = None,
    launcher: str | None = None,
    snapshot_dir: str = "",
    workdir: str | Path | None = None,
    requirements: str | Path | None = None,
    resume_from: str | None = None,
    env: Mapping[str, str] | Sequence[str] = (),
    env_from: Sequence[str] = (),
    env_files: Sequence[str | Path] = (),
    python: str | None = None,
    hang_timeout: int | None = None,
    health_every: int | None = None,
    on_line: Callable[[OutputLine], None] | None = print_line,
    progress: Callable[[str], None] | None = print_progress,
    all_lines: bool = False,
    healthy_only: bool = False,
    home: str | Path | None = None,
) -> RunOutcome:
    """``ddpctl run JOB [-- ARGS]``: run a bundled job or a script on ``nodes`` nodes and wait for it.

    ``args`` go to the job (``ddpctl run mnist -- --epochs 1`` is ``run("mnist", "--epochs", "1")``);
    the other keywords are ``run``'s options (``nodes="2:3"``: elastic). Every line goes to the
    run's ``output.log`` and to ``on_line`` (an ``OutputLine``: ``node``, ``rank``, ``text``; None:
    quiet). The default prints them as ``ddpctl run`` does, ``[node1 r0] text`` on stdout: the
    agents' repeated start-up lines once, a failure's first traceback only (``all_lines=True``:
    every line). ``env``: the ranks' variables, a mapping ``{"K": "V"}`` (``-e K=V``); ``env_from``:
    names whose values come from your environment (``-e K``: secrets, recorded and shown by name
    only); ``env_files``: ``--env-file``s; ``healthy_only``: ``--healthy-only``. ddpctl's own messages go to ``progress`` (default: stderr). A job that fails returns ``ok`` False with the ``hint``; Ctrl-C stops every process of
    the run and raises ``KeyboardInterrupt``.
    """
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs.execute import execute
    from ddpctl.infra.runs.options import RunOptions

    from ..run_command import run as command

    if isinstance(requirements, os.PathLike):  # a file's path, taken as the flag's text
        requirements = os.fspath(requirements)
    given = {k: _checked(command, k, v) for k, v in _given_run(locals()).items()}
    if not given["job"]:
        raise UsageError("missing JOB: give a bundled job (message-passing, mnist, mingpt) or a script path")
    opts = RunOptions.of_flags(
        given["job"], _checked(command, "job_args", args, "args"), _env_pairs(env, env_from), given
    )
    store = _store(home)
    from ddpctl.infra.runs.check import prepare_run

    prep = prepare_run(opts, store, progress or _quiet, healthy_only=healthy_only)
    terminal = _Terminal(prep.run.run_id) if on_line is print_line and not all_lines else None
    try:
        result = execute(prep, store, terminal.line if terminal else on_line or _quiet, progress or _quiet)
    finally:
        if terminal is not None:
            terminal.end()
    if result.interrupted:  # the CLI's Ctrl-C path ended in a result: the notebook's interrupt goes on
        raise KeyboardInterrupt
    return RunOutcome.of(result, store.run_dir(result.run_id))


def _given_run(values: dict[str, Any]) -> dict[str, Any]:
    """``run``'s keywords that are its command's options (``RUN_FLAGS``, and the job), checked by their Click types."""
    from ddpctl.infra.runs.options import RUN_FLAGS

    return {k: values[k] for k in ("job", *RUN_FLAGS)}


def runs(*, home: str | Path | None = None) -> list[RunRecord]:
    """``ddpctl runs``: the recorded runs, oldest first (``to_dict()``: ``runs --json``'s entry,
    ``started`` in epoch seconds); a run going on on the cluster with no ddpctl here is asked there."""
    from ddpctl.infra.runs.on_cluster import listed

    return listed(_store(home))


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
    from ddpctl.infra.runs import logs as run_logs

    from ..access_commands import logs as command

    run_id = _checked(command, "run_id", run_id)
    node, rank, tail = (_checked(command, k, v) for k, v in (("node", node), ("rank", rank), ("tail", tail)))
    got: list[LogLine] = []
    run_logs.show(_store(home), run_id, got.append, node=node, rank=rank, tail=tail)
    return got


def download(
    run_id: str,
    *,
    to: str | Path | None = None,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> Downloaded:
    """``ddpctl download RUN_ID [--to DIR]``: the run's outputs from its cluster (while that is up) into
    ``DIR/RUN_ID``, default its record's ``outputs``; ``to_dict()`` is ``download --json``'s."""
    from ddpctl.infra.runs.download import download as fetch_outputs

    from ..access_commands import download as command

    if run_id is None:
        _checked(command, "run_id", "")
    run_id, to = _checked(command, "run_id", run_id), _checked(command, "to", to)
    return fetch_outputs(_store(home), run_id, Path(to) if to else None, progress or _quiet)


def metrics(
    run_id: str | Sequence[str] | None = None,
    *,
    png: str | os.PathLike[str] | None = None,
    csv: str | os.PathLike[str] | None = None,
    home: str | Path | None = None,
) -> list[dict[str, Any]]:
    """``ddpctl metrics --json``'s ``lines``: a run's metric lines (default: the last run started),
    one dict a line, [] where it wrote none. During a run, the lines brought so far (every few seconds).
    A list of run ids: every run's lines in that order, each with its ``run_id`` first (``--csv``'s
    rows). ``png``/``csv``: also draw the curves / write the CSV there, as ``--png``/``--csv`` do."""
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs import curves

    from ..inspect_commands import metrics as command
    from .common import _python_kind

    several = run_id is not None and not isinstance(run_id, str)
    if several and not isinstance(run_id, (list, tuple)):
        raise UsageError(f"run_id={run_id!r} is {_python_kind(run_id)}: give a run id (a str) or a list of them")
    ids = _checked(command, "run_ids", list(run_id) if several else [] if run_id is None else [run_id], "run_id")
    png, csv = _checked(command, "png", png), _checked(command, "csv_file", csv, "csv")
    targets = curves.check_targets(png, csv)  # before anything is read or written
    runs = curves.load(_store(home), ids)  # an unknown run: the CLI's one line
    curves.export(runs, targets)
    return curves.rows(runs) if several else runs[0].lines
