"""A cluster's network and key pair on EC2, for both AWS providers: the VPC, its internet gateway,
the default route, the subnet and the key pair; the check of a given subnet; and the teardown of
all that ddpctl made, in dependency order; for ParallelCluster, the zone of its subnet and a
stand-in subnet for its dry run.

Each resource is made as one recorded step (``steps.Steps``), tagged at creation with the plan's
tags, and a retried create takes over only its own cluster's (``steps.adopt``). ParallelCluster
needs two things the aws provider's network does not: DNS hostnames on the VPC (its
SubnetsValidator refuses a VPC without) and public addresses on launch in the subnet (its nodes
reach S3, DynamoDB and CloudFormation through the internet gateway; there is no NAT gateway to pay
for). Teardown deletes what the state records and what carries the cluster's ddpctl tags, never a
given --vpc-id/--subnet-id (never recorded, never tagged).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...model.errors import ClusterExists, DdpctlError, UsageError
from ...model.progress import Progress
from ...model.state import ClusterState, Resource, ResourcePhase
from . import boto
from .details import InternetGatewayDetail, KeyPairDetail, RouteDetail, SubnetDetail, VpcDetail, aws_id
from .ec2 import Aws, Tagged, foreign_note
from .errors import code_of, explain, is_unsupported
from .options import ipv6_refusal
from .plan import TAG_CLUSTER, TAG_CLUSTER_ID, TAG_HOME, VPC_CIDR, AwsPlan, subnet_cidr
from .steps import Steps, adopt, only

DEPENDENCY_TIMEOUT_S = 300.0  # security groups, subnets, VPCs: ENIs linger a while after termination

#: One deletion: (kind, id or name, the VPCs an internet gateway is attached to).
Deletion = tuple[str, str, list[str] | None]


# ---- checks --------------------------------------------------------------------------------------


def check_subnet(aws: Aws, plan: AwsPlan) -> dict[str, Any]:
    """The given --subnet-id exists (and is in --vpc-id / --az when given)."""
    subnet = aws.subnet(plan.subnet_id)
    if plan.vpc_id and plan.vpc_id != subnet["VpcId"]:
        raise UsageError(f"subnet {plan.subnet_id} is in {subnet['VpcId']}, not in --vpc-id {plan.vpc_id}")
    if plan.az and plan.az != subnet["AvailabilityZone"]:
        raise UsageError(f"subnet {plan.subnet_id} is in {subnet['AvailabilityZone']}, not in --az {plan.az}")
    return subnet


def check_ssh_family(aws: Aws, plan: AwsPlan, cidr: str, vpc_id: str) -> None:
    """SSH from an IPv6 ``cidr`` (given, or the caller's address) only into a VPC with IPv6: a
    given one (``vpc_id``) with an associated IPv6 block; ddpctl's own VPC has none."""
    if ipaddress.ip_network(cidr, strict=False).version == 4:
        return
    given = bool(plan.ssh_cidr)
    if not vpc_id:
        raise UsageError(ipv6_refusal(cidr, "the VPC ddpctl makes", given=given))
    vpcs = aws.ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"]
    blocks = [
        b
        for v in vpcs
        for b in v.get("Ipv6CidrBlockAssociationSet", [])
        if b.get("Ipv6CidrBlockState", {}).get("State", "associated") == "associated"
    ]
    if not blocks:
        raise UsageError(ipv6_refusal(cidr, f"VPC {vpc_id} of --subnet-id {plan.subnet_id}", given=given))


def pick_zone(aws: Aws, plan: AwsPlan, head_instance_type: str) -> str:
    """ParallelCluster's subnet zone: --az, else the first zone that offers both instance types,
    else the region's first zone."""
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


def stand_in_subnet(aws: Aws, zone: str) -> str:
    """A default-VPC subnet (in ``zone`` if there is one) for a dry run before the network exists."""
    subnets = aws.ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    subnets.sort(key=lambda s: (s["AvailabilityZone"] != zone, s["AvailabilityZone"]))
    return subnets[0]["SubnetId"] if subnets else ""


# ---- creation, each a recorded step ---------------------------------------------------------------


def create_network(up: Steps, aws: Aws, plan: AwsPlan, zone: str, *, parallelcluster: bool = False) -> tuple[str, str]:
    """The VPC, its internet gateway, the default route and the first subnet (in ``zone``), each
    recorded before it is made: (VPC id, subnet id)."""
    state = up.state
    vpc_res, igw_res, route = only(state, "vpc"), only(state, "internet-gateway"), only(state, "route")

    def vpc() -> VpcDetail:
        vpc_id = aws.ec2.create_vpc(CidrBlock=VPC_CIDR, TagSpecifications=plan.tag_specs("vpc", "vpc"))["Vpc"]["VpcId"]
        if parallelcluster:
            aws.ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
        return replace(VpcDetail.of(vpc_res), aws_id=vpc_id)

    vpc_id = up.step(vpc_res, vpc).aws_id
    igw = up.step(
        igw_res,
        lambda: replace(
            InternetGatewayDetail.of(igw_res), aws_id=_create_internet_gateway(aws, plan, vpc_id), vpc=vpc_id
        ),
    ).aws_id
    up.step(route, lambda: replace(RouteDetail.of(route), route_table=_add_default_route(aws, vpc_id, igw)))
    subnet_id = add_subnet(up, aws, plan, only(state, "subnet"), vpc_id, zone, public_ips=parallelcluster)
    return vpc_id, subnet_id


def add_subnet(
    up: Steps, aws: Aws, plan: AwsPlan, res: Resource, vpc_id: str, zone: str, *, public_ips: bool = False
) -> str:
    """The subnet ``res`` (``...-subnet-N``: the VPC's N-th /24) in ``zone``; its id."""
    replace(SubnetDetail.of(res), az=zone).put(res)
    up.save()  # the zone is part of the record before the call
    index = int(res.id.rsplit("-", 1)[1])

    def subnet() -> SubnetDetail:
        subnet_id = aws.ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=subnet_cidr(index),
            AvailabilityZone=zone,
            TagSpecifications=plan.tag_specs("subnet", "subnet"),
        )["Subnet"]["SubnetId"]
        if public_ips:
            aws.ec2.modify_subnet_attribute(SubnetId=subnet_id, MapPublicIpOnLaunch={"Value": True})
        return replace(SubnetDetail.of(res), aws_id=subnet_id)

    return up.step(res, subnet).aws_id


