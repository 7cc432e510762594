"""The Slurm planner: a run spec -> the whole sbatch script (pure; golden-tested).

Shaped like the PyTorch multinode tutorial's script, with its mistakes fixed: the head node's
address is the one it routes to the other nodes on (not ``hostname --ip-address``, which can be a
loopback address), the rendezvous port comes from the job id, ``srun --kill-on-bad-exit=1`` ends
the job when any rank fails, each node's output goes to its own file for streaming, and a node
whose env file names no interface finds its own toward the head's address at run time.

The run's secrets (``run -e KEY``, ``--env-file``) are in no script and on no command line: the
executor writes them to a file only the user can read (0600) beside the script on the login node,
just before sbatch; the batch script reads it into its shell and removes it at once, and exports
them to ``srun``'s tasks alone (the rendezvous store does not get them).

The c10d rendezvous store is the run's own (``node_programs/rdzv_store.py``), as with the other
launchers: the batch script, which runs on the first allocated node, starts it there in the
background and waits until it serves (so that what it says when it cannot goes to the streamed
output, before any agent starts), every agent joins it (``is_host=0``), and the script's EXIT trap
stops it once ``srun`` has ended, or the job failed or was cancelled.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import node_programs
from ..model.spec import RunSpec
from ..tools.procs import STORE_KEY
from .deps import DepsStep
from .project import Project
from .torchrun import ShellVar, rank_env, shell_join, snapshot_from_workdir, torchrun_argv


@dataclass(frozen=True)
class SbatchPlan:
    run_id: str
    nodes: int
    script: str  # the sbatch script's text
    script_path: str  # where it is written on the login node
    output_dir: str  # per-job and per-node output files live here
    #: the user's ``--snapshot-dir`` (a path, not s3://): checked on the login node before sbatch
    writable: str = ""
    #: a user's script's project (``run SCRIPT``), copied once per content from the login node into
    #: ``project_dir`` in the head's work directory (the shared filesystem), where the ranks start;
    #: None: a bundled job, whose files are where the cluster's shared /home has them
    project: Project | None = None
    project_dir: str = ""
    #: the run's own packages (``run --requirements``), made on the login node in the head's work
    #: directory (the shared filesystem every compute node sees) before sbatch; the script's Python is that environment's
    deps: tuple[DepsStep, ...] = ()
    #: the run's secrets, by name: written to ``secrets_file`` (0600) by the executor, never into the script
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    secrets_file: str = ""

    def secret_input(self) -> bytes:
        """The secrets file's text: one ``KEY='value'`` line each, as the batch shell reads it."""
        return "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(self.secrets.items())).encode()

    @property
    def where(self) -> str:
        """How the run meets, for the run's first line."""
        return "through sbatch"

    def dry_run_lines(self) -> list[str]:
        """What ``run --dry-run`` prints: the script it would submit."""
        lines = [line for deps in self.deps for line in deps.dry_run_lines()]
        if self.project is not None:
            lines.insert(
                0,
                f"  project {self.project.root} ({len(self.project.files)} file(s)) copied to {self.project_dir} "
                "on the login node, unless there already",
            )
        if self.secrets:
            lines.append(
                f"Would write the secrets {', '.join(sorted(self.secrets))} to {self.secrets_file} (0600), "
                "which the script reads and removes"
            )
        return [*lines, f"Would submit run {self.run_id} with sbatch as {self.script_path}:", *self.script.splitlines()]

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "nodes": self.nodes,
            "script_path": self.script_path,
            "output_dir": self.output_dir,
            "script": self.script,
            "deps": [deps.to_dict() for deps in self.deps],
            "project": self.project.to_dict() if self.project else None,
            "project_dir": self.project_dir,
            **({"secrets": sorted(self.secrets), "secrets_file": self.secrets_file} if self.secrets else {}),
        }


def secrets_path(output_dir: str, run_id: str) -> str:
    """Where a run's secrets wait for its batch script on the login node (the launcher's folder and run id)."""
    return f"{output_dir}/ddpctl-{run_id}.secrets"


