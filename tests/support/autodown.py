"""What tests/unit/test_autodown.py and tests/integration/test_autodown.py share."""

from __future__ import annotations

from ddpctl.infra.model.state import ClusterState, NodeInfo
from tests.support.specs import cluster_spec

# ---- when it would fire, as this machine knows it -----------------------------------------------


def _state(idle_s: int, at: float) -> ClusterState:
    spec = cluster_spec(name="c", provider="aws", nodes=2, autodown_s=idle_s)
    nodes = [NodeInfo("node0", "10.0.0.1", "/w"), NodeInfo("node1", "10.0.0.2", "/w")]
    return ClusterState(spec=spec, cluster_id="abc", status="up", nodes=nodes, created_at=at - 100, autodown_at=at)
