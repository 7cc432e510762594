"""Take the cluster down from its head node once nothing of ddpctl has run on it for a while.

Started by ddpctl (``ddpctl up --autodown``, ``ddpctl autodown``) as a systemd service where systemd
runs, else in a session of its own; it runs as the nodes' SSH user and needs no AWS credentials.
Every ``check_s`` seconds it reads its settings file (argv[1], JSON: ``cluster_id``, ``idle_s``,
``check_s``, ``peers``; ``proc``, where to read the processes, is ``/proc`` unless a test shows it
only its own) and looks for activity on this node:

- a process that carries the cluster's run marker (``DDPCTL_CLUSTER_ID=<id>``: a run's agents,
  workers and rendezvous store);
- a torchrun agent of this user (one started by hand counts too);
- a Slurm job in the queue (``squeue``, where Slurm is installed).

The idle time counts from the last activity seen, or from when the settings file was written,
whichever is later. Once it reaches ``idle_s``, every other node (``peers``: their addresses in the
cluster's own SSH mesh) is told to shut down, then this one: on AWS the others were launched
with ``InstanceInitiatedShutdownBehavior=terminate`` and this one set to stop (its disk keeps the
runs' outputs; ``providers/aws/kept_head.py``), so a shutdown ends what is billed by the hour.
The settings file removed (``ddpctl autodown --name NAME off``), it exits. What it saw goes to the file
beside the settings, ``<settings>.state`` (JSON: ``checked_at``, ``last_active``, ``fires_at``,
``activity``), which the tests and a curious user read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

MARKER = "DDPCTL_CLUSTER_ID"
TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
SHUTDOWN = ["sudo", "-n", "shutdown", "-h", "now"]
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]


def activity(cluster_id: str, me: int, proc: str = "/proc") -> str:
    """What keeps the cluster busy now, in a few words ("": nothing): the Slurm queue first (one
    answer for every node), then this node's processes."""
    if shutil.which("squeue"):
        try:
            out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        jobs = out.split()
        if jobs:
            return f"{len(jobs)} Slurm job(s) in the queue"
    marker = f"{MARKER}={cluster_id}".encode()
    uid = os.getuid()
    for pid in filter(str.isdigit, os.listdir(proc)):
        if int(pid) == me:
            continue
        try:
            if os.stat(f"{proc}/{pid}").st_uid != uid:
                continue
            with open(f"{proc}/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"{proc}/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    return f"a run of the cluster (pid {pid})"
            with open(f"{proc}/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            if any(os.path.basename(a) in TORCHRUN or a in TORCHRUN for a in argv[:3]):
                return f"a torchrun agent (pid {pid})"
        except (OSError, IndexError, ValueError):
            pass
    return ""


def fires_at(idle_s: float, last_active: float, set_at: float) -> float:
    """When the cluster goes down if nothing runs meanwhile (pure)."""
    return max(last_active, set_at) + idle_s


def replace_older(pid_file: str, me: int) -> None:
    """Stop an earlier copy of this program (its pid in ``pid_file``), then record ``me`` there."""
    try:
        with open(pid_file) as f:
            old = int(f.read().strip() or 0)
        with open(f"/proc/{old}/cmdline", "rb") as f:
            if old != me and b"autodown" in f.read():
                os.kill(old, signal.SIGTERM)
    except (OSError, ValueError):
        pass
    with open(pid_file, "w") as f:
        f.write(f"{me}\n")


def shut_down(peers: list, log) -> None:
    """Every peer first (over the cluster's SSH mesh, each tried 3 times), then this node."""
    for peer in peers:
        for attempt in range(3):
            # in the background there, so that the answer comes before its sshd goes
            cmd = [*SSH, peer, "nohup " + " ".join(SHUTDOWN) + " >/dev/null 2>&1 &"]
            try:
                rc = subprocess.run(cmd, capture_output=True, timeout=60).returncode
            except (OSError, subprocess.TimeoutExpired):
                rc = -1
            log(f"shutdown of {peer}: exit {rc}")
            if rc == 0:
                break
            time.sleep(5 * (attempt + 1))
    log("shutdown of this node")
    subprocess.run(SHUTDOWN, check=False)


def write_json(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def main(argv: list | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    settings_path = args[0]
    me = os.getpid()
    replace_older(f"{settings_path}.pid", me)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def log(text: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}", flush=True)

    last_active = 0.0
    while True:
        try:
            with open(settings_path) as f:
                settings = json.load(f)
            set_at = os.stat(settings_path).st_mtime
        except FileNotFoundError:
            log("autodown is off: exiting")
            return 0
        except (OSError, ValueError) as exc:
            log(f"cannot read {settings_path}: {exc}")
            time.sleep(10)
            continue
        now = time.time()
        doing = activity(str(settings["cluster_id"]), me, str(settings.get("proc", "/proc")))
        if doing:
            last_active = now
        when = fires_at(float(settings["idle_s"]), last_active, set_at)
        write_json(
            f"{settings_path}.state",
            {"checked_at": now, "last_active": last_active, "fires_at": when, "activity": doing},
        )
        if not doing and now >= when:
            log(f"idle for {settings['idle_s']} s: taking the cluster down")
            shut_down(list(settings.get("peers", [])), log)
            return 0
        time.sleep(float(settings.get("check_s", 60)))


if __name__ == "__main__":
    sys.exit(main())