def plan_sbatch(
    run: RunSpec,
    *,
    python: str,
    script: str,
    output_dir: str,
    cluster_id: str,
    workdir: str | None = None,
    cwd: str = "",
    gpus_per_node: int = 0,
    env_file: str = "",
    env: dict[str, str] | None = None,
    partition: str | None = None,
    time_limit: str | None = None,
    base_port: int = 20000,
) -> SbatchPlan:
    """The sbatch script that runs ``script`` with torchrun on ``run.nodes`` allocated nodes, the job
    (and so its ranks) in ``cwd`` (a user's project's copy), else in ``workdir``. Long because it
    writes the batch script's lines in the order the script runs them."""
    layers = rank_env(run, cluster_id=cluster_id, cluster_env=env or {}, env_file=env_file)
    secrets = {k: v for k, v in layers.explicit.items() if k in run.secret_env}  # never into the script
    # with an env file: exported again after it is sourced, so they win; the run's own snapshot
    # folder stays in the work directory where the ranks start elsewhere
    explicit = snapshot_from_workdir(
        {k: v for k, v in layers.explicit.items() if k not in secrets}, run, workdir or "", cwd or workdir or ""
    )
    secrets_file = secrets_path(output_dir, run.run_id) if secrets else ""
    exports = {**layers.defaults, **({} if env_file else explicit), **layers.fixed}
    header = [
        "#!/bin/bash",
        f"#SBATCH --job-name=ddpctl-{job_name(run.job)}-{run.run_id}",
        f"#SBATCH --nodes={run.nodes}",
        "#SBATCH --ntasks-per-node=1",
    ]
    if gpus_per_node:
        header.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    if partition:
        header.append(f"#SBATCH --partition={partition}")
    if time_limit:
        header.append(f"#SBATCH --time={time_limit}")
    if cwd or workdir:  # relative paths land here, not in the login shell's home
        header.append(f"#SBATCH --chdir={cwd or workdir}")
    header += [
        f"#SBATCH --output={output_dir}/ddpctl-%j.out",
        "#SBATCH --wait-all-nodes=1",
    ]
    torchrun = torchrun_argv(
        python,
        run,
        nproc=run.nprocs()[0],
        rdzv_endpoint=ShellVar("DDPCTL_RDZV"),  # set by the script below, on the head node's address
        rdzv_id=ShellVar("SLURM_JOB_ID"),
        log_dir=f"{output_dir}/logs/{run.run_id}",
        script=script,
    )
    torchrun_line = shell_join(torchrun)
    source = f"set -a; . {shlex.quote(env_file)}; set +a; " if env_file else ""
    # after the env file, so that explicit values win over the file's
    reexport = "".join(f"export {k}={shlex.quote(v)}; " for k, v in explicit.items()) if env_file else ""
    head_addr = (
        f'{source}if [ -n "${{NCCL_SOCKET_IFNAME:-}}" ]; then '
        'ip -o -4 addr show dev "$NCCL_SOCKET_IFNAME" | awk \'{split($4, a, "/"); print a[1]; exit}\'; '
        "else hostname -I | awk '{print $1}'; fi"
    )
    # Where the env file names no interface (or there is none), each node finds its own toward the
    # head's address, as the playbooks' nccl_env role would: nodes that read one shared env file
    # (ParallelCluster's NFS home) may name their interfaces differently.
    ifname = (
        'if [ -z "${GLOO_SOCKET_IFNAME:-}" ]; then a=${DDPCTL_RDZV%:*}; '
        "d=$(ip -o addr show to \"$a\" | awk 'NR == 1 { print $2 }'); "
        '[ -n "$d" ] || d=$(ip -o route get "$a" | sed -n \'s/.* dev \\([^ ]*\\).*/\\1/p\'); '
        'd=${d%%@*}; [ -z "$d" ] || export GLOO_SOCKET_IFNAME=$d NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-$d}; fi; '
    )
    # The store: in this (the batch) shell's node, the first allocated one; its output in a file of
    # its own, read until it says READY. Should it not start, what it said goes to the head node's
    # output file, the one ddpctl streams, and the job ends before any agent starts.
    store = shlex.join(["exec", "env", f"{STORE_KEY}={run.run_id}", *node_programs.argv(python, "rdzv_store")[1:]])
    store_out = f"{shlex.quote(output_dir)}/ddpctl-$SLURM_JOB_ID.store"
    body = [
        "set -euo pipefail",
        *(f"export {k}={shlex.quote(v)}" for k, v in exports.items()),
        "",
        "# The first allocated node hosts the c10d rendezvous, on a port derived from the job id.",
        'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        "head_node=${nodes[0]}",
        *_read_secrets(secrets_file, output_dir),
        f"port=$(( {base_port} + SLURM_JOB_ID % 20000 ))",
        "# Its address as the other nodes reach it: the address of the interface in the node's env file",
        "# (NCCL_SOCKET_IFNAME), else its first non-loopback address. Never `hostname --ip-address`.",
        f'head_addr=$(srun --nodes=1 --ntasks=1 -w "$head_node" bash -c {shlex.quote(head_addr)})',
        'export DDPCTL_RDZV="$head_addr:$port"',
        'echo "ddpctl: job $SLURM_JOB_ID on ${nodes[*]}; rendezvous $DDPCTL_RDZV"',
        "",
        "# The rendezvous store, here on the first node (where this script runs), apart from every agent:",
        "# it lives until srun has ended, and the trap stops it however the script ends (cancelled too).",
        f"store_out={store_out}",
        f'({source}{store} "$head_addr" "$port") >"$store_out" 2>&1 &',
        "store_pid=$!",
        """trap 'kill "$store_pid" 2>/dev/null || true; wait "$store_pid" 2>/dev/null || true' EXIT""",
        "tries=0",
        """until grep -qs '^READY ' "$store_out"; do""",
        """  if ! kill -0 "$store_pid" 2>/dev/null || (( ++tries > 600 )); then""",
        '    { echo "ddpctl: the rendezvous store did not start on $head_node:"; cat "$store_out"; } '
        f'>{shlex.quote(output_dir)}/"ddpctl-$SLURM_JOB_ID-$head_node.out"',
        "    exit 1",
        "  fi",
        "  sleep 0.2",
        "done",
        "",
        *([f"export {' '.join(sorted(secrets))}"] if secrets else []),  # to srun's tasks alone
        f"srun --kill-on-bad-exit=1 --output={output_dir}/ddpctl-%j-%N.out bash -c "
        + shlex.quote(_kept(sorted(secrets), source) + reexport + ifname + "exec " + torchrun_line),
    ]
    text = "\n".join(header + [""] + body) + "\n"
    script_path = f"{output_dir}/ddpctl-{run.run_id}.sbatch"
    return SbatchPlan(
        run.run_id,
        run.nodes,
        text,
        script_path,
        output_dir,
        writable=run.node_snapshot_dir,
        secrets=secrets,
        secrets_file=secrets_file,
    )


