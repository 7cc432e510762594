"""The reachability probe as a launch plan: every node to every other (``ddpctl check``), or every
other node to the head's rendezvous port (the precheck a remote launch runs first, once the run's
rendezvous store listens there), and its verdict.

Launch-level, so that both the SSH executor (the precheck) and ``infra/runs/check.py`` build on it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..model.errors import DdpctlError
from ..model.spec import RunSpec, new_run_id
from ..model.state import ClusterState, NodeInfo
from ..node_programs import argv as program_argv
from .nodes import OutputLine
from .plan import LaunchPlan, NodeLaunch, node_layers

#: What a node of the reachability check prints, per peer (node_programs/reach.py).
REACH_LINE = re.compile(r"^REACH (\S+) (\S+) (ok|error: .*)$")


def plan_reach(
    cluster: ClusterState,
    nodes: list[NodeInfo],
    port: int,
    *,
    all_pairs: bool,
    seconds: float = 10.0,
    strict: bool = False,
) -> LaunchPlan:
    """Every node to every other (``all_pairs``), or every node to the head only (before a run).

    ``strict``: a node's check exits 1 when it could not listen or connect (so that a launch that
    follows it on the same line does not start).
    """
    run = RunSpec(job="check-reach", nodes=len(nodes), run_id=new_run_id())
    hosts = [n.host for n in nodes]
    launches = []
    for i, node in enumerate(nodes):
        if all_pairs:
            peers = [h for h in hosts if h != node.host]
            expect = len(peers)
        else:
            peers = [] if i == 0 else [hosts[0]]
            expect = len(nodes) - 1 if i == 0 else 0
        argv = program_argv(
            node.python or cluster.spec.python,
            "reach",
            str(port),
            node.host,
            ",".join(peers),
            str(expect),
            str(seconds),
            *(["strict"] if strict else []),
        )
        launches.append(
            NodeLaunch(
                node=node.name,
                host=node.host,
                node_rank=i,
                argv=argv,
                env=node_layers(cluster, run, 1, None).merged(),
                cwd=node.workdir,
                log_dir="",
                env_file=node.env_file,
            )
        )
    return LaunchPlan(run.run_id, run.job, cluster.name, f"{hosts[0]}:{port}", len(nodes), tuple(launches))


def head_reach_plan(cluster: ClusterState, nodes: list[NodeInfo], port: int) -> LaunchPlan | None:
    """Before a run: the plan that checks every node but the head reaches the head on ``port``
    (None: nothing to check). The run's rendezvous store listens there by then, so the head runs no
    check of its own: the store says itself when it cannot listen (``rdzv_store.StoreFailed``)."""
    if len(nodes) < 2 or len({n.host for n in nodes}) < len(nodes):
        return None
    plan = plan_reach(cluster, nodes, port, all_pairs=False, strict=True)
    return replace(plan, nodes=plan.nodes[1:])


def parse_reach(
    plan: LaunchPlan, lines: list[OutputLine], names: dict[str, str] | None = None
) -> dict[tuple[str, str], str]:
    """A reach plan's output -> {(from node, to node): "ok" | "error: ..."}; ``names``: more hosts' node names."""
    names = {**(names or {}), **{n.host: n.node for n in plan.nodes}}
    reach = {}
    for line in lines:
        m = REACH_LINE.match(line.text.strip())
        if m:
            reach[(names.get(m.group(1), m.group(1)), names.get(m.group(2), m.group(2)))] = m.group(3)
    return reach


def raise_if_head_unreachable(plan: LaunchPlan, lines: list[OutputLine], head: str) -> None:
    """Judge a ``head_reach_plan``'s output (after a failed launch): the one-line reason, if a node
    could not reach the head node ``head``'s port. A node whose check said nothing failed for
    another reason, which the run's own output shows."""
    host, port = plan.rdzv_endpoint.rsplit(":", 1)
    reach = parse_reach(plan, lines, {host: head})
    problems = [f"{a} -> {b}: {r}" for (a, b), r in sorted(reach.items()) if r != "ok"]
    if problems:
        raise DdpctlError(
            f"nodes cannot reach the head node {head} on port {port}: {'; '.join(problems)} "
            "(open the port between nodes, or pick another with --port)"
        )
