"""What watching a run costs the run (issue 38): the bundled MNIST job's training throughput with its
heartbeat on against off, as a ratio measured in the same run, rounds interleaved.

  off  plain `torchrun` (no $DDPCTL_RUN_ID): `metrics.beat` returns at once, no line, no timing read
  on   $DDPCTL_RUN_ID set, as under ddpctl: every rank beats each step (a `DDPCTL_BEAT` line at most
       every 5 s, its forward-and-loss time measured each step; faulthandler on SIGUSR1)

    python -m bench.heartbeat [--rounds 3] [--nproc 2] [-- extra mnist.py flags]   (from the repository's root)

Reported: each round's samples/s of the epoch (the job's own metrics line, rank 0) and the median of
on/off. On a GPU pass --nproc gpu (the Trainer's compute time is a CUDA event pair there, read only
when a beat goes out: no sync per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TRAINING = Path(__file__).resolve().parents[1] / "training"
JOB = ["--epochs", "1", "--data-fraction", "0.5", "--log-every", "20", "--save-every", "100"]


def run_job(work: Path, name: str, beat: bool, nproc: str, flags: list[str]) -> float:
    """One fresh torchrun of the MNIST job: its epoch's samples/s (rank 0's metrics line)."""
    folder = work / name
    folder.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += [str(TRAINING / "mnist.py"), "--snapshot-path", str(folder / "snap.pt"), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("DDPCTL_RUN_ID", None)
    if beat:
        env["DDPCTL_RUN_ID"] = f"bench-{name}"
    proc = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    beats = proc.stdout.count("DDPCTL_BEAT")
    if beat != (beats > 0):
        sys.exit(f"{name}: {beats} beat line(s) with the heartbeat {'on' if beat else 'off'}")
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    (epoch,) = [m for m in lines if m["kind"] == "epoch"]
    return float(epoch["samples_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="off/on pairs, interleaved (the median is reported)")
    parser.add_argument("--nproc", default="2", help="processes per run (torchrun's --nproc-per-node)")
    parser.add_argument("flags", nargs="*", help="mnist.py's flags instead of one epoch on half the images")
    args = parser.parse_args()
    flags = args.flags or JOB
    import torch

    print(f"torch {torch.__version__}, {'CUDA' if torch.cuda.is_available() else 'CPU'}, {os.cpu_count()} cores")
    print("mnist.py", " ".join(flags), f"{args.nproc} process(es) per run")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        print("\n| round | off samples/s | on samples/s | on/off |\n|---|---|---|---|")
        for i in range(args.rounds):
            # the order alternates, so that a machine warming up or cooling down favours neither
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {beat: run_job(Path(tmp), f"{'on' if beat else 'off'}{i}", beat, args.nproc, flags) for beat in order}
            ratios.append(got[True] / got[False])
            print(f"| {i + 1} | {got[False]:,.0f} | {got[True]:,.0f} | {ratios[-1]:.3f} |", flush=True)
    print(f"\nmedian on/off: {statistics.median(ratios):.3f} (1.000: the heartbeat costs nothing measurable)")


if __name__ == "__main__":
    main()
