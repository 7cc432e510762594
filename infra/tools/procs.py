"""Find and stop a run's or a cluster's processes by the marker in their environment.

Every process ddpctl starts on a node carries ``DDPCTL_RUN_ID`` and ``DDPCTL_CLUSTER_ID`` in its
environment, and torchrun passes them on to every worker, even those it starts in their own session.
So stopping "everything of run R" is a scan for that marker: it finds workers whose agent was
SIGKILLed and processes left behind by a controller that crashed.
"""

from __future__ import annotations

import os

import psutil

RUN_KEY = "DDPCTL_RUN_ID"
CLUSTER_KEY = "DDPCTL_CLUSTER_ID"
#: only a run's rendezvous store carries this one too (its run id): it is stopped on its own, last
STORE_KEY = "DDPCTL_RDZV_STORE"
#: a remote node's agent and workers carry their node's name too, so that one node's processes can
#: be stopped without its host's other nodes' (nodes that share a host, or a machine's namespaces)
NODE_KEY = "DDPCTL_NODE"


def find_tagged(key: str, value: str, *, exclude_children: bool = False) -> list[psutil.Process]:
    """Live processes whose environment has ``key=value`` (zombies count as gone)."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["ppid", "status"]):
        if proc.pid == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if exclude_children and proc.info["ppid"] == me:
            continue  # the caller waits on its own children, to keep their exit codes
        try:
            if proc.environ().get(key) == value:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def stop_tagged(key: str, value: str, *, grace: float = 3.0, exclude_children: bool = False) -> int:
    """SIGTERM every process tagged ``key=value``, SIGKILL what is left after ``grace`` seconds.

    Repeats while new tagged processes appear (an agent may start workers while it is stopped).
    Returns how many processes were signalled.
    """
    total = 0
    for _ in range(5):
        procs = find_tagged(key, value, exclude_children=exclude_children)
        if not procs:
            break
        total += len(procs)
        _signal(procs, "terminate")
        _, alive = psutil.wait_procs(procs, timeout=grace)
        _signal(alive, "kill")
        psutil.wait_procs(alive, timeout=2.0)
    return total


def _signal(procs: list[psutil.Process], how: str) -> None:
    for proc in procs:
        try:
            getattr(proc, how)()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
