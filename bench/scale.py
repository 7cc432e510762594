"""ddpctl at 2, 4, 8 and 16 nodes of the namespace test cluster (root; see tests/support/testbed/).

    sudo .venv/bin/python -m bench.scale [--nodes 2,4,8,16] [--out bench/scale]   (from the repository's root)
    .venv/bin/python -m bench.scale --replot   (the table and the plot again, from OUT.json)

For each size, on bare nodes: `up --provider onprem` (the configure step included), a no-op
`configure`, `run message-passing` (launch to the first rank's first line, and to the end),
`check` (reachability and bandwidth) and `down`, each through the `ddpctl` command. Per phase:

- wall time;
- controller CPU: user + system seconds of ddpctl and everything it ran on this machine
  (ansible-playbook included), and that per node;
- the nodes' CPU: everything else this machine's cores did meanwhile (the nodes' sshd, Python,
  torchrun and ranks share these cores), which is what wall time grows with on 2 cores;
- sequential round trips: of ddpctl's own SSH connections (``DDPCTL_TRACE``), how many came one
  after the other (``infra.tools.trace.sequential_steps``): 1 per wave, whatever the number of nodes;
  and the playbook's tasks, each run on every host at once (forks 16).

Goals, 16 nodes against 2 in the same run: launch <= 1.5x, no-op configure <= 2x, check <= 4x,
down <= 1.5x, controller CPU per node not rising. Writes OUT.json and OUT.png (matplotlib, the
`bench` extra) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ddpctl.infra.tools.trace import sequential_steps
from tests.support.testbed.cluster import GROUP_VARS, exclusive, testbed_down, testbed_up

PHASES = ("up", "configure", "launch", "run", "check", "down")
GOALS = {"launch": 1.5, "configure": 2.0, "check": 4.0, "down": 1.5}
RANK_LINE = re.compile(r"\brank \d+\b")  # message-passing's own lines ("rank 1 received 42.0 ...")


@dataclass
class Phase:
    nodes: int
    phase: str
    wall_s: float
    controller_cpu_s: float
    nodes_cpu_s: float
    connects: int
    sequential_connects: int

    @property
    def controller_cpu_per_node_s(self) -> float:
        return self.controller_cpu_s / self.nodes


def machine_busy_s() -> float:
    """CPU seconds this machine's cores have spent busy since boot (all processes)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(n: int, phase: str, argv: list[str], env: dict[str, str], trace: Path, first_line: bool = False) -> Phase:
    """Run one ddpctl command; with ``first_line``, the wall time is to the first rank's first line."""
    trace.unlink(missing_ok=True)
    cpu0, busy0, t0 = children_cpu_s(), machine_busy_s(), time.perf_counter()
    first = None
    proc = subprocess.Popen(
        argv, env={**env, "DDPCTL_TRACE": str(trace)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    out = []
    for line in proc.stdout:
        out.append(line)
        if first is None and RANK_LINE.search(line):
            first = time.perf_counter()
    code = proc.wait()
    wall = time.perf_counter() - t0
    if code != 0:
        sys.exit(f"{' '.join(argv[3:])} failed on {n} nodes:\n{''.join(out[-30:])}")
    controller = children_cpu_s() - cpu0
    busy = machine_busy_s() - busy0
    records = [json.loads(x) for x in trace.read_text().splitlines()] if trace.exists() else []
    intervals = [(r["t0"], r["t1"]) for r in records if r["op"] == "connect"]
    return Phase(
        nodes=n,
        phase=phase,
        wall_s=round((first - t0) if first_line and first else wall, 3),
        controller_cpu_s=round(controller, 3),
        nodes_cpu_s=round(max(busy - controller, 0.0), 3),
        connects=len(intervals),
        sequential_connects=sequential_steps(intervals),
    )


def one_size(n: int, tmp: Path) -> list[Phase]:
    with exclusive():
        return _one_size(n, tmp)


def _one_size(n: int, tmp: Path) -> list[Phase]:
    tb = testbed_up(n)
    try:
        inventory = tb.inventory(tmp / f"hosts{n}.ini", **GROUP_VARS)
        env = {
            **os.environ,
            "DDPCTL_HOME": str(tmp / f"home{n}"),
            "ANSIBLE_HOME": str(tmp / f"ansible{n}"),
        }
        ddpctl = [sys.executable, "-m", "ddpctl"]
        trace = tmp / "trace.jsonl"
        run = [*ddpctl, "run", "message-passing", "--nodes", str(n)]
        phases = [
            measure(n, "up", [*ddpctl, "up", "--provider", "onprem", "-i", str(inventory)], env, trace),
            measure(n, "configure", [*ddpctl, "configure"], env, trace),
            measure(n, "launch", run, env, trace, first_line=True),
            measure(n, "run", run, env, trace),
            measure(n, "check", [*ddpctl, "check", "--size-mb", "8"], env, trace),
            measure(n, "down", [*ddpctl, "down"], env, trace),
        ]
        return phases
    finally:
        testbed_down()


def table(results: list[Phase], sizes: list[int]) -> str:
    rows = ["| phase | " + " | ".join(f"{n} nodes" for n in sizes) + f" | {sizes[-1]} vs {sizes[0]} | goal |"]
    rows.append("|---" * (len(sizes) + 3) + "|")
    by = {(p.phase, p.nodes): p for p in results}
    for phase in PHASES:
        cells = [by[(phase, n)] for n in sizes]
        ratio = cells[-1].wall_s / cells[0].wall_s
        goal = f"<= {GOALS[phase]}x: {'met' if ratio <= GOALS[phase] else 'missed'}" if phase in GOALS else ""
        shown = [
            f"{c.wall_s:.1f} s, {c.sequential_connects} seq. / {c.connects} conn., "
            f"ctl {c.controller_cpu_per_node_s:.2f} s/node, nodes {c.nodes_cpu_s:.0f} s"
            for c in cells
        ]
        rows.append(f"| {phase} | " + " | ".join(shown) + f" | {ratio:.2f}x | {goal} |")
    return "\n".join(rows)


def plot(results: list[Phase], sizes: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for phase in PHASES:
        cells = sorted((p for p in results if p.phase == phase), key=lambda p: p.nodes)
        xs = [p.nodes for p in cells]
        axes[0].plot(xs, [p.wall_s for p in cells], marker="o", label=phase)
        axes[1].plot(xs, [p.sequential_connects for p in cells], marker="o", label=phase)
        axes[2].plot(xs, [p.controller_cpu_per_node_s for p in cells], marker="o", label=phase)
    titles = ("wall time (s)", "sequential SSH round trips", "controller CPU per node (s)")
    for ax, title in zip(axes, titles):
        ax.set_title(title)
        ax.set_xlabel("nodes")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("ddpctl on the namespace test cluster (2 shared cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="2,4,8,16", help="comma-separated sizes")
    parser.add_argument("--out", default="bench/scale", help="OUT.json and OUT.png are written")
    parser.add_argument("--replot", action="store_true", help="no measuring: the table and OUT.png from OUT.json")
    args = parser.parse_args()
    out = Path(args.out)
    try:
        import matplotlib  # noqa: F401  (before minutes of measuring, not after)
    except ImportError:
        sys.exit("bench.scale draws its plot with matplotlib: pip install -e '.[bench]'")
    if args.replot:
        doc = json.loads(out.with_suffix(".json").read_text())
        sizes = doc["sizes"]
        fields = Phase.__dataclass_fields__
        results = [Phase(**{k: v for k, v in p.items() if k in fields}) for p in doc["phases"]]
    else:
        sizes = [int(n) for n in args.nodes.split(",")]
        results = []
        with tempfile.TemporaryDirectory(prefix="ddpctl-scale-") as tmp:
            for n in sizes:
                print(f"{n} nodes...", file=sys.stderr, flush=True)
                results += one_size(n, Path(tmp))
        doc = {
            "sizes": sizes,
            "phases": [asdict(p) | {"controller_cpu_per_node_s": p.controller_cpu_per_node_s} for p in results],
        }
        out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    print(table(results, sizes))
    plot(results, sizes, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
