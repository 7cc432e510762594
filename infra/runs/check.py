"""``ddpctl check``: can every node reach every other on the rendezvous port, how fast is each link, and
how fast is the all-reduce between the GPUs inside each node that has several? With ``health``, first
each node's health too (``health.py``: its GPU count, ECC, Xid, clocks, a burn; the in-node all-reduce
failing is one of its reasons), each node judged.

The checks are launch plans like a job's (planned here, pure; carried out by the cluster's own
executor), so they test exactly the path a job takes: the same SSH sessions, env file and Python.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..launch.plan import LaunchPlan, plan_torchrun
from ..launch.reach_plan import parse_reach, plan_reach
from ..launch.supervise import OutputLine
from ..model.errors import DdpctlError, UsageError
from ..model.progress import step
from ..model.spec import RunSpec, new_run_id
from ..model.state import ClusterState, NodeInfo
from ..model.store import StateStore
from .health import BURN_S, NodeHealth, choose_healthy, run_health
from .jobs import BUNDLE_DIR
from .options import RunOptions

PAIR_LINE = re.compile(r"\bpair (?P<a>\d+) (?P<b>\d+) .*busbw_gbps=(?P<gbps>[\d.]+)")
# What NCCL_DEBUG=INFO says of the network it chose (NCCL's and aws-ofi-nccl's own lines):
#   "NCCL INFO Using network Socket" / "Using network IB" / "Using network Libfabric" (or "AWS Libfabric")
#   "NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)"   (aws-ofi-nccl; "tcp" etc. elsewhere)
#   "NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"              (the socket transport's interfaces)
NCCL_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>.+?)\s*$")
OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<provider>[\w-]+)")
NCCL_SOCKET = re.compile(r"NCCL INFO NET/Socket\b")
BACKEND = re.compile(r"allreduce pairs: rank \d+ of \d+ ready backend=(?P<backend>\w+)")
#: allreduce_bench.py's line for all the ranks of one launch (rank 0 prints it)
WHOLE_LINE = re.compile(
    r"\ballreduce size_mb=\S+ world=(?P<world>\d+) .*busbw_gbps=(?P<gbps>[\d.]+)(?: backend=(?P<backend>\w+))?"
)


@dataclass
class CheckReport:
    reach: dict[tuple[str, str], str] = field(default_factory=dict)  # (from, to) -> "ok" | error
    bandwidth_gbps: dict[tuple[str, str], float] = field(default_factory=dict)
    #: node -> the transport its all-reduce went over: efa, socket, ib, gloo (no NCCL), ofi:<provider>, unknown
    transport: dict[str, str] = field(default_factory=dict)
    #: node -> the bus bandwidth of an all-reduce among its own GPUs, one rank each (nodes with 2 or more)
    in_node_gbps: dict[str, float] = field(default_factory=dict)
    #: node -> how many ranks (its GPUs) that in-node all-reduce ran, and its backend (nccl; gloo: no GPU)
    in_node_ranks: dict[str, int] = field(default_factory=dict)
    in_node_backend: dict[str, str] = field(default_factory=dict)
    #: what was and was not measured, in words (one node: no links between nodes; no node with 2+ GPUs...)
    notes: list[str] = field(default_factory=list)
    #: node -> its health verdict, in the cluster's order (empty: not checked)
    health: dict[str, NodeHealth] = field(default_factory=dict)

    @property
    def unhealthy(self) -> list[str]:
        """The nodes found unhealthy, in the cluster's order."""
        return [name for name, verdict in self.health.items() if not verdict.ok]

    @property
    def ok(self) -> bool:
        return not self.unreachable and not self.unhealthy

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
            "transport": dict(sorted(self.transport.items())),
            "in_node": [
                {
                    "node": n,
                    "ranks": self.in_node_ranks.get(n, 0),
                    "backend": self.in_node_backend.get(n, ""),
                    "busbw_gbps": v,
                }
                for n, v in sorted(self.in_node_gbps.items())
            ],
            "notes": list(self.notes),
            "health": [verdict.to_dict() for verdict in self.health.values()],
            "unhealthy": self.unhealthy,
            "ok": self.ok,
        }