def import_key_pair(up: Steps, aws: Aws, plan: AwsPlan, public_key: str) -> str:
    """The cluster's key (made here, ``keys.py``) imported as key pair ``plan.key_pair_name``; its id.

    The first thing ``up`` makes in AWS, and its hold on the cluster's name in the region: EC2 keeps
    key pair names unique per region, so of two ``up``s of one name (two state homes, at the same
    time) only one imports it; the other gets InvalidKeyPair.Duplicate and stops with ``NameTaken``,
    having made nothing in AWS."""
    res = up.state.resource("key-pair", plan.key_pair_name)
    return up.step(res, lambda: replace(KeyPairDetail.of(res), aws_id=_import_key_pair(aws, plan, public_key))).aws_id


class NameTaken(ClusterExists):
    """The cluster's name in the region is held (its key pair) by another cluster: another state
    home's, or a lost one of this home's."""


def check_name(plan: AwsPlan, holder: dict[str, Any] | None) -> None:
    """Refuse (``NameTaken``) when key pair ``holder`` (the described ``plan.key_pair_name``, None:
    there is none) is not this cluster's own: one line naming whose it is."""
    if holder is None:
        return
    tags = {t["Key"]: t["Value"] for t in holder.get("Tags", [])}
    if tags.get(TAG_CLUSTER_ID) == plan.cluster_id:
        return  # this cluster's own: a retried import
    name, cluster, region = plan.key_pair_name, plan.cluster, plan.region
    other = tags.get(TAG_HOME, "")
    if tags.get(TAG_CLUSTER) != cluster:
        raise NameTaken(
            f"key pair {name} already exists in {region} and is not cluster {cluster!r}'s: pick another --name"
        )
    if other and other != plan.home_id:
        raise NameTaken(taken_by_another(plan, other, f"its key pair {name} holds the name"))
    raise NameTaken(
        f"a cluster {cluster!r} of this state home is left in {region} (key pair {name}) and no state file records "
        f"it: delete it with `ddpctl down --name {cluster} --region {region}`"
    )


def claim_name(up: Steps, aws: Aws, plan: AwsPlan) -> str:
    """``up``'s first steps, before anything else in AWS: the cluster's directory and key, then its
    key pair (``import_key_pair``), the id of which is returned. Where the name is taken, what this
    ``up`` made on this machine (the key, the folder, the state file) is removed and ``NameTaken``
    raised: nothing of it is left anywhere."""
    public_key = up.dir_and_key(plan)
    try:
        return import_key_pair(up, aws, plan, public_key)
    except NameTaken:
        up.forget(plan)
        raise


