"""ddpctl from Python (a script, a notebook): ``ddpctl.up``, ``run``, ``status``, ``runs``, ``logs``,
``check``, ``down``.

Each function is its command's code path (``infra/lifecycle/clusters.py``, ``infra/runs/prepare.py``,
``execute.py``, ``logs.py``, ``records.py``, ``check.py``) and returns the typed values
behind its ``--json`` document (``to_dict()`` gives that document's part). Errors are the CLI's:
``UsageError`` (bad input, nothing created) and ``DdpctlError`` with the same one line. Ctrl-C (a
notebook's "interrupt") stops a run as the CLI's does: every process of the run, the run's own
cluster taken down, then ``KeyboardInterrupt``.

Light to import: torch, boto3 and ansible load only when a function needs them.
"""

from .clusters import ClusterStatus, check, cluster_statuses, down, status, up
from .common import print_line, print_progress
from .runs import NodeOutcome, RunOutcome, download, logs, metrics, run, runs

__all__ = [
    "ClusterStatus",
    "NodeOutcome",
    "RunOutcome",
    "check",
    "cluster_statuses",
    "down",
    "download",
    "logs",
    "metrics",
    "print_line",
    "print_progress",
    "run",
    "runs",
    "status",
    "up",
]
