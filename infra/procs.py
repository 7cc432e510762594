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


#: The same search on a remote node, with only the standard library (nodes may not have psutil).
#: argv: KEY VALUE MODE GRACE; MODE is term (SIGTERM, no wait), kill (SIGKILL), or stop
#: (SIGTERM, then SIGKILL what is left after GRACE seconds). Prints how many processes it signalled.
REMOTE_STOP_SCRIPT = r"""
import os, signal, sys, time
key, value, mode, grace = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
marker, me = (key + "=" + value).encode(), os.getpid()
def tagged():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open("/proc/%s/environ" % pid, "rb") as f:
                if marker in f.read().split(b"\0") and int(pid) != me:
                    found.append(int(pid))
        except (OSError, IndexError):
            pass
    return found
def send(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
pids = tagged()
send(pids, signal.SIGKILL if mode == "kill" else signal.SIGTERM)
if mode == "stop":
    deadline = time.time() + grace
    while tagged() and time.time() < deadline:
        time.sleep(0.1)
    send(tagged(), signal.SIGKILL)
print(len(pids))
"""