def taken_by_another(plan: AwsPlan, other: str, how: str) -> str:
    """The one line of an ``up`` whose name another state home holds in the region."""
    c, r = plan.cluster, plan.region
    return (
        f"cluster {c!r} in {r} belongs to another state home (home id {other}; {how}): pick another --name, "
        f"or take it down from that home (where that home is lost: `ddpctl down --name {c} --region {r} "
        f"--home-id {other}`)"
    )


def _import_key_pair(aws: Aws, plan: AwsPlan, public_key: str) -> str:
    name = plan.key_pair_name
    for _ in range(3):  # the holder may be deleting it between our import and our look
        try:
            return aws.ec2.import_key_pair(
                KeyName=name, PublicKeyMaterial=public_key.encode(), TagSpecifications=plan.tag_specs("key", "key-pair")
            ).get("KeyPairId", name)
        except boto.client_error() as exc:
            if code_of(exc) != "InvalidKeyPair.Duplicate":
                raise
        holder = aws.key_pair(name)
        if holder is not None:
            check_name(plan, holder)
            return adopt(holder, "KeyPairId", plan.cluster_id, f"key pair {name}")
    raise DdpctlError(f"key pair {name} in {plan.region} keeps appearing and disappearing: try again")


def _create_internet_gateway(aws: Aws, plan: AwsPlan, vpc_id: str) -> str:
    igw = aws.ec2.create_internet_gateway(TagSpecifications=plan.tag_specs("igw", "internet-gateway"))[
        "InternetGateway"
    ]["InternetGatewayId"]
    try:
        aws.ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc_id)
    except boto.client_error() as exc:
        if code_of(exc) != "Resource.AlreadyAssociated":
            raise
    return igw


def _add_default_route(aws: Aws, vpc_id: str, igw: str) -> str:
    """0.0.0.0/0 via the gateway in the VPC's main route table (deleted with the VPC)."""
    tables = aws.ec2.describe_route_tables(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "association.main", "Values": ["true"]}]
    )["RouteTables"]
    table = tables[0]["RouteTableId"]
    try:
        aws.ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    except boto.client_error() as exc:
        if code_of(exc) != "RouteAlreadyExists":
            raise
    return table


# ---- teardown ------------------------------------------------------------------------------------


def deletions(found: Tagged, state: ClusterState) -> list[Deletion]:
    """The key pair and network, as recorded and as found by tag (``found``: what this state home
    owns, ``Tagged.owned_by``), in dependency order: key pair, subnets, internet gateways (detached
    from their VPCs first), VPCs. A recorded name that another home's resource carries now (the
    key pair's name is the cluster's: a state that recorded it planned may have lost it to another
    home) is not this cluster's."""
    igws = dict(found.internet_gateways)
    for res in state.resources:
        if res.kind == "internet-gateway" and (igw := InternetGatewayDetail.of(res)).aws_id:
            igws.setdefault(igw.aws_id, [igw.vpc])
    key_pairs = (set(found.key_pairs) | recorded_names(state, "key-pair")) - set(found.foreign)
    steps: list[Deletion] = []
    steps += [("key-pair", k, None) for k in sorted(key_pairs)]
    steps += [("subnet", s, None) for s in sorted(set(found.subnets) | recorded_ids(state, "subnet"))]
    steps += [("internet-gateway", g, [v for v in vpcs if v]) for g, vpcs in sorted(igws.items())]
    steps += [("vpc", v, None) for v in sorted(set(found.vpcs) | recorded_ids(state, "vpc"))]
    return steps


def recorded_ids(state: ClusterState, kind: str) -> set[str]:
    """The AWS ids the state records for ``kind``."""
    return {aws_id(r) for r in state.resources if r.kind == kind and aws_id(r)}


def recorded_names(state: ClusterState, kind: str) -> set[str]:
    """The names of ``kind`` the state does not record as deleted (key pairs, placement groups)."""
    return {r.id for r in state.resources if r.kind == kind and r.status != ResourcePhase.DELETED}


