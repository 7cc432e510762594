"""`check`'s in-node all-reduce (issue 37), planned and read back with a stand-in executor: one launch
per node with 2 or more GPUs, on that node alone, one rank per GPU; what was not measured, in words.
Real local runs: tests/integration/test_check_in_node.py."""

from __future__ import annotations

from ddpctl.infra.launch.nodes import OutputLine
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.runs.check import plan_in_node, run_check
from tests.support.specs import cluster_spec


def cluster(gpus: tuple[int, ...]) -> ClusterState:
    nodes = [NodeInfo(f"n{i}", f"10.0.0.{i}", f"/w{i}", gpus=g) for i, g in enumerate(gpus)]
    return ClusterState(spec=cluster_spec(name="c", provider="onprem", nodes=len(gpus)), cluster_id="x", nodes=nodes)


class Executor:
    """Answers each launch as its ranks would: the whole-launch line for an in-node test."""

    plans: list = []

    def __init__(self, sink) -> None:
        self.sink = sink

    def run(self, plan):
        Executor.plans.append(plan)
        if plan.job == "check-in-node":
            node = plan.nodes[0].node
            self.sink(
                OutputLine(node, 0, "allreduce size_mb=8 world=4 time_ms=1 algbw_gbps=90 busbw_gbps=135.5 backend=nccl")
            )
        elif plan.job == "check-reach":
            for a in ("10.0.0.0", "10.0.0.1"):
                for b in ("10.0.0.0", "10.0.0.1"):
                    if a != b:
                        self.sink(OutputLine("n0", 0, f"REACH {a} {b} ok"))
        else:
            self.sink(OutputLine("n0", 0, "pair 0 1 size=8MB busbw_gbps=1.25"))
            self.sink(OutputLine("n1", 1, "ready"))
        return type("Result", (), {"ok": True})()


def test_in_node_plan_is_one_node_alone_one_rank_per_gpu() -> None:
    c = cluster((0, 4))
    plan = plan_in_node(c, c.nodes[1], 29500, 8)
    assert [n.node for n in plan.nodes] == ["n1"] and plan.world_size == 4
    assert plan.store is not None and plan.store.node == "n1" and plan.rdzv_endpoint == "10.0.0.1:29500"
    assert "--pairs" not in plan.nodes[0].argv and "--nproc-per-node" in plan.nodes[0].argv


def test_one_node_of_four_gpus_measures_inside_and_says_there_are_no_links() -> None:
    Executor.plans = []
    report = run_check(cluster((4,)), Executor, 29500, lambda _: None, size_mb=8)
    assert [p.job for p in Executor.plans] == ["check-in-node"]
    assert report.in_node_gbps == {"n0": 135.5} and report.in_node_ranks == {"n0": 4}
    assert report.notes == [
        "one node (n0): no links between nodes to test (reachability and pair bandwidth need 2 or more)"
    ]
    doc = report.to_dict()
    assert doc["in_node"] == [{"node": "n0", "ranks": 4, "backend": "nccl", "busbw_gbps": 135.5}] and doc["ok"]


def test_nodes_with_one_gpu_or_none_are_said_not_measured_inside() -> None:
    Executor.plans = []
    report = run_check(cluster((1, 0)), Executor, 29500, lambda _: None, size_mb=8)
    assert [p.job for p in Executor.plans] == ["check-reach", "check-bandwidth"]
    assert report.notes == [
        "no in-node all-reduce measured: no node has 2 or more GPUs (0 or 1 GPU(s) counted at up/configure)"
    ]
    report = run_check(cluster((2, 2)), Executor, 29500, lambda _: None, bandwidth=False)
    assert report.notes == ["bandwidth not measured (--no-bandwidth)"] and not report.in_node_gbps
