"""ddpctl's own launch cost in CPU (issue 39): `ddpctl run message-passing --nodes 2` on an up 2-node
local cluster against `torchrun --standalone --nproc-per-node 2` on the same script (one agent), and
against two `torchrun --nnodes 2` agents started by hand (c10d, the first one hosting the store: the
same two nodes without ddpctl), as ratios of the CPU seconds each takes (every process of it: ddpctl,
its agents, the rendezvous store, the ranks), rounds alternating, in one script.

    python -m bench.launch_cpu [--rounds 5]     (from the repository's root)

CPU is read with getrusage(RUSAGE_CHILDREN) around each command: every process of a local run is a
waited-for descendant of it. `up` and `down` are outside the measure (the cluster is up for all pairs).
Issue 39's goal: <= 1.2x (1.91x when it was filed).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "training" / "message_passing.py"


def cpu_s(argvs: list[list[str]], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds of the commands, started together, and every process they waited for; wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    procs = [subprocess.Popen(a, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for a in argvs]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for argv, proc, out in zip(argvs, procs, outs):
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed:\n{out}")
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used, wall


def commands(name: str, ddpctl: list[str]) -> list[list[str]]:
    """The command(s), started together, of one way of running the script on two ranks."""
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    if name == "ddpctl":
        return [[*ddpctl, "run", "message-passing", "--nodes", "2"]]
    if name == "standalone":
        return [[*torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPT)]]
    with socket.socket() as sock:  # a free port for the store the first agent hosts
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = [*torchrun, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    agent += ["--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"bench{port}"]
    return [[*agent, "--node-rank", str(rank), str(SCRIPT)] for rank in (0, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three, alternating (medians reported)")
    args = parser.parse_args()
    names = ("ddpctl", "standalone", "two agents")
    by: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DDPCTL_HOME": str(Path(tmp) / "home"), "OMP_NUM_THREADS": "1"}
        ddpctl = [sys.executable, "-m", "ddpctl"]
        subprocess.run([*ddpctl, "up", "--nodes", "2", "-q"], env=env, check=True)
        try:
            print(
                "| round | ddpctl CPU s | standalone CPU s | two agents CPU s | ddpctl/standalone | ddpctl/two agents |"
            )
            print("|---|---|---|---|---|---|")
            for i in range(args.rounds):
                order = names if i % 2 == 0 else names[::-1]
                got = {name: cpu_s(commands(name, ddpctl), env)[0] for name in order}
                for name in names:
                    by[name].append(got[name])
                d, s, t = (got[name] for name in names)
                print(f"| {i + 1} | {d:.2f} | {s:.2f} | {t:.2f} | {d / s:.2f} | {d / t:.2f} |", flush=True)
        finally:
            subprocess.run([*ddpctl, "down", "-q"], env=env, check=False)
    d, s, t = (statistics.median(by[name]) for name in names)
    print(
        f"\nmedian CPU: ddpctl {d:.2f} s; standalone {s:.2f} s: {d / s:.2f}x (goal <= 1.2x); two agents {t:.2f} s: {d / t:.2f}x"
    )


if __name__ == "__main__":
    main()
