"""What tests/unit/test_down_keeps.py and tests/integration/test_down_keeps.py share."""

from __future__ import annotations

from ddpctl.infra.model.host import Host
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.providers import get_provider
from tests.support.specs import cluster_spec

CREATED = 1_000_000.0


def aws_state(workdir: str = "/opt/ddpctl/work", *, ssh: bool = True, nodes: int = 2) -> ClusterState:
    spec = cluster_spec(name="c1", provider="aws", nodes=nodes, options=get_provider("aws").take_options({}))
    host = Host(name="node0", address="10.0.0.5") if ssh else None
    head = NodeInfo(name="node0", host="10.0.0.5", workdir=workdir, ssh=host)
    others = [NodeInfo(name=f"node{i}", host=f"10.0.0.{5 + i}", workdir=workdir) for i in range(1, nodes)]
    return ClusterState(spec=spec, cluster_id="cid1", status="up", nodes=[head, *others], created_at=CREATED)