def plan_bandwidth(cluster: ClusterState, port: int, size_mb: float, *, one_pair_at_a_time: bool) -> LaunchPlan:
    """One launch on every node (one rank each): the bundle's all-reduce benchmark over every pair of
    ranks, in rounds of disjoint pairs (``allreduce_bench.py --pairs``)."""
    args = ("--size-mb", f"{size_mb:g}", "--pairs", *(("--one-pair-at-a-time",) if one_pair_at_a_time else ()))
    # NCCL says at INFO which network it chose (parse_transport); its init and net lines only
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    run = RunSpec(job="check-bandwidth", args=args, nodes=len(cluster.nodes), run_id=new_run_id(), env=env)
    return plan_torchrun(
        cluster, run, script=str(BUNDLE_DIR / "allreduce_bench.py"), port=port, bundle_root=str(BUNDLE_DIR)
    )


def plan_in_node(cluster: ClusterState, node: NodeInfo, port: int, size_mb: float) -> LaunchPlan:
    """One launch on ``node`` alone, one rank per GPU it has: the bundle's all-reduce benchmark among
    them (NVLink or PCIe, as NCCL finds them), with its store on that node."""
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}
    run = RunSpec(
        job="check-in-node",
        args=("--size-mb", f"{size_mb:g}"),
        nodes=1,
        nproc_per_node=node.gpus,
        run_id=new_run_id(),
        env=env,
    )
    alone = replace(cluster, nodes=[node])
    return plan_torchrun(
        alone, run, script=str(BUNDLE_DIR / "allreduce_bench.py"), port=port, bundle_root=str(BUNDLE_DIR)
    )


def parse_in_node(lines: list[OutputLine]) -> tuple[int, float, str] | None:
    """The in-node launch's ``allreduce ... world=N ... busbw_gbps=X backend=B`` line as (N, X, B)."""
    for line in lines:
        found = WHOLE_LINE.search(line.text)
        if found:
            return int(found["world"]), float(found["gbps"]), found["backend"] or ""
    return None


def parse_bandwidth(cluster: ClusterState, lines: list[OutputLine]) -> dict[tuple[str, str], float]:
    """``pair A B ... busbw_gbps=X`` lines as (node, node) -> X: torchrun numbers the ranks as the
    nodes joined, so each rank's node comes from its own lines."""
    node_of = {line.rank: line.node for line in lines if line.rank is not None}
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    found = {}
    for line in lines:
        m = PAIR_LINE.search(line.text)
        if m and int(m["a"]) in node_of and int(m["b"]) in node_of:
            a, b = sorted((node_of[int(m["a"])], node_of[int(m["b"])]), key=order.__getitem__)
            found[(a, b)] = float(m["gbps"])
    return found


def parse_transport(lines: list[OutputLine]) -> dict[str, str]:
    """Each node's transport from its ranks' lines: the network NCCL says it uses ("Using network"),
    with aws-ofi-nccl's provider for Libfabric (efa); failing that, what its NET/ lines show; gloo
    where the benchmark ran on gloo (no NCCL, no GPU); "unknown" where nothing said."""
    seen: dict[str, dict[str, str]] = {}
    for line in lines:
        if not line.node:
            continue
        said = seen.setdefault(line.node, {})
        for key, pattern, group in (
            ("network", NCCL_NETWORK, "net"),
            ("provider", OFI_PROVIDER, "provider"),
            ("backend", BACKEND, "backend"),
        ):
            found = pattern.search(line.text)
            if found:
                said[key] = found[group]
        if NCCL_SOCKET.search(line.text):
            said["socket"] = "yes"
    out = {}
    for node, said in seen.items():
        network = said.get("network", "").lower()
        provider = said.get("provider", "")
        if network == "socket":
            out[node] = "socket"
        elif network == "ib":
            out[node] = "ib"
        elif provider or "libfabric" in network:
            out[node] = "efa" if provider in ("efa", "") else f"ofi:{provider}"
        elif said.get("socket"):
            out[node] = "socket"
        elif said.get("backend") == "gloo":
            out[node] = "gloo"
        else:
            out[node] = "unknown"
    return out


