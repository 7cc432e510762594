"""Programs ddpctl runs on nodes, one module each. May import nothing of ddpctl: stdlib only (but for the
three named below), Python 3.8+.

Each is an ordinary module with a ``main()``, linted and tested like the rest of the code, and
travels as its text: ``python3 -c TEXT ARGS`` (or on stdin) to an interpreter that has no ddpctl.

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


@cache
def source(name: str) -> str:
    """The text of the program ``name`` (one of ``NAMES``), to run as ``python3 -c``."""
    if name not in NAMES:
        raise ValueError(f"no node program {name!r} (one of {', '.join(NAMES)})")
    return Path(__file__).with_name(f"{name}.py").read_text(encoding="utf-8")
