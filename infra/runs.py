"""One run of a job: pick (or bring up) the cluster, plan the launch, execute it, clean up.

``prepare`` creates nothing (it is what ``run --dry-run`` shows); ``execute`` carries it out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import clusters, locks
from .errors import UsageError
from .jobs import BUNDLE_DIR, resolve_job
from .launch.plan import LaunchPlan, plan_torchrun
from .launch.reach import head_reach_plan
from .launch.sbatch import SbatchPlan, plan_sbatch
from .launch.slurm import SlurmExecutor
from .launch.supervise import OutputLine, RunResult
from .launch.torchrun import run_snapshot_dir
from .project import LARGE_BYTES, locate, scan
from .providers import get_provider
from .providers.base import Progress, Provider
from .spec import ClusterSpec, RunSpec, run_env
from .state import ClusterState, DownStore, StateStore, atomic_write

#: Under a run's record: what the run wrote to its snapshot folder, kept when its cluster went.
OUTPUTS = "outputs"


@dataclass
class PreparedRun:
    provider: Provider
    cluster: ClusterState
    run: RunSpec
    plan: LaunchPlan | SbatchPlan
    ephemeral: bool  # the cluster is brought up for this run (unless it is up already) and taken down after it
    options: RunOptions  # as given, recorded for `run --resume`


@dataclass(frozen=True)
class RunOptions:
    """``ddpctl run``'s options as given (None: not given)."""

    job: str
    args: tuple[str, ...] = ()
    nodes: int = 1
    nproc_per_node: int | tuple[int, ...] | None = None
    max_restarts: int | None = None  # None: 0, or 3 for an elastic run
    name: str | None = None
    port: int | None = None
    run_id: str = ""
    env: tuple[str, ...] = ()  # as given: KEY=VALUE, or a bare KEY (a secret from the caller's environment)
    env_files: tuple[str, ...] = ()  # --env-file: every value a secret, read again by `run --resume`
    python: str | None = None
    launcher: str | None = None  # torchrun | sbatch; None: the cluster's (sbatch where Slurm runs)
    min_nodes: int = 0  # elastic (--nodes MIN:MAX): go on while this many nodes remain
    snapshot_dir: str = ""  # DDPCTL_SNAPSHOT_DIR for the jobs: a directory or s3://bucket/prefix
    workdir: str = ""  # a user's script: its project's directory ("": the script's), shipped to remote nodes
    resume_from: str = ""  # another run's id: start from its snapshot (kept outputs, or its folder)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict) -> RunOptions:
        doc = dict(doc, args=tuple(doc["args"]), env=tuple(doc["env"]), env_files=tuple(doc.get("env_files", ())))
        if isinstance(doc["nproc_per_node"], list):
            doc["nproc_per_node"] = tuple(doc["nproc_per_node"])
        return cls(**doc)


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

    def to_dict(self) -> dict:
        return asdict(self)


def list_runs(store: StateStore) -> list[RunRecord]:
    """Every recorded run, oldest first; an unfinished one is what `run --resume` is for, a
    damaged one (a record that cannot be read) is listed as such."""
    records = []
    for run_dir in (store.home / "runs").glob("*/"):
        path = run_dir / "options.json"
        if not path.exists():
            continue  # not a run (or one that never got going)
        try:
            doc, opts = _read_options(path)
        except UsageError as exc:
            records.append(
                RunRecord(
                    run_dir.name, "?", "?", "?", _mtime(path), f"damaged (options.json: {_reason(exc.__cause__)})"
                )
            )
            continue
        result = "running" if locks.run_alive(store, run_dir.name) else "unfinished"
        done = path.with_name("run.json")
        if done.is_file():
            try:
                outcome = json.loads(done.read_text())["result"]
                code = outcome.get("exit_code")
                result = (
                    "interrupted"
                    if outcome.get("interrupted")
                    else "succeeded"
                    if code == 0
                    else f"failed (exit {code})"
                )
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                result = f"damaged (run.json: {_reason(exc)})"
        nodes = opts.nodes if not opts.min_nodes else f"{opts.min_nodes}:{opts.nodes}"
        kept = str(run_dir / OUTPUTS) if (run_dir / OUTPUTS).is_dir() else ""
        records.append(RunRecord(run_dir.name, opts.job, nodes, doc.get("cluster", "?"), _mtime(path), result, kept))
    return sorted(records, key=lambda r: r.started)


