"""ddpctl: multi-node PyTorch DDP on your own AWS account or your own machines.

From Python (a script, a notebook), the commands are functions (``cli/api/``; docs/api.md)::

    import ddpctl
    result = ddpctl.run("mnist", "--epochs", "1", nodes=2)
    result.ok, result.run_id, result.hint
"""

__version__ = "0.1.0"

from .api import (  # after __version__, which the CLI's modules import
    ClusterStatus,
    NodeOutcome,
    RunOutcome,
    check,
    down,
    download,
    logs,
    metrics,
    run,
    runs,
    status,
    up,
)
from .infra.model.errors import DdpctlError, UsageError  # what the functions raise, as the CLI's `Error:` lines

__all__ = [
    "ClusterStatus",
    "DdpctlError",
    "NodeOutcome",
    "RunOutcome",
    "__version__",
    "check",
    "down",
    "download",
    "logs",
    "metrics",
    "run",
    "runs",
    "status",
    "up",
    "UsageError",
]
