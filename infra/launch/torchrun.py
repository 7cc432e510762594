"""torchrun's command line and its ranks' environment, built in one place for every launcher: the
SSH/local planner (``plan.py``) and the sbatch script (``sbatch.py``).

A value the node's shell must expand at launch (on Slurm: the rendezvous address and the job id)
is a ``ShellVar``, written as ``"$NAME"`` by ``shell_join``; everything else is quoted.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..model.spec import RunSpec
from ..tools.procs import CLUSTER_KEY, RUN_KEY

#: torchrun prefixes each line a worker prints with this (``--tee 3``); executors parse it back. It
#: reaches torchrun through the environment, which every supported torch reads (2.2 and later);
#: the ``--log-line-prefix-template`` flag exists only from 2.14 (``infra/model/torch_versions.py``).
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
RANK_PREFIX_VAR = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
#: Elastic runs: a round with MIN nodes waits 5 s for more before it starts (torchrun: 30 s), and a
#: node whose heartbeat (every 2 s) is missed 3 times is dropped (torchrun: 5 s x 3). Recovery
#: from a lost node is then about 15 s (bench/recovery.py). An agent waits up to 120 s (torchrun:
#: 60 s) for the others' answers in a round: agents that start spread out on busy nodes exchange
#: their ranks late (16 agents on a loaded test machine once missed 60 s, and the run failed).
ELASTIC_RDZV_CONF = ",last_call_timeout=5,keep_alive_interval=2,keep_alive_max_attempt=3,read_timeout=120"
DEFAULT_NCCL_DEBUG = "WARN"
#: Elastic runs: a collective that waits longer than this on a silent peer fails (a lost link).
ELASTIC_COLLECTIVE_TIMEOUT_S = 120


@dataclass(frozen=True)
class RankEnv:
    """The environment of a node's agent and ranks, in the three layers a launcher needs apart."""

    defaults: dict[str, str]  # ddpctl's; a node's env file (playbooks' nccl_env) is sourced over them
    explicit: dict[str, str]  # the cluster's (up -e), the snapshot dir, the run's (run -e): they win
    #: ddpctl's own, set last, always: the markers the run's processes are found and stopped by, and
    #: torchrun's line-prefix template (the executors read each rank's lines by it)
    fixed: dict[str, str]

    def merged(self) -> dict[str, str]:
        return {**self.defaults, **self.explicit, **self.fixed}


def run_snapshot_dir(shared_dir: str, run_id: str) -> str:
    """A run's own snapshot folder: in the cluster's shared directory, else in the head node's work
    directory (relative: the ranks start there)."""
    return f"{shared_dir}/runs/{run_id}" if shared_dir else f"runs/{run_id}"


def snapshot_from_workdir(env: dict[str, str], run: RunSpec, workdir: str, cwd: str) -> dict[str, str]:
    """The run's own snapshot folder (relative: under the head's work directory, where ``down`` and
    ``download`` look for it) made absolute where the ranks start elsewhere (a user's project, copied
    to ``projects/<digest>``; both launchers): else its outputs would land inside the project's copy,
    found by nothing."""
    snap = env.get("DDPCTL_SNAPSHOT_DIR", "")
    if snap and not run.snapshot_dir and not posixpath.isabs(snap) and workdir and cwd != workdir:
        return {**env, "DDPCTL_SNAPSHOT_DIR": f"{workdir.rstrip('/')}/{snap}"}
    return env


