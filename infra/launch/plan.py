"""The torchrun planner: cluster + run spec -> for each node the exact argv, env and directory.

Pure: no processes, no files, no network. ``ddpctl run --dry-run`` prints its result, and the
executors (local, SSH) carry it out unchanged.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..model.errors import UsageError
from ..model.host import Host
from ..model.spec import HANG_TIMEOUT_S, RunSpec
from ..model.state import ClusterState, NodeInfo
from ..node_programs import argv as program_argv
from ..node_programs import shown
from ..tools.procs import NODE_KEY, STORE_KEY
from .deps import DepsStep, Requirements, step
from .launcher import Supervision
from .project import Project
from .torchrun import RankEnv, literal, rank_env, run_markers, snapshot_from_workdir, torchrun_argv

#: What records and ``--dry-run`` show for a secret's value (``run -e KEY``, ``--env-file``).
SECRET_SHOWN = "<secret>"


@dataclass(frozen=True)
class NodeLaunch:
    """What runs on one node: one torchrun agent (or, ``LaunchPlan.store``, the run's rendezvous store)."""

    node: str
    host: str
    node_rank: int
    argv: tuple[str, ...]
    env: dict[str, str]  # added to the node's environment
    cwd: str
    log_dir: str
    env_file: str = ""  # sourced before the env above, so explicit values win
    project_dir: str = ""  # where the user's project is unpacked on the node first ("": nothing to ship)
    secret: tuple[str, ...] = ()  # names in env whose values are never recorded or shown
    #: names in env that are ddpctl's defaults (OMP_NUM_THREADS...): the node's env file, sourced
    #: after them, may set them otherwise (everything else in env wins over the file)
    defaults: tuple[str, ...] = ()

    def shown_env(self) -> dict[str, str]:
        """``env`` as records and ``--dry-run`` show it: secrets by name only."""
        return {k: SECRET_SHOWN if k in self.secret else v for k, v in self.env.items()}

    def dry_run_lines(self, what: str, argv: list[str] | tuple[str, ...]) -> list[str]:
        """This launch as ``--dry-run`` shows it, under the heading ``what``."""
        env = [f"    env:  {key}={value}" for key, value in self.shown_env().items()]
        return [f"  {what} ({self.host}):", f"    cwd:  {self.cwd}", *env, f"    argv: {shlex.join(argv)}"]

    def shell(self, *, last: bool = True) -> str:
        """The same launch as one shell line (what the SSH executor runs; what --dry-run shows).

        ``last=False``: without ``exec``, so that another command can follow it (``a && b``).
        """
        under = set(self.defaults) if self.env_file else set()  # what the file may override
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items() if k not in {*self.secret, *under})
        source = f"set -a && . {shlex.quote(self.env_file)} && set +a && " if self.env_file else ""
        if under:
            source = "export " + " ".join(f"{k}={shlex.quote(self.env[k])}" for k in self.defaults) + f" && {source}"
        # secrets come on the session's stdin (secret_input), never on a command line
        secrets = "".join(f"IFS= read -r {k} && export {k} && " for k in self.secret)
        run = "exec env" if last else "env"
        return (
            f"mkdir -p {shlex.quote(self.cwd)} && cd {shlex.quote(self.cwd)} && {source}{secrets}"
            f"{run} {env} {shlex.join(self.argv)}"
        )

    def secret_input(self) -> bytes:
        """What the launch line reads on stdin: the secrets' values, one line each, in ``secret`` order."""
        return "".join(f"{self.env[k]}\n" for k in self.secret).encode()


