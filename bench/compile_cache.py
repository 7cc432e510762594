"""Cold against warm compile of a bundled job on this machine, as ratios measured in the same run
(issue 39: compile once, warm everywhere). Each case is a fresh `torchrun` of minGPT with `--compile`:

  cold        an empty inductor cache and no compile-cache file: everything compiled
  other node  a fresh inductor cache (another machine) and the file the cold run left: loaded, then warm
  same node   the cold run's inductor cache and the file (a later run on the same machine)

    python -m bench.compile_cache [--nproc 1] [--steps 20] [-- extra minGPT flags]   (from the repository's root)

Reported: the first step's time (`torch.compile: first step took ...`) and the job's wall time, each as
a ratio to the cold run's. The default model is minGPT's CPU size made smaller (1 layer, 64 wide, context
32); on a GPU machine pass the size flags you want (and --nproc gpu).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAINING = Path(__file__).resolve().parents[1] / "training"
SMALL = ["--n-layer", "1", "--n-head", "2", "--n-embd", "64", "--block-size", "32", "--batch-size", "16"]
FIRST = re.compile(r"torch\.compile: first step took ([\d.]+) s")


def run_job(work: Path, name: str, inductor: Path, nproc: str, flags: list[str]) -> tuple[float, float, str]:
    """One fresh torchrun of minGPT: (first step s, wall s, its compile lines)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd += [str(TRAINING / "mingpt" / "main.py"), "--compile", "--snapshot-path", str(work / f"{name}.pt"), *flags]
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(inductor),
        "DDPCTL_COMPILE_CACHE_DIR": str(work / "shared"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    env.pop("DDPCTL_SHARED_DIR", None)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    first = FIRST.search(proc.stdout)
    lines = [line for line in proc.stdout.splitlines() if "compile" in line]
    return float(first.group(1)) if first else float("nan"), wall, "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", default="1", help="processes per run (torchrun's --nproc-per-node)")
    parser.add_argument("--steps", type=int, default=20, help="minGPT's --max-steps")
    parser.add_argument("flags", nargs="*", help="minGPT's flags instead of the small model's")
    args = parser.parse_args()
    flags = [*(args.flags or SMALL), "--max-steps", str(args.steps), "--sample-chars", "1"]
    import torch

    print(f"torch {torch.__version__}, {'CUDA' if torch.cuda.is_available() else 'CPU'}, {os.cpu_count()} cores")
    print("minGPT", " ".join(flags), f"--compile, {args.nproc} process(es) per run")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases = {"cold": "node-a", "other node": "node-b", "same node": "node-a"}
        results = {}
        for name, node in cases.items():
            first, wall, lines = run_job(work, name.replace(" ", "-"), work / node, args.nproc, flags)
            results[name] = (first, wall)
            print(f"\n[{name}]\n{lines}")
    cold_first, cold_wall = results["cold"]
    print("\n| case | first step | ratio | job wall time | ratio |\n|---|---|---|---|---|")
    for name, (first, wall) in results.items():
        print(f"| {name} | {first:.1f} s | {first / cold_first:.2f} | {wall:.1f} s | {wall / cold_wall:.2f} |")


if __name__ == "__main__":
    main()
