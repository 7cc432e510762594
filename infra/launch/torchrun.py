"""torchrun's command line, built in one place for every launcher: the SSH/local planner
(``plan.py``) and the sbatch script (``sbatch.py``).

A value the node's shell must expand at launch (on Slurm: the rendezvous address and the job id)
is a ``ShellVar``, written as ``"$NAME"`` by ``shell_join``; everything else is quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from ..spec import RunSpec

#: torchrun prefixes each line a worker prints with this (``--tee 3``); executors parse it back.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"
#: Elastic runs: a round with MIN nodes waits 5 s for more before it starts (torchrun: 30 s), and a
#: node whose heartbeat (every 2 s) is missed 3 times is dropped (torchrun: 5 s x 3). Recovery
#: from a lost node is then about 15 s (bench/recovery.py).
ELASTIC_RDZV_CONF = ",last_call_timeout=5,keep_alive_interval=2,keep_alive_max_attempt=3"


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
    is_host: bool | None = None,
    local_addr: str | None = None,
) -> tuple[Arg, ...]:
    """One node's torchrun: c10d rendezvous, ``--tee 3`` with the rank prefix, the job's arguments.

    ``is_host``: say whether this node hosts the c10d store (rather than letting torchrun guess from
    host names); None leaves it to torchrun (sbatch, where every node runs the same line).
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
    if is_host is not None:
        argv += ["--rdzv-conf", f"is_host={int(is_host)}" + (ELASTIC_RDZV_CONF if run.elastic else "")]
    if local_addr:
        argv += ["--local-addr", local_addr]
    argv += [
        "--max-restarts",
        str(run.max_restarts),
        "--log-dir",
        log_dir,
        "--tee",
        "3",
        "--log-line-prefix-template",
        RANK_PREFIX_TEMPLATE,
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
