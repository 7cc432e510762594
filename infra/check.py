"""``ddpctl check``: can every node reach every other on the rendezvous port, and how fast is each link?

Both checks are launch plans like a job's (planned here, pure; carried out by the cluster's own
executor), so they test exactly the path a job takes: the same SSH sessions, env file and Python.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from .errors import DdpctlError
from .jobs import BUNDLE_DIR
from .launch.plan import LaunchPlan, plan_torchrun
from .launch.reach import parse_reach, plan_reach
from .launch.supervise import OutputLine
from .spec import RunSpec, new_run_id
from .state import ClusterState, NodeInfo

BW_LINE = re.compile(r"busbw_gbps=([\d.]+)")


@dataclass
class CheckReport:
    reach: dict[tuple[str, str], str] = field(default_factory=dict)  # (from, to) -> "ok" | error
    bandwidth_gbps: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def unreachable(self) -> list[str]:
        return [f"{a} -> {b}: {r}" for (a, b), r in sorted(self.reach.items()) if r != "ok"]

    @property
    def slowest(self) -> tuple[tuple[str, str], float] | None:
        if not self.bandwidth_gbps:
            return None
        return min(self.bandwidth_gbps.items(), key=lambda kv: kv[1])

    def to_dict(self) -> dict:
        slowest = self.slowest
        return {
            "reachability": [{"from": a, "to": b, "result": r} for (a, b), r in sorted(self.reach.items())],
            "bandwidth": [{"a": a, "b": b, "busbw_gbps": v} for (a, b), v in sorted(self.bandwidth_gbps.items())],
            "slowest_link": None
            if slowest is None
            else {"a": slowest[0][0], "b": slowest[0][1], "busbw_gbps": slowest[1]},
            "ok": not self.unreachable,
        }


def plan_bandwidth(cluster: ClusterState, a: NodeInfo, b: NodeInfo, port: int, size_mb: float) -> LaunchPlan:
    pair = replace(cluster, nodes=[a, b])
    run = RunSpec(job="check-bandwidth", args=("--size-mb", f"{size_mb:g}"), nodes=2, run_id=new_run_id())
    return plan_torchrun(
        pair, run, script=str(BUNDLE_DIR / "allreduce_bench.py"), port=port, bundle_root=str(BUNDLE_DIR)
    )


def run_check(
    cluster: ClusterState,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    port: int,
    progress: Callable[[str], None],
    *,
    bandwidth: bool = True,
    size_mb: float = 32,
) -> CheckReport:
    report = CheckReport()
    nodes = cluster.nodes
    distinct = len({n.host for n in nodes}) == len(nodes)
    if distinct and len(nodes) > 1:
        progress(f"reachability: every pair of {len(nodes)} nodes on port {port}")
        lines: list[OutputLine] = []
        plan = plan_reach(cluster, nodes, port, all_pairs=True)
        executor_for(lines.append).run(plan)
        report.reach = parse_reach(plan, lines)
    if bandwidth and not report.unreachable:
        # Disjoint pairs run at once (a round-robin: N-1 rounds at N nodes, not N(N-1)/2 runs one by
        # one); nodes that share a host (local ones) share its ports too, so their pairs take turns.
        rounds = (
            pair_rounds(len(nodes)) if distinct else [[pair] for pair in itertools.combinations(range(len(nodes)), 2)]
        )
        for number, pairs in enumerate(rounds, 1):
            names = ", ".join(f"{nodes[a].name} <-> {nodes[b].name}" for a, b in pairs)
            progress(f"all-reduce bandwidth ({size_mb:g} MB), round {number}/{len(rounds)}: {names}")
            with ThreadPoolExecutor(max_workers=len(pairs)) as pool:
                measured = list(
                    pool.map(
                        lambda ab: _bandwidth(cluster, executor_for, nodes[ab[0]], nodes[ab[1]], port, size_mb), pairs
                    )
                )
            for (a, b), gbps in zip(pairs, measured):
                report.bandwidth_gbps[(nodes[a].name, nodes[b].name)] = gbps
    return report


def _bandwidth(cluster: ClusterState, executor_for, a: NodeInfo, b: NodeInfo, port: int, size_mb: float) -> float:
    found: list[float] = []

    def bw_line(line: OutputLine) -> None:
        m = BW_LINE.search(line.text)
        if m:
            found.append(float(m.group(1)))

    result = executor_for(bw_line).run(plan_bandwidth(cluster, a, b, port, size_mb))
    if not result.ok or not found:
        raise DdpctlError(f"the all-reduce between {a.name} and {b.name} failed: see `ddpctl run` on those nodes")
    return found[0]


def pair_rounds(n: int) -> list[list[tuple[int, int]]]:
    """Every pair of ``n`` nodes once, in rounds of disjoint pairs (the circle method): n-1 rounds
    for even n, n for odd n (one node sits each round out)."""
    players = list(range(n)) + ([None] if n % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append(sorted(tuple(sorted(p)) for p in pairs if None not in p))
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return rounds