@dataclass(frozen=True)
class LaunchPlan:
    run_id: str
    job: str
    cluster: str
    rdzv_endpoint: str
    world_size: int
    nodes: tuple[NodeLaunch, ...]
    #: run first, on the same connections (before a remote run: every other node reaches the head's
    #: port, where ``store`` listens by then)
    precheck: LaunchPlan | None = None
    #: stop what is left of an earlier attempt of this run id on every node first (``run --resume``)
    stop_first: bool = False
    #: elastic: the run goes on while this many nodes remain (and the store on the head node runs); 0: any loss is fatal
    min_nodes: int = 0
    #: the user's project (``run SCRIPT``), shipped to the nodes whose launch names a ``project_dir``
    project: Project | None = None
    #: the c10d rendezvous store on the head node (``node_programs/rdzv_store.py``): the executor starts
    #: it before the agents (each joins it with ``is_host=0``) and stops it after the last has left
    store: NodeLaunch | None = None
    #: a directory every node must be able to write or create (the user's ``--snapshot-dir``, as the
    #: nodes see it): the SSH executor checks it on its connections before anything starts
    #: (``node_programs/writable.py``; this machine's nodes are checked by the local provider)
    writable: str = ""
    #: the run's own packages, made (or found) on each node before anything else of the run starts
    #: there (``node_programs/deps.py``); the agents start with that environment's Python
    deps: tuple[DepsStep, ...] = ()
    #: the supervisor's hang timeout (``run --hang-timeout``; launch/watch.py); 0: off
    hang_timeout_s: int = HANG_TIMEOUT_S
    #: who keeps the run going: this machine's ddpctl, or the head node's supervisor (``launcher.choose``)
    supervision: Supervision = Supervision.HERE
    #: the health query (``node_programs/gpu_health.py``) on each of the run's nodes with GPUs: a supervisor
    #: away from ddpctl (the head's) asks the nodes it named at the run's end (runs/health_in_runs.py judges)
    health_query: tuple[NodeLaunch, ...] = ()
    #: ``run --health-every`` for that supervisor: it asks the health query of them all on this timer while
    #: the run goes (0: never), and keeps what they said for the controller to judge
    health_every_s: int = 0

    @property
    def where(self) -> str:
        """How the run meets, for the run's first line."""
        return f"rendezvous {self.rdzv_endpoint}"

    def dry_run_lines(self) -> list[str]:
        """What ``run --dry-run`` prints: each process it would start, where, with what (secrets by
        name; a node program's long text by its name)."""
        lines = [
            f"Would run {self.job} as run {self.run_id}: world size {self.world_size}, rendezvous {self.rdzv_endpoint}"
        ]
        for deps in self.deps:
            lines += deps.dry_run_lines()
        if self.store is not None:
            lines += self.store.dry_run_lines(f"rendezvous store on {self.store.node}", shown(self.store.argv))
        for node in self.nodes:
            lines += node.dry_run_lines(node.node, node.argv)
        return lines

    def to_dict(self) -> dict:
        """As run records and ``--json`` keep it: no secret values, the project's file count."""
        doc = asdict(self)
        del doc["health_query"], doc["health_every_s"]  # the head's part, not the run's
        doc["project"] = self.project.to_dict() if self.project else None
        doc["deps"] = [deps.to_dict() for deps in self.deps]  # not the requirements' text, nor the program's
        for node, launch in zip(doc["nodes"], self.nodes):
            node["env"] = launch.shown_env()
        if self.store is not None:
            doc["store"]["env"] = self.store.shown_env()
            doc["store"]["argv"] = shown(self.store.argv)  # its program by name, not its text
        return doc


