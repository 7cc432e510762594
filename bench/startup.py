"""Start-up cost of `ddpctl --help`, as a ratio to `python -c pass` in the same venv.

    python -m bench.startup [--repeat 20]     (from the repository's root)

Also times a bare Click group, the floor for any Click CLI. Goal: ddpctl/python <= 3x (issue 14).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def best_of(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    py = sys.executable
    bare_click = "import click\n@click.group()\ndef cli(): pass\ncli(['--help'])"
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "bare click group --help": [py, "-c", bare_click],
        "ddpctl --help": [py, "-m", "ddpctl", "--help"],
        "ddpctl run --help": [py, "-m", "ddpctl", "run", "--help"],
    }
    base = None
    print(f"{'command':<26} {'median':>9} {'ratio':>7}")
    for name, argv in cases.items():
        t = best_of(argv, args.repeat)
        base = base or t
        print(f"{name:<26} {t * 1000:8.1f}ms {t / base:6.1f}x")


if __name__ == "__main__":
    main()
