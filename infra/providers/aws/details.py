"""What both AWS providers record of each resource they make, typed (``infra/model/details.py``): the
plan writes each record, ``up`` completes it (``steps.Steps.step``: the AWS id once made), ``down``
reads it. One dataclass per resource kind; nothing else names their keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...model.details import Detail
from ...model.state import Resource


@dataclass(frozen=True)
class AwsIdDetail(Detail):
    """A resource with an AWS id once created (``""`` before)."""

    aws_id: str = ""


@dataclass(frozen=True)
class KeyFileDetail(Detail):
    """The cluster's key, made on this machine (``keys.py``)."""

    kind = "key-file"
    public_key: str = ""


@dataclass(frozen=True)
class VpcDetail(AwsIdDetail):
    kind = "vpc"
    cidr: str = ""


@dataclass(frozen=True)
class InternetGatewayDetail(AwsIdDetail):
    kind = "internet-gateway"
    vpc: str = ""  # the VPC it is attached to (detached from it before it is deleted)


@dataclass(frozen=True)
class RouteDetail(Detail):
    kind = "route"
    via: str = ""
    table: str = ""
    route_table: str = ""  # the VPC's main route table, once the route is in it


@dataclass(frozen=True)
class SubnetDetail(AwsIdDetail):
    kind = "subnet"
    cidr: str = ""
    az: str = ""


@dataclass(frozen=True)
class SecurityGroupDetail(AwsIdDetail):
    kind = "security-group"
    ssh_cidr: str = ""
    vpc: str = ""


@dataclass(frozen=True)
class KeyPairDetail(AwsIdDetail):
    kind = "key-pair"


@dataclass(frozen=True)
class PlacementGroupDetail(Detail):
    kind = "placement-group"
    strategy: str = ""
    reason: str = ""  # why it was skipped


@dataclass(frozen=True)
class InstancesDetail(Detail):
    """The nodes: the plan's request, then what preflight chose, the launch, and each node's instance."""

    kind = "instances"
    count: int = 0
    instance_type: str = ""
    spot: bool = False
    efa_interfaces: int = 0  # EFA interfaces on each node (0: none), as EC2 described the type at `up`
    ids: tuple[str, ...] = ()  # the instances launched (until `down` sees them terminated)
    ami: str = ""
    zones: tuple[str, ...] = ()  # the zones to try, in order
    az: str = ""  # the zone of the last launch
    client_token: str = ""
    nodes: dict[str, str] = field(default_factory=dict)  # node name -> instance id
    #: spot: node name -> the client token of its replacement's launch, recorded before the launch
    #: (``spot.py``) and dropped once the new instance is configured
    replacing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigureDetail(Detail):
    kind = "configure"
    inventory: str = ""


def aws_id(res: Resource) -> str:
    """The AWS id a resource's record holds ("" for none, or a kind without one)."""
    return AwsIdDetail.of(res).aws_id
