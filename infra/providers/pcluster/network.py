"""The EC2 side of a ParallelCluster cluster: its network and key pair, through the aws adapter.

Everything goes through ``aws.ec2.Aws`` (one-line errors, retries, DDPCTL_FAULT hooks) with the
aws plan's names and tags, so the resources are the aws provider's own. ParallelCluster needs two
things the aws provider's network does not: DNS hostnames on the VPC (its SubnetsValidator
refuses a VPC without) and public addresses on launch in the subnet (nodes reach S3, DynamoDB
and CloudFormation through the internet gateway; there is no NAT gateway to pay for).
"""

from __future__ import annotations

from typing import Any

from ...errors import DdpctlError, UsageError
from ...progress import Progress
from ...state import ClusterState
from ..aws.plan import VPC_CIDR, AwsPlan, subnet_cidr


def check_subnet(aws: Any, plan: AwsPlan) -> dict[str, Any]:
    """The given --subnet-id exists (and is in --vpc-id / --az when given)."""
    subnet = aws.subnet(plan.subnet_id)
    if plan.vpc_id and plan.vpc_id != subnet["VpcId"]:
        raise UsageError(f"subnet {plan.subnet_id} is in {subnet['VpcId']}, not in --vpc-id {plan.vpc_id}")
    if plan.az and plan.az != subnet["AvailabilityZone"]:
        raise UsageError(f"subnet {plan.subnet_id} is in {subnet['AvailabilityZone']}, not in --az {plan.az}")
    return subnet


def pick_zone(aws: Any, plan: AwsPlan, head_instance_type: str) -> str:
    """--az, else the first zone that offers both instance types, else the region's first zone."""
    zones = aws.zones()
    if plan.az:
        if plan.az not in zones:
            raise UsageError(f"--az {plan.az} is not a zone of {plan.region}: use one of {', '.join(zones)}")
        return plan.az
    offered = set(aws.offered_zones(plan.instance_type)) & set(aws.offered_zones(head_instance_type))
    for zone in zones:
        if zone in offered:
            return zone
    if not zones:
        raise DdpctlError(f"no availability zone available in {plan.region}: try another --region")
    return zones[0]  # offerings unknown here (moto lacks p3): ParallelCluster's validators decide


def stand_in_subnet(aws: Any, zone: str) -> str:
    """A default-VPC subnet (in ``zone`` if there is one) for a dry run before the network exists."""
    subnets = aws.ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    subnets.sort(key=lambda s: (s["AvailabilityZone"] != zone, s["AvailabilityZone"]))
    return subnets[0]["SubnetId"] if subnets else ""


def create_vpc(aws: Any, plan: AwsPlan) -> str:
    vpc_id = aws.create_vpc(VPC_CIDR, plan.tag_specs("vpc", "vpc"))
    aws.ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    return vpc_id


def create_subnet(aws: Any, plan: AwsPlan, vpc_id: str, zone: str) -> str:
    subnet_id = aws.create_subnet(vpc_id, subnet_cidr(0), zone, plan.tag_specs("subnet", "subnet"))
    aws.ec2.modify_subnet_attribute(SubnetId=subnet_id, MapPublicIpOnLaunch={"Value": True})
    return subnet_id


def delete_own(aws: Any, state: ClusterState, progress: Progress) -> tuple[int, list[str]]:
    """Delete the key pair and network the cluster made: as recorded, and as found by its tags.

    In order: key pair, subnet, internet gateway, VPC. Returns (how many were deleted, problems).
    Only resources tagged ``ddpctl:created-by`` are found by tag (not ParallelCluster's); a given
    --subnet-id is never recorded, so it is never deleted.
    """
    from ..aws.ec2 import aws_exceptions, explain
    from ..aws.provider import delete_in_order

    found = aws.find_tagged(state.name)
    igws = dict(found.internet_gateways)
    for res in state.resources:
        if res.kind == "internet-gateway" and res.detail.get("aws_id"):
            igws.setdefault(res.detail["aws_id"], [res.detail.get("vpc", "")])

    def ids(kind: str) -> set[str]:
        return {r.detail["aws_id"] for r in state.resources if r.kind == kind and r.detail.get("aws_id")}

    def names(kind: str) -> set[str]:
        return {r.id for r in state.resources if r.kind == kind and r.status != "deleted"}

    steps: list[tuple[str, str, list[str] | None]] = []
    steps += [("key-pair", k, None) for k in sorted(set(found.key_pairs) | names("key-pair"))]
    steps += [("subnet", s, None) for s in sorted(set(found.subnets) | ids("subnet"))]
    steps += [("internet-gateway", g, [v for v in vpcs if v]) for g, vpcs in sorted(igws.items())]
    steps += [("vpc", v, None) for v in sorted(set(found.vpcs) | ids("vpc"))]
    problems: list[str] = []
    # Unattached network interfaces left in ddpctl's own subnets (a stack's ENI outliving it) would
    # keep the subnet from being deleted: they go first. A given --subnet-id is never touched.
    for subnet in sorted(ids("subnet") | set(found.subnets)):
        for eni in _available_enis(aws, subnet):
            try:
                aws.ec2.delete_network_interface(NetworkInterfaceId=eni)
                progress(f"deleted network interface {eni} left in {subnet}")
            except Exception as exc:
                if not isinstance(exc, aws_exceptions()):
                    raise
                problems.append(f"network-interface {eni}: {explain(exc, aws.region)}")
    problems += delete_in_order(aws, steps, state)
    if found.instances:
        progress(
            f"warning: {len(found.instances)} instance(s) tagged {state.name!r} still run: {', '.join(found.instances)}"
        )
    return len(steps) - len(problems), problems


def _available_enis(aws: Any, subnet_id: str) -> list[str]:
    import botocore.exceptions

    from ..aws.ec2 import code_of

    try:
        enis = aws.ec2.describe_network_interfaces(
            Filters=[{"Name": "subnet-id", "Values": [subnet_id]}, {"Name": "status", "Values": ["available"]}]
        )["NetworkInterfaces"]
    except botocore.exceptions.ClientError as exc:
        if code_of(exc).startswith("InvalidSubnetID"):
            return []
        raise
    return [e["NetworkInterfaceId"] for e in enis]