def delete_in_order(aws: Aws, steps: list[Deletion], state: ClusterState) -> list[str]:
    """Delete each (kind, id, VPCs) in order, marking the state's record deleted; return the problems."""
    problems = []
    for kind, ident, vpcs in steps:
        try:
            # once a deletion failed, what depended on it would wait out DependencyViolation in vain
            _delete(aws, kind, ident, vpcs, wait=not problems)
        except DdpctlError as exc:
            problems.append(f"{kind} {ident}: {exc}")
        except Exception as exc:
            if kind == "placement-group" and is_unsupported(exc):
                continue  # this endpoint has no placement groups (none was made)
            if not isinstance(exc, boto.aws_exceptions()):
                raise
            problems.append(f"{kind} {ident}: {explain(exc, aws.region)}")
        else:
            for res in state.resources:
                if res.kind == kind and ident in (res.id, aws_id(res)):
                    res.status = ResourcePhase.DELETED
    return problems


def _delete(aws: Aws, kind: str, ident: str, vpcs: list[str] | None = None, *, wait: bool = True) -> None:
    """Delete one resource; already gone is fine; DependencyViolation is waited out (``wait``)."""
    calls: dict[str, Callable[[], Any]] = {
        "placement-group": lambda: aws.ec2.delete_placement_group(GroupName=ident),
        "security-group": lambda: aws.ec2.delete_security_group(GroupId=ident),
        "key-pair": lambda: aws.ec2.delete_key_pair(KeyName=ident),
        "subnet": lambda: aws.ec2.delete_subnet(SubnetId=ident),
        "internet-gateway": lambda: _delete_internet_gateway(aws, ident, vpcs or []),
        "vpc": lambda: aws.ec2.delete_vpc(VpcId=ident),
    }
    deadline = time.monotonic() + DEPENDENCY_TIMEOUT_S
    delay = 2.0
    while True:
        try:
            calls[kind]()
            return
        except boto.client_error() as exc:
            code = code_of(exc)
            if code.endswith(("NotFound", ".Unknown", "Malformed")) or code == "InvalidPlacementGroup.Unknown":
                return
            if code != "DependencyViolation" or not wait or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 1.5, 15.0)


def _delete_internet_gateway(aws: Aws, igw: str, vpcs: list[str]) -> None:
    for vpc in vpcs:
        try:
            aws.ec2.detach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
        except boto.client_error() as exc:
            if code_of(exc) not in ("Gateway.NotAttached", "InvalidInternetGatewayID.NotFound"):
                raise
    aws.ec2.delete_internet_gateway(InternetGatewayId=igw)


def delete_network(aws: Aws, state: ClusterState, progress: Progress, home_id: str) -> tuple[int, list[str], str]:
    """The key pair and network a ParallelCluster cluster's ``up`` made, once its stack is gone.

    Unattached network interfaces left in ddpctl's own subnets go first (a stack's ENI outliving it
    would keep the subnet from being deleted). Only resources tagged ``ddpctl:created-by`` are found
    by tag (not ParallelCluster's), and of those only state home ``home_id``'s (``Tagged.owned_by``).
    Returns (how many were deleted, problems, what was left alone as another home's: one line or "").
    """
    found = aws.find_tagged(state.name).owned_by(home_id)
    steps = deletions(found, state)
    problems: list[str] = []
    for subnet in sorted(recorded_ids(state, "subnet") | set(found.subnets)):
        for eni in _available_enis(aws, subnet):
            try:
                aws.ec2.delete_network_interface(NetworkInterfaceId=eni)
                progress(f"deleted network interface {eni} left in {subnet}")
            except Exception as exc:
                if not isinstance(exc, boto.aws_exceptions()):
                    raise
                problems.append(f"network-interface {eni}: {explain(exc, aws.region)}")
    problems += delete_in_order(aws, steps, state)
    if found.instances:
        progress(
            f"warning: {len(found.instances)} instance(s) tagged {state.name!r} still run: {', '.join(found.instances)}"
        )
    return len(steps) - len(problems), problems, foreign_note(state.name, aws.region, found.foreign)


def _available_enis(aws: Aws, subnet_id: str) -> list[str]:
    try:
        enis = aws.ec2.describe_network_interfaces(
            Filters=[{"Name": "subnet-id", "Values": [subnet_id]}, {"Name": "status", "Values": ["available"]}]
        )["NetworkInterfaces"]
    except boto.client_error() as exc:
        if code_of(exc).startswith("InvalidSubnetID"):
            return []
        raise
    return [e["NetworkInterfaceId"] for e in enis]