def run_check(
    cluster: ClusterState,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    port: int,
    progress: Callable[[str], None],
    *,
    bandwidth: bool = True,
    size_mb: float = 32,
    health: bool = False,
    burn_s: float = BURN_S,
) -> CheckReport:
    report = CheckReport()
    nodes = cluster.nodes
    if health:
        report.health = run_health(cluster, executor_for, progress, burn_s=burn_s)
    distinct = len({n.host for n in nodes}) == len(nodes)
    if distinct and len(nodes) > 1:
        progress(f"reachability: every pair of {len(nodes)} nodes on port {port}")
        lines: list[OutputLine] = []
        plan = plan_reach(cluster, nodes, port, all_pairs=True)
        with step(progress, f"reachability test ({len(nodes)} nodes)"):
            executor_for(lines.append).run(plan)
        report.reach = parse_reach(plan, lines)
    if bandwidth and not report.unreachable and len(nodes) > 1:
        # One launch for every pair (N-1 rounds of disjoint pairs at once, at N nodes); nodes that
        # share a host (local ones) measure one pair at a time, not fighting for its CPU.
        rounds = len(nodes) - 1 if len(nodes) % 2 == 0 else len(nodes)
        progress(
            f"all-reduce bandwidth ({size_mb:g} MB): every pair of {len(nodes)} nodes, in {rounds} round(s) of "
            + ("disjoint pairs at once" if distinct else "one pair at a time (one host)")
        )
        lines: list[OutputLine] = []
        with step(progress, f"all-reduce bandwidth test ({len(nodes)} nodes, {rounds} round(s))"):
            bench = plan_bandwidth(cluster, port, size_mb, one_pair_at_a_time=not distinct)
            result = executor_for(lines.append).run(bench)
        report.bandwidth_gbps = parse_bandwidth(cluster, lines)
        report.transport = parse_transport(lines)
        missing = [
            f"{a.name} <-> {b.name}"
            for a, b in itertools.combinations(nodes, 2)
            if (a.name, b.name) not in report.bandwidth_gbps
        ]
        if not result.ok or missing:
            raise DdpctlError(
                f"the all-reduce bandwidth test failed ({'no figure for ' + ', '.join(missing[:4]) if missing else 'a node failed'}): "
                "`ddpctl run message-passing` on those nodes shows why"
            )
    if len(nodes) == 1:
        report.notes.append(
            f"one node ({nodes[0].name}): no links between nodes to test (reachability and pair bandwidth need 2 or more)"
        )
    if bandwidth:
        check_in_node(report, cluster, executor_for, port, progress, size_mb)
    else:
        report.notes.append("bandwidth not measured (--no-bandwidth)")
    return report


def check_in_node(
    report: CheckReport,
    cluster: ClusterState,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    port: int,
    progress: Callable[[str], None],
    size_mb: float,
) -> None:
    """The all-reduce among the GPUs inside each node that has 2 or more, one node after the other
    (where a node's GPUs meet: an 8-GPU node's all-reduce happens there)."""
    multi = [n for n in cluster.nodes if n.gpus >= 2]
    sick = [n.name for n in multi if n.name in report.health and not report.health[n.name].ok]
    if sick:
        report.notes.append(f"no in-node all-reduce on {', '.join(sick)}: unhealthy already")
        multi = [n for n in multi if n.name not in sick]
    if not multi and sick:
        return
    if not multi:
        counts = sorted({n.gpus for n in cluster.nodes})
        report.notes.append(
            f"no in-node all-reduce measured: no node has 2 or more GPUs "
            f"({' or '.join(map(str, counts))} GPU(s) counted at up/configure)"
        )
        return
    for node in multi:
        progress(f"in-node all-reduce ({size_mb:g} MB): the {node.gpus} GPUs of {node.name}, one rank each")
        lines: list[OutputLine] = []
        with step(progress, f"in-node all-reduce test ({node.name}, {node.gpus} GPUs)"):
            result = executor_for(lines.append).run(plan_in_node(cluster, node, port, size_mb))
        found = parse_in_node(lines)
        if (not result.ok or found is None) and node.name in report.health:  # a reason among the node's
            report.health[node.name].problems.append(
                f"its in-node all-reduce ({node.gpus} ranks) failed: "
                "`ddpctl run message-passing --nproc-per-node gpu` shows why"
            )
            continue
        if not result.ok or found is None:
            raise DdpctlError(
                f"the in-node all-reduce test on {node.name} ({node.gpus} GPUs) failed: "
                "`ddpctl run message-passing --nproc-per-node gpu` shows why"
            )
        ranks, gbps, backend = found
        report.in_node_ranks[node.name], report.in_node_gbps[node.name] = ranks, gbps
        report.in_node_backend[node.name] = backend


