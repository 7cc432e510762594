"""Recovery from a fault: time from a worker's death to training resumed, and the steps redone.

    python -m bench.recovery [--repeat 3]     (from the repository's root)

Two faults, each on a 2-node (restart) or 3-node (elastic) MNIST run of the local provider:
- restart: `--max-restarts 1`, one worker SIGKILLed mid-epoch; torchrun restarts every worker and
  the job resumes from its last snapshot;
- elastic: `--nodes 2:3`, node2's agent and worker SIGKILLed mid-epoch; the other two nodes go on
  from the snapshot without it (ddpctl starts node2 again 30 s later, after the measurement).

"Resumed" is the first training step logged after the fault. The reference, in the same run, is
the run's own start: launch to its first training step. Steps redone = the last step logged
before the fault minus the step of the snapshot resumed from (the work since the last snapshot).
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from tests.support.processes import run_processes, spawn

STEP = re.compile(r"\] step (\d+) \| loss")
SAVED = re.compile(r"Epoch \d+ \| step (\d+) \| snapshot saved")


def victims(run_id: str, fault: str) -> list[psutil.Process]:
    found = []
    for p in run_processes(run_id):
        try:
            if fault == "restart":
                if p.environ().get("RANK") == "1" and "mnist.py" in " ".join(p.cmdline()):
                    found.append(p)
            else:  # node2's agent (its work dir is node2) and its worker
                agent = p if "torch.distributed.run" in " ".join(p.cmdline()) else p.parent()
                if agent is not None and Path(agent.cwd()).name == "node2":
                    found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def one(fault: str, home: Path, n: int) -> dict[str, float]:
    run_id = f"rec-{fault}-{n}"
    flags = ["--max-restarts", "1", "--nodes", "2"] if fault == "restart" else ["--nodes", "2:3"]
    argv = [
        sys.executable,
        "-m",
        "ddpctl",
        "run",
        "mnist",
        *flags,
        "--run-id",
        run_id,
        "--",
        "--epochs",
        "3",
        "--log-every",
        "5",
    ]
    env = {**os.environ, "DDPCTL_HOME": str(home)}
    start = time.monotonic()
    proc = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # SIGINT stops it
    lines: queue.Queue[tuple[float, str]] = queue.Queue()
    threading.Thread(target=lambda: [lines.put((time.monotonic(), ln)) for ln in proc.stdout], daemon=True).start()
    first_step = saved_step = last_step = killed_at = resumed_at = None
    resumed_from = None
    try:
        while resumed_at is None:
            at, line = lines.get(timeout=300)
            if (m := STEP.search(line)) and first_step is None:
                first_step = at
            if m := SAVED.search(line):
                saved_step = int(m.group(1))
            if (m := STEP.search(line)) and killed_at is None:
                last_step = int(m.group(1))
                if saved_step is not None and last_step >= saved_step + 20:  # well into epoch 2
                    for p in victims(run_id, fault):
                        p.send_signal(signal.SIGKILL)
                    killed_at = time.monotonic()
            elif "Resuming from snapshot" in line and killed_at is not None:
                resumed_from = saved_step
            elif (m := STEP.search(line)) and resumed_from is not None:
                resumed_at = at
    finally:
        proc.send_signal(signal.SIGINT)  # the measurement is done: stop the run
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {
        "startup_s": first_step - start,
        "recovery_s": resumed_at - killed_at,
        "steps_redone": last_step - resumed_from,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for fault in ("restart", "elastic"):
            rows = [one(fault, Path(tmp) / f"{fault}{i}", i) for i in range(args.repeat)]
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(
                f"{fault:8s} recovery {med['recovery_s']:5.1f} s = {med['recovery_s'] / med['startup_s']:.2f}x "
                f"the run's start ({med['startup_s']:.1f} s); steps redone {med['steps_redone']:.0f} "
                f"(median of {args.repeat})",
                flush=True,
            )


if __name__ == "__main__":
    main()