def plan_torchrun(
    cluster: ClusterState,
    run: RunSpec,
    *,
    script: str,
    port: int,
    bundle_root: str | None = None,
    project: Project | None = None,
    requirements: Requirements | None = None,
    envs: str = "",
) -> LaunchPlan:
    """Plan ``torchrun`` on the first ``run.nodes`` nodes of ``cluster`` (head node first).

    ``script`` is a path on this machine. On a node with its own ``bundle_dir`` (a remote node), a
    script from the bundle (under ``bundle_root``) runs from the node's copy, and a user's script
    from the node's copy of its ``project`` (``projects/<digest>`` in the node's work directory),
    which is also where it starts; on this machine's nodes a user's script runs in place, from its
    project's directory.

    ``requirements``: the run's own packages, in an environment of each node's (``deps.py``) under
    ``envs`` (this machine's nodes: one folder for them all), else under the node's work directory.
    Long because it is the plan's one reading order: each node's launch, its environment and its checks built
    where a reader looks for them.
    """
    if not cluster.nodes:
        raise UsageError(
            f"cluster {cluster.name!r} ({cluster.status}) records no nodes to run on: take it down with "
            f"`ddpctl down --name {cluster.name}`, then bring it up again"
        )
    if run.nodes > len(cluster.nodes):
        raise UsageError(
            f"--nodes {run.nodes} but cluster {cluster.name!r} has {len(cluster.nodes)} node(s): "
            f"use --nodes {len(cluster.nodes)} or fewer, or bring up a bigger cluster"
        )
    nodes = cluster.nodes[: run.nodes]
    head = nodes[0]
    endpoint = f"{head.host}:{port}"
    launches, steps = [], {}
    for rank, node in enumerate(nodes):
        log_dir = f"{node.workdir}/logs/{run.run_id}"
        node_script, cwd, project_dir = script, node.workdir, ""
        if project is not None:
            cwd = project.root
        if node.bundle_dir:
            rel = posixpath.relpath(script, bundle_root) if bundle_root else ""
            if bundle_root and not rel.startswith(".."):
                node_script, cwd = f"{node.bundle_dir}/{rel}", node.workdir
            else:
                if project is None:
                    raise UsageError(
                        f"{script}: a script for remote nodes ships with its project (infra.launch.project.scan)"
                    )
                project_dir = cwd = f"{node.workdir}/projects/{project.digest}"
                node_script = f"{project_dir}/{project.script}"
        layers = node_layers(cluster, run, node.cpus, node.ifname, run.nprocs()[rank], node.env_file, node.devices)
        python = node.python or cluster.spec.python
        if requirements is not None:
            deps = step(
                requirements,
                node=node.name,
                host=node.host,
                python=python,
                envs=envs or f"{node.workdir}/envs",
                project_dir=project_dir or (project.root if project is not None and not node.bundle_dir else ""),
                workdir=node.workdir,
                local=not node.bundle_dir,
            )
            steps.setdefault(("" if envs else node.host, deps.env_dir), deps)  # one folder for all (envs): one step
            python = deps.python
        argv = torchrun_argv(
            python,
            run,
            nproc=run.nprocs()[rank],
            rdzv_endpoint=endpoint,
            rdzv_id=run.run_id,
            log_dir=log_dir,
            script=node_script,
            local_addr=node.host,
        )
        launches.append(
            NodeLaunch(
                node=node.name,
                host=node.host,
                node_rank=rank,
                argv=literal(argv),
                env=snapshot_from_workdir({**layers.merged(), NODE_KEY: node.name}, run, node.workdir, cwd),
                defaults=tuple(k for k in layers.defaults if k not in layers.explicit),
                cwd=cwd,
                log_dir=log_dir,
                env_file=node.env_file,
                project_dir=project_dir,
                secret=tuple(sorted(run.secret_env)),
            )
        )
    return LaunchPlan(
        run_id=run.run_id,
        job=run.job,
        cluster=cluster.name,
        rdzv_endpoint=endpoint,
        world_size=sum(run.nprocs()),
        nodes=tuple(launches),
        min_nodes=run.min_nodes if run.elastic else 0,
        project=project if any(launch.project_dir for launch in launches) else None,
        store=store_launch(cluster, run, head, port),
        writable=run.node_snapshot_dir,
        deps=tuple(steps.values()),
        hang_timeout_s=run.hang_timeout_s,
    )


def store_launch(cluster: ClusterState, run: RunSpec, head: NodeInfo, port: int) -> NodeLaunch:
    """The run's c10d rendezvous store on ``head``: the node's Python (it has torch), listening on
    ``port``, told the rendezvous id (it names the agents that joined as it stops); the run's
    markers (``down`` and a resumed run's ``stop_first`` find it like any of the run's processes)
    and ``STORE_KEY`` (so that it alone can be stopped, after the agents)."""
    markers = run_markers(run.run_id, cluster.cluster_id)
    return NodeLaunch(
        node=head.name,
        host=head.host,
        node_rank=0,
        argv=program_argv(head.python or cluster.spec.python, "rdzv_store", head.host, str(port), run.run_id),
        env={**markers, STORE_KEY: run.run_id},
        cwd=head.workdir,
        log_dir="",
        env_file=head.env_file,
    )


def node_layers(
    cluster: ClusterState,
    run: RunSpec,
    cpus: int,
    ifname: str | None,
    nproc: int = 1,
    env_file: str = "",
    devices: str = "",
) -> RankEnv:
    """Env for one node's agent (and so its ranks), in its layers: ``rank_env`` for a node of ``cluster``."""
    return rank_env(
        run,
        cluster_id=cluster.cluster_id,
        cluster_env=cluster.spec.env,
        env_file=env_file,
        cpus=cpus,
        nproc=nproc,
        ifname=ifname,
        shared_dir=cluster.shared_dir,
        devices=devices,
    )


@dataclass(frozen=True)
class Renew:
    """An elastic run's lost node back on a new machine (``Provider.replace_lost_nodes``), wherever the
    run's supervisor is.

    ``here`` (a run this process supervises): given the node, its SSH host and its launch on the new
    machine; None: the node was not replaced (its host is tried again as it is). ``on_head`` (a run
    the head node's supervisor keeps, where the head may replace nodes itself:
    ``Provider.head_replacer``): given a connection to the head and a folder there, what the head
    needs is put there; the command line (argv) the supervisor runs there for a lost node, the node's
    name appended."""

    here: Callable[[str], tuple[Host, NodeLaunch] | None] | None = None
    on_head: Callable[[Any, str], list[str]] | None = None
