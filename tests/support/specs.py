"""A cluster spec as `up` plans it: the spec's own checks, then its provider's (``checked_spec``)."""

from __future__ import annotations

from typing import Any

from ddpctl.infra.model.spec import ClusterSpec
from ddpctl.infra.providers import checked_spec


def cluster_spec(**kwargs: Any) -> ClusterSpec:
    return checked_spec(ClusterSpec(**kwargs))


#: What ``ec2_requests.run_instances_request`` takes beside the plan, as ``up`` found it in AWS: ``up``'s
#: launch of 2 nodes (the tests' ``run_instances_request(plan, **LAUNCH)``).
LAUNCH: dict[str, Any] = {
    "ami": "ami-1",
    "root_device": "/dev/sda1",
    "subnet_id": "subnet-1",
    "group_id": "sg-1",
    "key_name": "k",
    "az": "us-east-1a",
    "count": 2,
    "placement_group": None,
    "client_token": "t",
}