def rank_env(
    run: RunSpec,
    *,
    cluster_id: str,
    cluster_env: Mapping[str, str],
    env_file: str = "",
    cpus: int | None = None,
    nproc: int = 1,
    ifname: str | None = None,
    shared_dir: str = "",
    devices: str = "",
) -> RankEnv:
    """The ranks' environment. ``env_file``: the node has one, so NCCL_DEBUG comes from it, as the
    admin set it; ``cpus``: the node's CPUs (None: unknown here, as on Slurm), shared by its ranks;
    ``devices``: the node's GPUs where it has only some of its host's (``NodeInfo.devices``), a
    default that ``-e CUDA_VISIBLE_DEVICES=...`` overrides.

    No AWS credentials are ever put here (they would land in run records and process listings): an
    s3:// snapshot dir is read with the node's own credentials, on AWS its instance profile.
    """
    env = {"OMP_NUM_THREADS": str(max(1, cpus // nproc))} if cpus is not None else {}
    env["PYTHONUNBUFFERED"] = "1"
    if not env_file:
        env["NCCL_DEBUG"] = DEFAULT_NCCL_DEBUG
    if ifname:
        env["NCCL_SOCKET_IFNAME"] = env["GLOO_SOCKET_IFNAME"] = ifname
    if shared_dir:
        env["DDPCTL_SHARED_DIR"] = shared_dir
    if devices:  # the node's own GPUs of its host's (local nodes), numbered as nvidia-smi numbers them
        env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"] = devices, "PCI_BUS_ID"
    if run.elastic:  # a silent peer (a lost link) fails a collective in 2 min, not torch's 10-30
        env["DDPCTL_COLLECTIVE_TIMEOUT_S"] = str(ELASTIC_COLLECTIVE_TIMEOUT_S)
    if run.max_restarts or run.elastic:
        # torchrun shares its rendezvous TCPStore with the workers across restart rounds, with no
        # per-round key prefix: a new round can read the last round's gloo addresses and barrier
        # counts (Connection refused in connectFullMesh, or a hang). A fresh store per round avoids
        # it, at the price of a second port on the head node, picked free per round.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    explicit = dict(cluster_env)
    # where the jobs' default snapshot path points (trainer.default_snapshot_path): --snapshot-dir,
    # else a folder of this run's own, so that two runs never share (or resume from) one snapshot
    if run.snapshot_dir or "DDPCTL_SNAPSHOT_DIR" not in explicit:
        explicit["DDPCTL_SNAPSHOT_DIR"] = run.snapshot_dir or run_snapshot_dir(shared_dir, run.run_id)
    if run.resume_from:  # a snapshot to start from when the run has none of its own yet
        explicit["DDPCTL_RESUME_FROM"] = run.resume_from
    explicit.update(run.env)
    return RankEnv(env, explicit, {**run_markers(run.run_id, cluster_id), RANK_PREFIX_VAR: RANK_PREFIX_TEMPLATE})


def run_markers(run_id: str, cluster_id: str) -> dict[str, str]:
    """What every process of a run carries in its environment: ``down`` and ``stop`` find it by these."""
    return {RUN_KEY: run_id, CLUSTER_KEY: cluster_id}


@dataclass(frozen=True)
class ShellVar:
    """A variable the node's shell expands when the command runs."""

    name: str


Arg = str | ShellVar


def torchrun_argv(
    python: str,
    run: RunSpec,
    *,
    nproc: int,
    rdzv_endpoint: Arg,
    rdzv_id: Arg,
    log_dir: str,
    script: str,
    local_addr: str | None = None,
) -> tuple[Arg, ...]:
    """One node's torchrun: c10d rendezvous, ``--tee 3`` (the rank prefix is ``rank_env``'s), the job's
    arguments. Only flags every supported torch has (``infra/model/torch_versions.py``).

    No agent hosts the c10d store (``is_host=0``, rather than torchrun's guess from host names): the
    launcher starts the run's own store at ``rdzv_endpoint`` first (``node_programs/rdzv_store.py``),
    which lives until every agent has left, and each agent joins it as a client.
    """
    argv: list[Arg] = [
        python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        f"{run.min_nodes}:{run.nodes}" if run.elastic else str(run.nodes),
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        rdzv_endpoint,
        "--rdzv-id",
        rdzv_id,
    ]
    argv += ["--rdzv-conf", "is_host=0" + (ELASTIC_RDZV_CONF if run.elastic else "")]
    if local_addr:
        argv += ["--local-addr", local_addr]
    argv += [
        "--max-restarts",
        str(run.max_restarts),
        "--log-dir",
        log_dir,
        "--tee",
        "3",
        script,
        *run.args,
    ]
    return tuple(argv)


def literal(argv: Iterable[Arg]) -> tuple[str, ...]:
    """An argv with nothing for a shell to expand (what the SSH and local executors run)."""
    out = tuple(a for a in argv if isinstance(a, str))
    if len(out) != len(tuple(argv)):
        raise ValueError("this launch runs without a shell: it cannot expand a ShellVar")
    return out


def shell_join(argv: Iterable[Arg]) -> str:
    """One shell line: each ``ShellVar`` as ``"$NAME"``, everything else quoted."""
    return " ".join(f'"${a.name}"' if isinstance(a, ShellVar) else shlex.quote(a) for a in argv)
