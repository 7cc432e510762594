"""Stop a run's processes on a node, found by the marker in their environment.

The same search as ddpctl's ``procs.stop_tagged``, with only the standard library (nodes may not
have psutil): ``/proc/PID/environ`` holds ``KEY=VALUE``. Zombies count as gone; this process is
never one of those it signals.

argv: KEY VALUE MODE GRACE [KEY VALUE]... MODE is ``term`` (SIGTERM, no wait), ``kill`` (SIGKILL),
or ``stop`` (SIGTERM, then SIGKILL what is left after GRACE seconds). More KEY VALUE pairs narrow the
search: a process must carry every one (one node's processes: the run's marker and the node's).
Prints how many processes it signalled.

``KEY VALUE look GRACE [KEY VALUE]...``: signals nothing but SIGUSR1, and only to a rank (a process with
``RANK`` in its environment) that handles it (``SigCgt``: training/metrics.py's faulthandler, which prints
its Python stack on its stderr) and is not stopped; prints ``rank=R pid=P state=S`` per rank, for the
supervisor of a hung run (launch/watch.py).

``KEY VALUE orphan GRACE PARENT``: wait while PARENT (a pid) is this process's parent, then ``stop``.
A run's controller starts it beside the run's agents and ends it with the run; if the controller is
killed, the agents get SIGTERM (their parent-death signal) and this sweeps what they leave behind: a
torchrun agent that hangs on its way out, a worker it did not stop.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def tagged(markers: set[bytes], me: int) -> list[int]:
    """The live processes, other than ``me``, whose environment has every entry of ``markers``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if markers <= set(f.read().split(b"\0")) and int(pid) != me:
                    found.append(int(pid))
        except (OSError, IndexError):
            pass
    return found


def send(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def look(pids: list[int]) -> None:
    """Each rank's state, and its stack asked for (SIGUSR1) where it handles the signal."""
    ranks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if b"RANK" in env and b"LOCAL_RANK" in env:  # not the agent, a store, a shell
            ranks[pid] = (env[b"RANK"].decode(), status)
    for pid, (rank, status) in ranks.items():
        if int(status.get("PPid", "0").strip() or 0) in ranks:
            continue  # a rank's own child (a data loader's worker): its environment, not a rank
        state = status.get("State", "?").split()[0]
        caught = int(status.get("SigCgt", "0"), 16) >> (signal.SIGUSR1 - 1) & 1
        if caught and state not in ("T", "t", "Z"):
            send([pid], signal.SIGUSR1)
        print(f"rank={rank} pid={pid} state={state}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    key, value, mode, grace = args[0], args[1], args[2], float(args[3])
    if mode == "orphan":
        parent = int(args[4])
        while os.getppid() == parent:
            time.sleep(0.5)
        mode, args = "stop", args[:4]
    pairs = [(key, value), *zip(args[4::2], args[5::2])]
    marker, me = {f"{k}={v}".encode() for k, v in pairs}, os.getpid()
    pids = tagged(marker, me)
    if mode == "look":
        look(pids)
        return
    send(pids, signal.SIGKILL if mode == "kill" else signal.SIGTERM)
    if mode == "stop":
        deadline = time.time() + grace
        while tagged(marker, me) and time.time() < deadline:
            time.sleep(0.1)
        send(tagged(marker, me), signal.SIGKILL)
    print(len(pids))


if __name__ == "__main__":
    main()
