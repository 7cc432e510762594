"""What tests/unit/test_plan.py and tests/integration/test_plan.py share."""

from __future__ import annotations

from ddpctl.infra.model.state import ClusterState, NodeInfo
from tests.support.specs import cluster_spec


def cluster(n: int, *, cpus: int = 8, ifname: str | None = "eth0", env: dict | None = None) -> ClusterState:
    spec = cluster_spec(name="c", nodes=n, python="/opt/venv/bin/python", env=env or {})
    nodes = [NodeInfo(f"node{i}", f"10.0.0.{10 + i}", f"/work/node{i}", cpus=cpus, ifname=ifname) for i in range(n)]
    return ClusterState(spec=spec, cluster_id="cid", status="up", shared_dir="/shared", nodes=nodes)
