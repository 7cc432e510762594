"""What tests/unit/test_pcluster.py and tests/integration/test_pcluster.py share."""

from __future__ import annotations

from typing import Any

from tests.support.moto import REGION, SSH_CIDR
from tests.support.specs import cluster_spec

# ---- pure: the configuration and the plan ------------------------------------------------------


def _plan(**spec_kw: Any):
    from ddpctl.infra.providers.pcluster.config import Settings
    from ddpctl.infra.providers.pcluster.plan import plan_from_spec

    settings, nodes = spec_kw.pop("settings", Settings()), spec_kw.pop("nodes", 2)
    options = {
        "region": REGION,
        "instance_type": "p3.2xlarge",
        "volume_gb": 200,
        "ssh_user": "ubuntu",
        "ssh_cidr": SSH_CIDR,
        **spec_kw,
    }
    spec = cluster_spec(name="c1", provider="pcluster", nodes=nodes, options=options)
    return plan_from_spec(spec, "abc123", "/h/clusters/c1", settings)


def _resolved(subnet: str = "subnet-0123456789abcdef0"):
    from ddpctl.infra.providers.pcluster.config import Resolved

    return Resolved(subnet_id=subnet, key_name="ddpctl-c1-abc123", ssh_cidr=SSH_CIDR)


def _instance(ip: str, state: str = "running", queue: str = "gpu", node_type: str = "ComputeNode") -> dict[str, Any]:
    """One instance as `pcluster describe-cluster-instances` prints it (seen against moto with 3.16.1)."""
    doc = {
        "launchTime": "2025-03-01T10:00:00.000Z",
        "instanceId": "i-0" + ip.replace(".", "").rjust(16, "a"),
        "queueName": queue,
        "instanceType": "p3.2xlarge",
        "state": state,
        "nodeType": node_type,
        "privateIpAddress": ip,
    }
    if node_type == "HeadNode":
        doc.pop("queueName")
    return doc