def check_cluster(
    store: StateStore,
    name: str | None,
    port: int | None,
    progress: Callable[[str], None],
    *,
    bandwidth: bool,
    size_mb: float,
    health: bool = True,
    burn_s: float = BURN_S,
) -> tuple[ClusterState, int, CheckReport]:
    """``ddpctl check`` (the CLI's and the API's): the cluster ``name`` (else the only one), the
    port its probes use, and the report of ``run_check`` on the nodes jobs run on (pcluster: its
    compute nodes, through the head)."""
    from ..lifecycle import clusters

    state = clusters.load(store, name)
    port = clusters.rdzv_port(state, port)
    targets, executor_for = clusters.job_nodes(state, progress)
    report = run_check(
        targets, executor_for, port, progress, bandwidth=bandwidth, size_mb=size_mb, health=health, burn_s=burn_s
    )
    return state, port, report


def healthy_run(
    opts: RunOptions, store: StateStore, progress: Callable[[str], None], *, burn_s: float = BURN_S
) -> tuple[RunOptions, tuple[str, ...]]:
    """``run --healthy-only``: the health part of ``check`` on the cluster the run goes on, then the
    run's options on its healthy nodes (``health.choose_healthy``: its node count, and an elastic
    run's MIN:MAX, as many as are healthy) and their names, for ``prepare.prepare(only=...)``."""
    from ..lifecycle import clusters

    name = clusters.resolve_name(store, opts.name)
    if name is None or not store.exists(name):
        raise UsageError("--healthy-only checks the nodes of a cluster that is up: bring one up first (`ddpctl up`)")
    state = store.load(name)
    targets, executor_for = clusters.job_nodes(state, progress)
    if [n.name for n in targets.nodes] != [n.name for n in state.nodes] or opts.launcher == "sbatch":
        raise UsageError(
            f"--healthy-only is for torchrun launches on the nodes ddpctl lists; cluster {name!r}'s jobs run on "
            "nodes Slurm chooses: `ddpctl check` judges them"
        )
    verdicts = run_health(targets, executor_for, progress, burn_s=burn_s)
    healthy, count, min_nodes = choose_healthy(name, verdicts, opts.nodes, opts.min_nodes)
    for verdict in verdicts.values():
        if not verdict.ok:
            progress(f"--healthy-only: left out {verdict.line()}")
    return replace(opts, nodes=count, min_nodes=min_nodes), healthy


def prepare_run(
    opts: RunOptions,
    store: StateStore,
    progress: Callable[[str], None],
    *,
    healthy_only: bool = False,
    dry_run: bool = False,
):
    """The run prepared (``prepare.prepare``), for both the CLI and the API: with ``healthy_only``, on
    the nodes the health check passes (``healthy_run``); a dry run checks no health and says so."""
    from .prepare import prepare

    only: tuple[str, ...] = ()
    if healthy_only and dry_run:
        progress("--healthy-only: the nodes' health is checked when the run starts, not in a dry run")
    elif healthy_only:
        opts, only = healthy_run(opts, store, progress)
    return prepare(opts, store, only=only)