def _read_secrets(path: str, output_dir: str) -> list[str]:
    """The batch script's lines that read the run's secrets file into its shell (not exported: the
    store started below does not get them) and remove it at once ("": no secrets, no lines). Gone (a
    job Slurm started again, requeued), the job ends, saying so in the head node's output file."""
    if not path:
        return []
    return [
        "# The run's secrets (run -e KEY, --env-file): not in this script, but in a file only you can read,",
        "# written by ddpctl on the login node just before sbatch; read into this shell and removed at once.",
        f"secrets={shlex.quote(path)}",
        'if [ ! -r "$secrets" ]; then',
        "  echo \"ddpctl: the run's secrets file $secrets is not on $head_node (an earlier start of this job read "
        'it, or the folder is not on a filesystem the nodes share with the login node): run it again with ddpctl" '
        f'>{shlex.quote(output_dir)}/"ddpctl-$SLURM_JOB_ID-$head_node.out"',
        "  exit 1",
        "fi",
        '. "$secrets"',
        'rm -f "$secrets"',
    ]


def _kept(names: list[str], source: str) -> str:
    """A node's env file sourced (``source``) with the run's secrets kept over it, as explicit values
    are: each saved in a shell variable first and exported again after (names only, never values)."""
    if not names or not source:
        return source
    save = "".join(f'ddpctl_s_{k}="${k}"; ' for k in names)
    back = "".join(f'export {k}="$ddpctl_s_{k}"; unset ddpctl_s_{k}; ' for k in names)
    return save + source + back


def job_name(job: str) -> str:
    """A job's name as Slurm's ``--job-name`` takes it on an ``#SBATCH`` line (a script of one's own
    is named by its file: ``my train.py`` is ``my_train``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", job)
