"""Programs ddpctl runs on nodes, one module each. May import nothing of ddpctl: stdlib only (but for the
three named below), Python 3.8+.

Each is an ordinary module with a ``main()``, linted and tested like the rest of the code, and
travels as its text to an interpreter that has no ddpctl: in the environment, not on the command
line (``argv``/``command``: ``env DDPCTL_NODE_PROGRAM=TEXT python3 -c LOADER NAME ARGS``), so that
``ps`` on a node shows ``python3 -c import os,sys;exec(...) rdzv_store 10.0.0.1 29400 r12``, a line
a person reads, not kilobytes of source per process.

- ``stop``: signal a run's processes found by the marker in their environment (``infra/hosts/connections.py``).
- ``reach``: the pairwise reachability probe of ``ddpctl check`` and the head-port precheck (``infra/runs/check.py``).
- ``rdzv_store``: a run's c10d rendezvous store on the head node, from before the agents until after
  them (``infra/launch/plan.py``, ``sbatch.py``; it imports torch, so it runs with the node's Python).
- ``writable``: can this user write (or create) a directory: ``--snapshot-dir`` on every node before a
  run (``infra/launch/ssh_executor.py``; ``infra/providers/local.py`` imports it for this machine's nodes).
- ``outputs``: a run's output folders on the head node: their sizes, and their contents as a tar stream
  (``infra/runs/outputs.py``: ``down`` keeping them, ``ddpctl download``).
- ``autodown``: on the head node, take the cluster down once no run has been active for a while
  (``infra/hosts/autodown.py``: written to the node and started as a service, not sent to ``python3 -c``).
- ``deps``: a run's own packages (its ``requirements.txt``) in an environment layered on the node's
  Python, made once per hash (``infra/launch/deps.py`` plans it; the executors run it before the run).
- ``slurm_tail``: follow every node's Slurm output file (``infra/launch/slurm_executor.py``).
- ``gpu_health``: what nvidia-smi says of a node's GPUs (count, ECC errors, clocks event reasons) and
  the Xid lines of its kernel log, printed back tagged (``infra/runs/health.py``, read by ``infra/runs/nvidia_smi.py``).
- ``gpu_burn``: a few seconds of matmul on every GPU of a node at once, one figure per GPU
  (``infra/runs/health.py``; it imports torch, so it runs with the node's Python).
- ``pcluster_schema``: load a configuration with aws-parallelcluster's ``ClusterSchema``, in its own venv
  (``infra/providers/pcluster/schema.py``; it imports that venv's PyYAML, marshmallow and pcluster).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from functools import cache
from pathlib import Path

NAMES = (
    "stop",
    "reach",
    "rdzv_store",
    "slurm_tail",
    "pcluster_schema",
    "writable",
    "outputs",
    "autodown",
    "deps",
    "gpu_health",
    "gpu_burn",
)


#: the variable that carries a program's text to its Python (which removes it before the program runs)
PROGRAM_ENV = "DDPCTL_NODE_PROGRAM"
#: what ``python -c`` runs: the program from the environment, under its name (its tracebacks' file),
#: with ``sys.argv`` as the program expects it (its name taken out)
LOADER = f'import os,sys;exec(compile(os.environ.pop("{PROGRAM_ENV}"),sys.argv.pop(1),"exec"))'


def argv(python: str, name: str, *args: str) -> tuple[str, ...]:
    """The argv that runs program ``name`` with ``args`` under ``python``: ``env`` hands it the text
    and is replaced by it, so the long-lived process's command line is short."""
    return ("env", f"{PROGRAM_ENV}={source(name)}", python, "-c", LOADER, name, *args)


def command(python: str, name: str, *args: str) -> str:
    """``argv`` as one shell command (arguments quoted; add shell words after it as they are)."""
    return shlex.join(argv(python, name, *args))


def shown(words: Sequence[str]) -> list[str]:
    """``words`` (an argv, or a shell line's words) with each program's text named instead
    (``DDPCTL_NODE_PROGRAM=<node program rdzv_store.py>``), as dry runs and messages show them."""
    out = list(words)
    for i, word in enumerate(out):
        if word.startswith(f"{PROGRAM_ENV}=") and LOADER in out[i:-1]:
            out[i] = f"{PROGRAM_ENV}=<node program {out[out.index(LOADER, i) + 1]}.py>"
    return out


@cache
def source(name: str) -> str:
    """The text of the program ``name`` (one of ``NAMES``): what ``argv`` hands to its Python."""
    if name not in NAMES:
        raise ValueError(f"no node program {name!r} (one of {', '.join(NAMES)})")
    return Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8")