def _read_options(path: Path) -> tuple[dict, RunOptions]:
    """A run's recorded options; UsageError (caused by what is wrong) if the record cannot be read."""
    try:
        doc = json.loads(path.read_bytes().decode())
        return doc, RunOptions.from_dict(doc["options"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"the record of run {path.parent.name!r} ({path}) is damaged ({_reason(exc)}): start the job again "
            "with `ddpctl run`"
        ) from exc


def _reason(exc: BaseException) -> str:
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
    doc, opts = _read_options(path)
    if not isinstance(doc.get("cluster"), str) or not isinstance(doc.get("ephemeral"), bool):
        raise UsageError(f"the record of run {run_id!r} ({path}) is damaged (no cluster): start the job again")
    return replace(opts, name=doc["cluster"]), doc["ephemeral"]


def prepare_resume(run_id: str, store: StateStore) -> PreparedRun:
    """Plan ``run --resume``: the recorded run's options again, same run id, on the same cluster.

    The cluster is brought up again if the run owned it and it is gone; whatever is left of the
    earlier attempt is stopped first; the job picks up from its snapshot.
    """
    locks.check_run_free(store, run_id)
    opts, owned = resume_options(run_id, store)
    if not owned and not store.exists(opts.name):
        raise UsageError(
            f"run {run_id!r} ran on cluster {opts.name!r}, which is gone: bring it up again "
            f"(`ddpctl up --name {opts.name} ...`), then resume"
        )
    return prepare(opts, store, resume=True, owned=owned)


def prepare(opts: RunOptions, store: StateStore, *, resume: bool = False, owned: bool = False) -> PreparedRun:
    """Validate everything and plan the launch; nothing is created.

    ``owned``: the run owns its cluster even if that is up already (a resumed run that brought it up).
    """
    job = resolve_job(opts.job)
    env, secret_env = run_env(opts.env, opts.env_files)
    store.check_writable()
    name = clusters.resolve_name(store, opts.name)
    if name is not None and store.exists(name):
        cluster = store.load(name)
        provider = get_provider(cluster.spec.provider)
        ephemeral = owned
        nproc = opts.nproc_per_node or cluster_nprocs(cluster, opts.nodes)
    else:
        nproc = opts.nproc_per_node or 1
        spec_kwargs = {"python": opts.python} if opts.python else {}
        spec = ClusterSpec(
            name=name or "default",
            nodes=opts.nodes,
            nproc_per_node=nproc if isinstance(nproc, int) else 1,
            port=opts.port,
            **spec_kwargs,
        )
        provider, cluster = clusters.plan_up(spec, store, ephemeral=True)
        ephemeral = True
    # a resumed run whose cluster went with it starts from the snapshot folder it kept
    kept = resume and opts.run_id and (store.run_dir(opts.run_id) / OUTPUTS).is_dir()
    source = opts.resume_from or (opts.run_id if kept else "")
    run = RunSpec(
        job=job.name,
        args=opts.args,
        nodes=opts.nodes,
        nproc_per_node=nproc,
        max_restarts=opts.max_restarts,
        run_id=opts.run_id,
        env=env,
        secret_env=secret_env,
        min_nodes=opts.min_nodes,
        snapshot_dir=opts.snapshot_dir,
        resume_from=resume_source(source, store, cluster, provider) if source else "",
    )
    provider.check_run(cluster, run, opts.python, cluster_exists=store.exists(cluster.name))
    launcher = opts.launcher or cluster.launcher
    if launcher == "sbatch":
        if run.elastic:
            raise UsageError("--nodes MIN:MAX (elastic) is for torchrun launches: give sbatch a node count")
        if resume:
            raise UsageError("--resume is for torchrun launches: on Slurm, resubmit the job with the same --run-id")
        if run.secret_env:
            raise UsageError(
                "secrets (-e KEY, --env-file) go with torchrun launches (the sbatch script would hold their values): "
                "use --launcher torchrun, or keep them in the job's environment on the cluster"
            )
        return PreparedRun(provider, cluster, run, plan_slurm(cluster, run, job.script), ephemeral, opts)
    port = provider.rdzv_port(cluster, opts.port)
    project = None
    if not job.bundled:  # its project: shipped to remote nodes, run in place on this machine's
        workdir = Path(opts.workdir) if opts.workdir else None
        project = (scan if provider.remote_nodes else locate)(job.script, workdir)
    plan = plan_torchrun(cluster, run, script=str(job.script), port=port, bundle_root=str(BUNDLE_DIR), project=project)
    if provider.remote_nodes:  # nodes on other hosts: first check they reach the head's port
        plan = replace(plan, precheck=head_reach_plan(cluster, cluster.nodes[: run.nodes], port))
    if resume:
        plan = replace(plan, stop_first=True)
    return PreparedRun(provider, cluster, run, plan, ephemeral, opts)


def resume_source(run_id: str, store: StateStore, cluster: ClusterState, provider: Provider) -> str:
    """Where the nodes of ``cluster`` find run ``run_id``'s snapshot (``run --resume-from``): its
    --snapshot-dir, its kept outputs (on this machine's nodes), or its own folder on the same cluster."""
    path = store.run_dir(run_id) / "options.json"
    if not path.is_file():
        raise UsageError(f"--resume-from {run_id}: no such run under {store.home}: `ddpctl runs` lists them")
    doc, old = _read_options(path)
    kept = store.run_dir(run_id) / OUTPUTS
    if old.snapshot_dir:
        return old.snapshot_dir
    if kept.is_dir() and not provider.remote_nodes:
        return str(kept)
    if doc.get("cluster") == cluster.name and not doc.get("ephemeral"):
        return run_snapshot_dir(cluster.shared_dir, run_id)
    raise UsageError(
        f"--resume-from {run_id}: that run kept no snapshot these nodes can read (it ran on {doc.get('cluster')!r}): "
        "give runs that must outlive their cluster a --snapshot-dir"
    )


def cluster_nprocs(cluster: ClusterState, nodes: int) -> int | tuple[int, ...]:
    """Processes per node for a run that gives no --nproc-per-node: each node's own count, if it has one."""
    if nodes > len(cluster.nodes):
        return cluster.spec.nproc_per_node  # the planner says what is wrong with --nodes
    counts = tuple(n.nproc or cluster.spec.nproc_per_node for n in cluster.nodes[:nodes])
    return counts[0] if len(set(counts)) == 1 else counts


def plan_slurm(cluster: ClusterState, run: RunSpec, script: Path) -> SbatchPlan:
    """sbatch on the cluster's head (login) node; output on the head's work dir (a shared filesystem)."""
    if not cluster.nodes or not cluster.nodes[0].ssh:
        raise UsageError(f"--launcher sbatch needs a cluster with a Slurm login node; {cluster.name!r} has none")
    head = cluster.nodes[0]
    if len(set(run.nprocs())) > 1:
        raise UsageError("--launcher sbatch runs the same --nproc-per-node on every node: give one value")
    node_script = str(script)
    if head.bundle_dir and script.is_relative_to(BUNDLE_DIR):
        node_script = f"{head.bundle_dir}/{script.relative_to(BUNDLE_DIR)}"
    elif head.bundle_dir:
        raise UsageError("--launcher sbatch runs bundled jobs; copy your script to the nodes' shared filesystem first")
    return plan_sbatch(
        run,
        python=head.python or cluster.spec.python,
        script=node_script,
        output_dir=f"{head.workdir}/slurm",
        workdir=head.workdir,
        cluster_id=cluster.cluster_id,
        gpus_per_node=head.gpus,
        env_file=head.env_file,
        env=cluster.spec.env,
    )


def execute(prep: PreparedRun, store: StateStore, sink: Callable[[OutputLine], None], progress: Progress) -> RunResult:
    """Bring up the cluster if the run owns it, run the plan, take the cluster down again."""
    prep.provider.preflight(prep.cluster)
    name, run_id = prep.cluster.name, prep.run.run_id
    with locks.run(store, run_id, f"run {run_id} ({prep.run.job})"):
        bring_up = prep.ephemeral and not store.exists(name)
        hold = locks.ClusterLock(store, name, f"run {run_id} ({prep.run.job})").take(shared=not bring_up)
        try:
            if bring_up:
                clusters.up(prep.provider, prep.cluster, store, progress)
                hold.share()  # up: other runs may use it, nothing may change it
            elif prep.ephemeral and store.load(name).cluster_id != prep.cluster.cluster_id:
                raise locks.Busy(f"cluster {name!r} was just brought up by another command: run again to use it")
            return _execute(prep, store, sink, progress, hold)
        finally:
            hold.release()


def _execute(
    prep: PreparedRun,
    store: StateStore,
    sink: Callable[[OutputLine], None],
    progress: Progress,
    hold: locks.ClusterLock,
) -> RunResult:
    run_dir = store.run_dir(prep.run.run_id)
    try:
        store.make_run_dir(prep.run.run_id)  # private: only this user reads a run's output
        job = prep.options.job
        job = job if resolve_job(job).bundled else str(resolve_job(job).script)  # a resume may start elsewhere
        recorded = replace(prep.options, job=job, run_id=prep.run.run_id)
        options = {"options": recorded.to_dict(), "cluster": prep.cluster.name, "ephemeral": prep.ephemeral}
        atomic_write(run_dir / "options.json", json.dumps(options, indent=2) + "\n")
        where = "through sbatch" if isinstance(prep.plan, SbatchPlan) else f"rendezvous {prep.plan.rdzv_endpoint}"
        project = getattr(prep.plan, "project", None)
        if project is not None and project.size > LARGE_BYTES:
            progress(project.size_warning())
        progress(
            f"run {prep.run.run_id}: {prep.run.job} on {prep.run.nodes} node(s), {'+'.join(map(str, prep.run.nprocs()))} "
            f"process(es), {where}; output also in {run_dir / 'output.log'}"
        )
        log_fd = os.open(run_dir / "output.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(log_fd, "a", buffering=1) as log:

            def tee(line: OutputLine) -> None:
                rank = "" if line.rank is None else f" r{line.rank}"
                log.write(f"[{line.node}{rank}] {line.text}\n")
                sink(line)

            if isinstance(prep.plan, SbatchPlan):
                result = SlurmExecutor(prep.cluster.nodes[0].ssh, tee).run(prep.plan)
            else:
                result = prep.provider.executor(prep.cluster, tee).run(prep.plan)
    finally:
        if prep.ephemeral:
            try:
                if prep.provider.keep_outputs(prep.cluster, prep.run, run_dir / OUTPUTS):
                    progress(f"run {prep.run.run_id}: its snapshot folder is kept in {run_dir / OUTPUTS}")
            except OSError as exc:  # a full disk: the cluster still goes
                progress(f"warning: could not keep the run's snapshot folder in {run_dir / OUTPUTS}: {exc}")
            if hold.try_exclusive():
                prep.provider.down(store.load(prep.cluster.name), DownStore(store.home, progress), progress)
            else:
                users = ", ".join(h.describe() for h in hold.others()) or "another run"
                progress(
                    f"not taking {prep.cluster.name!r} down: {users} uses it; `ddpctl down --name "
                    f"{prep.cluster.name}` after that"
                )
    doc = {"cluster": prep.cluster.name, "plan": prep.plan.to_dict(), "result": asdict(result)}
    atomic_write(run_dir / "run.json", json.dumps(doc, indent=2) + "\n")
    return result
