"""Launch overhead: `ddpctl run message-passing --nodes 2` against the same two torchrun commands
started by hand, in one script, alternating, as a ratio of median wall times.

    python -m bench.launch [--repeat 5]     (from the repository's root)

The hand-started pair is what the planner prints for the run (same flags, same env, the run's own
rendezvous store started first and stopped last), so the difference is ddpctl itself: bringing the
local cluster up and down, streaming, the summary.
Goal: ddpctl/by-hand <= 1.1x.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddpctl.infra.node_programs import source

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "training" / "message_passing.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_hand(workdir: Path) -> float:
    """Two torchrun agents on 127.0.0.1, as a user would start them in two shells."""
    port, run_id = free_port(), f"hand{time.monotonic_ns()}"
    common = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        run_id,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    start = time.perf_counter()
    store = subprocess.Popen(
        [sys.executable, "-c", source("rdzv_store"), "127.0.0.1", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert store.stdout.readline().startswith("LISTENING ")  # the agents may start: they wait for it
    procs = [
        subprocess.Popen(
            [*common, "--rdzv-conf", "is_host=0", str(SCRIPT)],
            env=env,
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    assert all(p.wait() == 0 for p in procs)
    store.terminate()
    assert store.wait() == 0
    return time.perf_counter() - start


def with_ddpctl(home: Path) -> float:
    env = {**os.environ, "DDPCTL_HOME": str(home)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ddpctl", "run", "message-passing", "--nodes", "2"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    hand, tool = [], []
    with tempfile.TemporaryDirectory() as tmp:
        by_hand(Path(tmp))  # warm the page cache for torch
        for _ in range(args.repeat):
            hand.append(by_hand(Path(tmp)))
            tool.append(with_ddpctl(Path(tmp) / "home"))
    h, t = statistics.median(hand), statistics.median(tool)
    result = {"by_hand_s": round(h, 2), "ddpctl_s": round(t, 2), "ratio": round(t / h, 3), "repeat": args.repeat}
    print(
        json.dumps(result)
        if args.json
        else f"by hand {h:.2f}s  ddpctl {t:.2f}s  ratio {t / h:.2f}x  (median of {args.repeat})"
    )


if __name__ == "__main__":
    main()
