"""The local provider's split of this machine's GPUs between its nodes (issue 37), pure: what
``nvidia-smi -L`` lists, narrowed by the caller's CUDA_VISIBLE_DEVICES, then each node's share.
Real runs with a stand-in nvidia-smi: tests/integration/test_local_gpus.py."""

from __future__ import annotations

import pytest

from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.providers.local import split_gpus, visible_gpus
from tests.support.specs import cluster_spec

LISTING = "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-aaaa-{i})\n" for i in range(4))


def test_nvidia_smi_listing_and_the_callers_cuda_visible_devices() -> None:
    assert visible_gpus(LISTING, None) == ("0", "1", "2", "3")
    assert visible_gpus("", None) == ()  # no nvidia-smi, or it failed
    assert visible_gpus("NVIDIA-SMI has failed because it couldn't communicate with the driver\n", None) == ()
    assert visible_gpus(LISTING, "") == ()  # hidden: CPU nodes
    assert visible_gpus(LISTING, "3,1") == ("3", "1")  # the caller's order
    assert visible_gpus(LISTING, "GPU-aaaa-2, 0,7") == ("GPU-aaaa-2", "0")  # UUIDs too; 7 is not there


@pytest.mark.parametrize(
    ("gpus", "nodes", "shares"),
    [
        (4, 2, [("0", "1"), ("2", "3")]),
        (3, 2, [("0", "1"), ("2",)]),
        (8, 3, [("0", "1", "2"), ("3", "4", "5"), ("6", "7")]),
        (1, 1, [("0",)]),
        (0, 3, [(), (), ()]),
    ],
)
def test_each_node_its_own_share(gpus: int, nodes: int, shares: list) -> None:
    assert split_gpus(tuple(str(i) for i in range(gpus)), nodes) == shares


def test_fewer_gpus_than_nodes_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^3 local node\(s\) but this machine has 2 GPU\(s\)"):
        split_gpus(("0", "1"), 3)


def test_a_nodes_devices_are_its_ranks_cuda_visible_devices_unless_the_run_says() -> None:
    from ddpctl.infra.model.state import ClusterState, NodeInfo

    nodes = [NodeInfo(f"node{i}", "127.0.0.1", f"/w/{i}", gpus=2, devices=d) for i, d in enumerate(("0,1", "2,3"))]
    cluster = ClusterState(spec=cluster_spec(nodes=2), cluster_id="c", nodes=nodes)
    plan = plan_torchrun(cluster, RunSpec(job="j", nodes=2, nproc_per_node=2, run_id="r1"), script="/s.py", port=1)
    assert [n.env["CUDA_VISIBLE_DEVICES"] for n in plan.nodes] == ["0,1", "2,3"]
    run = RunSpec(job="j", nodes=2, nproc_per_node=1, run_id="r1", env={"CUDA_VISIBLE_DEVICES": "1"})
    plan = plan_torchrun(cluster, run, script="/s.py", port=1)
    assert [n.env["CUDA_VISIBLE_DEVICES"] for n in plan.nodes] == ["1", "1"]  # -e wins
