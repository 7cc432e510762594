"""Preparing a run: pick (or plan) the cluster and plan the launch; nothing is created.

``prepare`` is what ``run --dry-run`` shows; ``run_execute.execute`` carries it out.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from ..launch import deps
from ..launch.launcher import Supervision, choose
from ..launch.nodes import OutputLine
from ..launch.plan import LaunchPlan, plan_torchrun
from ..launch.project import Project, locate, scan
from ..launch.reach_plan import head_reach_plan
from ..launch.sbatch import SbatchPlan, plan_sbatch
from ..launch.slurm_executor import SlurmExecutor
from ..launch.torchrun import run_snapshot_dir
from ..lifecycle import clusters
from ..model import locks
from ..model.env_vars import run_env
from ..model.errors import UsageError
from ..model.spec import ClusterSpec, RunSpec
from ..model.state import ClusterState, LaunchKind
from ..model.store import StateStore
from ..model.torch_versions import check_torch
from ..providers import get_provider
from ..providers.base import Executor, ExecutorFor, Provider
from .health import plan_query
from .jobs import BUNDLE_DIR, Job, check_bundled_args, resolve_job
from .options import RunOptions
from .ranks import check_ranks_fit_gpus, node_nprocs, nproc_source
from .records import OUTPUTS, read_options, refuse_queued, resume_options


@dataclass
class PreparedRun:
    provider: Provider
    cluster: ClusterState
    run: RunSpec
    plan: LaunchPlan | SbatchPlan
    ephemeral: bool  # the cluster is brought up for this run (unless it is up already) and taken down after it
    options: RunOptions  # as given, recorded for `run --resume`
    #: which nodes and how many processes, for the run's header and --dry-run ("all 2 node(s) of cluster 'c', 4+4 ...")
    summary: str = ""
    #: the same launch on the cluster as it is now (a node replaced on a new machine); None: sbatch
    replan: Callable[[ClusterState], LaunchPlan] | None = None
    #: ``run --resume``: a run still going on the cluster's side is attached to again, not started again
    resumed: bool = False
    #: a resumed run that has ended may start again from its snapshot (False: sbatch, only attached to)
    restartable: bool = True
    #: an elastic run's lost node may be replaced by a new machine (``Provider.replaces_lost_nodes``)
    replaces_nodes: bool = False
    #: what carries the plan out, given where the run's lines go: the provider's executor (torchrun),
    #: or Slurm's on the login node (sbatch); nothing above ``launch/`` asks which
    executor_for: ExecutorFor | None = None

    @property
    def outlives_this_machine(self) -> bool:
        """Once submitted, the run goes on with no ddpctl here (the head node's supervisor, a Slurm job)."""
        return isinstance(self.plan, SbatchPlan) or self.plan.supervision != Supervision.HERE

    def executor(self, sink: Callable[[OutputLine], None]) -> Executor:
        if self.executor_for is None:
            return self.provider.executor(self.cluster, sink)
        return self.executor_for(sink)


def prepare_resume(run_id: str, store: StateStore) -> PreparedRun:
    """Plan ``run --resume``: the recorded run's options again, same run id, on the same cluster.

    A run still going on the cluster's side (its ddpctl here was killed: the head node's supervisor,
    a Slurm job) is attached to again (``execute``); else (torchrun launches only) the cluster is brought up again if the run owned it and it is gone,
    whatever is left of the earlier attempt is stopped first, and the job picks up from its snapshot.
    """
    refuse_queued(store, run_id, f"so there is nothing to resume (`ddpctl stop {run_id}` takes it out of the queue)")
    locks.check_run_free(store, run_id)
    opts, owned = resume_options(run_id, store)
    if finished_ok(store, run_id):
        raise UsageError(
            f"run {run_id!r} succeeded: there is nothing to resume (`ddpctl run {opts.job} --resume-from {run_id}` "
            "starts a new run from its snapshot)"
        )
    if not owned and not store.exists(opts.name):
        raise UsageError(
            f"run {run_id!r} ran on cluster {opts.name!r}, which is gone: bring it up again "
            f"(`ddpctl up --name {opts.name} ...`), then resume"
        )
    return replace(prepare(opts, store, resume=True, owned=owned), resumed=True)


def prepare(
    opts: RunOptions, store: StateStore, *, resume: bool = False, owned: bool = False, only: tuple[str, ...] = ()
) -> PreparedRun:
    """Validate everything and plan the launch; nothing is created.

    ``owned``: the run owns its cluster even if that is up already (a resumed run that brought it up).
    ``only``: the nodes of the cluster the run may use, in its order (``run --healthy-only``: the
    healthy ones, ``check.healthy_run``); the first is the run's head node.
    """
    job = resolve_job(opts.job)
    env, secret_env = run_env(opts.env, opts.env_files)
    store.check_writable()
    if not resume and opts.run_id and (store.run_dir(opts.run_id) / "options.json").exists():
        raise UsageError(
            f"run id {opts.run_id!r} is already recorded (`ddpctl runs` lists it): choose another --run-id, "
            f"or `ddpctl run --resume {opts.run_id}` to go on with that run"
        )
    given = opts.nproc_per_node if isinstance(opts.nproc_per_node, (int, tuple)) else None
    provider, cluster, ephemeral, nodes = _cluster_for(opts, store, owned, given)
    if only:
        cluster = replace(cluster, nodes=[n for n in cluster.nodes if n.name in only])
    nprocs = node_nprocs(cluster, nodes, opts.nproc_per_node)
    nproc = nprocs[0] if len(set(nprocs)) == 1 and not isinstance(given, tuple) else nprocs  # a list as given
    # a resumed run whose cluster went with it starts from the snapshot folder it kept
    kept = resume and opts.run_id and (store.run_dir(opts.run_id) / OUTPUTS).is_dir()
    source = opts.resume_from or (opts.run_id if kept else "")
    run = RunSpec(
        job=job.name,
        args=opts.args,
        nodes=nodes,
        nproc_per_node=nproc,
        max_restarts=opts.max_restarts,
        run_id=opts.run_id,
        env=env,
        secret_env=secret_env,
        min_nodes=opts.min_nodes,
        snapshot_dir=opts.snapshot_dir,
        resume_from=resume_source(source, store, cluster, provider) if source else "",
        **({} if opts.hang_timeout_s is None else {"hang_timeout_s": opts.hang_timeout_s}),
        **({} if opts.health_every_s is None else {"health_every_s": opts.health_every_s}),
    )
    _check_run(provider, cluster, run, job, opts, store)
    summary = run_summary(cluster, run, opts, ephemeral=ephemeral and not store.exists(cluster.name))
    replaces = run.elastic and provider.replaces_lost_nodes(cluster, store)
    kind = choose(
        LaunchKind(opts.launcher or cluster.launcher),
        head_supervises=provider.head_supervises,
        replaces_nodes=replaces,
        environ=os.environ,
        head_replaces=replaces and provider.head_replacer(cluster, store) is not None,
    )
    if kind == Supervision.SLURM:
        return _prepare_sbatch(provider, cluster, run, job, opts, store, ephemeral, summary, resume)
    prep = _prepare_torchrun(provider, cluster, run, job, opts, store, ephemeral, summary, resume)
    gpus = [node for node in cluster.nodes[: run.nodes] if node.gpus] if kind == Supervision.HEAD else []
    query = plan_query(replace(cluster, nodes=gpus)).nodes if gpus else ()
    every = run.health_every_s if query else 0
    prep.plan = replace(prep.plan, supervision=kind, health_query=query, health_every_s=every)
    prep.replaces_nodes = replaces
    return prep


def _cluster_for(
    opts: RunOptions, store: StateStore, owned: bool, given: int | tuple | None
) -> tuple[Provider, ClusterState, bool, int]:
    """The cluster the run goes on (``--name``, else the only one), its provider, whether the run
    owns it (a cluster of its own, planned here: brought up by ``execute``) and the run's node count."""
    name = clusters.resolve_name(store, opts.name)
    if name is not None and store.exists(name):
        cluster = store.load(name)
        nodes = opts.nodes or cluster.spec.nodes  # no --nodes: every node of the cluster
        return get_provider(cluster.spec.provider), cluster, owned, nodes
    spec_kwargs = {"python": opts.python} if opts.python else {}
    if opts.nodes:  # else the spec's default: one local node
        spec_kwargs["nodes"] = opts.nodes
    spec = ClusterSpec(
        name=name or "default",
        nproc_per_node=given if isinstance(given, int) else 0,
        port=opts.port,
        **spec_kwargs,
    )
    provider, cluster = clusters.plan_up(spec, store, ephemeral=True)
    return provider, cluster, True, spec.nodes


def _check_run(
    provider: Provider, cluster: ClusterState, run: RunSpec, job: Job, opts: RunOptions, store: StateStore
) -> None:
    """What the run needs of its nodes, found before anything starts: the provider's checks, ranks
    that fit the GPUs, the bundled job's arguments (its own parser), a supported torch on each node."""
    provider.check_run(cluster, run, opts.python, cluster_exists=store.exists(cluster.name))
    check_ranks_fit_gpus(cluster, run)
    check_bundled_args(job, run.args, parsing_python(cluster, provider))
    for node in cluster.nodes[: run.nodes]:
        if node.torch:  # as configure found it ("": not recorded, as on local nodes, checked at up)
            check_torch(node.torch, f"node {node.name} ({node.python or cluster.spec.python})")


def _prepare_sbatch(
    provider: Provider,
    cluster: ClusterState,
    run: RunSpec,
    job: Job,
    opts: RunOptions,
    store: StateStore,
    ephemeral: bool,
    summary: str,
    resume: bool,
) -> PreparedRun:
    """A run through sbatch on the cluster's Slurm (its login node is the cluster's first); its secrets
    go in a 0600 file beside the script, which the job reads and removes (``launch/sbatch.py``)."""
    if run.elastic:
        raise UsageError("--nodes MIN:MAX (elastic) is for torchrun launches: give sbatch a node count")
    project, requirements = user_project(job, opts, remote=True)  # a user's script: its project, shipped
    plan = plan_slurm(cluster, run, job.script, requirements, project)
    login = cluster.nodes[0].ssh
    assert login is not None  # Slurm answers on a remote head node
    slurm = partial(SlurmExecutor, login)
    if resume and not store.exists(cluster.name):  # its job went with the cluster
        raise UsageError(
            f"run {opts.run_id} no longer runs: its cluster went; --resume attaches again to an sbatch job while "
            f"it runs; `ddpctl run {opts.job} --resume-from {opts.run_id}` submits a new job from its snapshot"
        )
    # a resumed sbatch run is only attached to again, while its job runs (Slurm restarts nothing of ddpctl's)
    return PreparedRun(provider, cluster, run, plan, ephemeral, opts, summary, executor_for=slurm, restartable=False)


def _prepare_torchrun(
    provider: Provider,
    cluster: ClusterState,
    run: RunSpec,
    job: Job,
    opts: RunOptions,
    store: StateStore,
    ephemeral: bool,
    summary: str,
    resume: bool,
) -> PreparedRun:
    """A run through torchrun on every node (c10d rendezvous on the head's port): the user's
    project and packages located, the plan made (again, ``replan``, for a cluster that changed)."""
    port = provider.rdzv_port(cluster, opts.port)
    project, requirements = user_project(job, opts, remote=provider.remote_nodes)
    # this machine's nodes: one folder of environments for every cluster (a run's own cluster too)
    envs = "" if provider.remote_nodes else str(store.home / "envs")

    def replan(now: ClusterState) -> LaunchPlan:
        return plan_torchrun(
            now,
            run,
            script=str(job.script),
            port=port,
            bundle_root=str(BUNDLE_DIR),
            project=project,
            requirements=requirements,
            envs=envs,
        )

    plan = replan(cluster)
    if provider.remote_nodes:  # nodes on other hosts: first check they reach the head's port
        plan = replace(plan, precheck=head_reach_plan(cluster, cluster.nodes[: run.nodes], port))
    if resume:
        plan = replace(plan, stop_first=True)
    return PreparedRun(provider, cluster, run, plan, ephemeral, opts, summary, replan)


def user_project(job: Job, opts: RunOptions, *, remote: bool) -> tuple[Project | None, deps.Requirements | None]:
    """A user's script's project and the run's requirements (the project's ``requirements.txt``, or
    ``--requirements``); a bundled job has no project, only its ``--requirements``. ``remote``: the
    project is shipped (over SSH to each node, or through sbatch to the login node's shared work
    directory), so it is read and hashed, with what pip needs of it (wheels .gitignore leaves out too);
    else this machine's nodes run it in place."""
    if job.bundled:
        return None, deps.find(None, opts.requirements)
    workdir = Path(opts.workdir) if opts.workdir else None
    project = locate(job.script, workdir)
    requirements = deps.find(Path(project.root), opts.requirements)
    if remote:
        project = scan(job.script, workdir, extra=requirements.files if requirements else ())
    return project, requirements


def finished_ok(store: StateStore, run_id: str) -> bool:
    """The run's record says it ended with exit status 0."""
    import json

    try:
        return json.loads((store.run_dir(run_id) / "run.json").read_text())["result"]["exit_code"] == 0
    except (OSError, ValueError, KeyError, TypeError):
        return False


def parsing_python(cluster: ClusterState, provider: Provider) -> str | None:
    """A Python with torch on this machine to parse a bundled job's arguments with: the local
    nodes' own, else ddpctl's if it has torch (None: none here; the nodes parse them at launch)."""
    if not provider.remote_nodes:
        return (cluster.nodes[0].python if cluster.nodes else "") or cluster.spec.python
    import importlib.util
    import sys

    return sys.executable if importlib.util.find_spec("torch") else None


def resume_source(run_id: str, store: StateStore, cluster: ClusterState, provider: Provider) -> str:
    """Where the nodes of ``cluster`` find run ``run_id``'s snapshot (``run --resume-from``): its
    --snapshot-dir, its kept outputs (on this machine's nodes), or its own folder on the same cluster."""
    path = store.run_dir(run_id) / "options.json"
    if not path.is_file():
        raise UsageError(f"--resume-from {run_id}: no such run under {store.home}: `ddpctl runs` lists them")
    doc, old = read_options(path)
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


def run_summary(cluster: ClusterState, run: RunSpec, opts: RunOptions, *, ephemeral: bool) -> str:
    """The run's nodes and processes in words, e.g. "all 2 node(s) of cluster 'gpu', 4+4 process(es) (one per GPU)"."""
    total = cluster.spec.nodes
    if ephemeral:
        where = f"{run.nodes} node(s) of cluster {cluster.name!r} (brought up for this run)"
    elif not opts.nodes:
        where = f"all {total} node(s) of cluster {cluster.name!r}"
    else:
        where = f"{run.nodes} of the {total} node(s) of cluster {cluster.name!r}"
    source = nproc_source(cluster, run.nodes, opts.nproc_per_node)
    procs = "+".join(map(str, run.nprocs()))
    return f"{where}, {procs} process(es)" + (f" ({source})" if source else "")


def plan_slurm(
    cluster: ClusterState,
    run: RunSpec,
    script: Path,
    requirements: deps.Requirements | None = None,
    project: Project | None = None,
) -> SbatchPlan:
    """sbatch on the cluster's head (login) node; output on the head's work dir (a shared filesystem),
    the run's packages (``requirements``) too, made there from the login node before sbatch; a
    user's script from its ``project``'s copy there (``projects/<digest>``), where its ranks start."""
    if not cluster.nodes or not cluster.nodes[0].ssh:
        raise UsageError(f"--launcher sbatch needs a cluster with a Slurm login node; {cluster.name!r} has none")
    head = cluster.nodes[0]
    if len(set(run.nprocs())) > 1:
        raise UsageError(
            f"--launcher sbatch runs the same --nproc-per-node on every node, not {'+'.join(map(str, run.nprocs()))}: "
            "give one value"
        )
    node_script, cwd, project_dir = str(script), "", ""
    if head.bundle_dir and script.is_relative_to(BUNDLE_DIR):
        node_script = f"{head.bundle_dir}/{script.relative_to(BUNDLE_DIR)}"
    elif project is not None:  # copied once per content into the shared work dir, as torchrun's nodes get it
        project_dir = cwd = f"{head.workdir}/projects/{project.digest}"
        node_script = f"{project_dir}/{project.script}"
    elif not script.is_relative_to(BUNDLE_DIR):
        raise UsageError(f"{script}: a script for sbatch ships with its project (infra.launch.project.scan)")
    python, steps = head.python or cluster.spec.python, ()
    if requirements is not None:
        envs = f"{head.workdir}/envs"
        step = deps.step(
            requirements,
            node=head.name,
            host=head.host,
            python=python,
            envs=envs,
            project_dir=project_dir,
            workdir=head.workdir,
            local=False,
        )
        python, steps = step.python, (step,)
    plan = plan_sbatch(
        run,
        python=python,
        script=node_script,
        output_dir=f"{head.workdir}/slurm",
        workdir=head.workdir,
        cwd=cwd,
        cluster_id=cluster.cluster_id,
        gpus_per_node=head.gpus,
        env_file=head.env_file,
        env=cluster.spec.env,
    )
    return replace(plan, deps=steps, project=project if project_dir else None, project_dir=project_dir)
