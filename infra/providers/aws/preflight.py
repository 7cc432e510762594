"""What ``up`` checks against AWS before it records or creates anything, and what it learns there
(``Preflight``): the instance type, the image, the given subnet or the zones to try, the IAM
instance profile, the vCPU quota, that the cluster's name is free in the region (no key pair of
it, ``network.check_name``: another state home's is named in one line; no live instances of a lost
cluster of the same name), and the address SSH is allowed from (an IPv6 one only into a VPC with
IPv6). ``--dry-run`` runs the same checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...model.errors import DdpctlError, UsageError
from . import network, pricing
from .ec2 import Aws, home_of
from .images import DLAMI, UBUNTU, ImageChoice
from .options import ssh_cidr_warnings
from .plan import AwsPlan, ssh_cidr_for


@dataclass
class Preflight:
    """What ``up`` learnt from AWS before creating anything."""

    facts: pricing.TypeFacts
    ami: str
    ami_name: str
    ami_source: str  # where the image was found: --ami, SSM ..., describe_images ...
    root_device: str
    zones: list[str]  # zones to try, in order
    vpc_id: str  # the given VPC ("" when ddpctl makes one)
    ssh_cidr: str
    quota: str  # what is known about the vCPU quota, for messages
    warnings: list[str] = field(default_factory=list)
    image: ImageChoice | None = None  # why this image, and the GPU driver plan
    described: bool = True  # EC2 described the instance type (else ddpctl's table stood in: no EFA known)
    #: the cluster's price per hour and its source in words (``prices.cluster_words``), for up's lines
    cost: str = ""


def check(aws: Aws, plan: AwsPlan, caller_address: Callable[[], str] | None) -> Preflight:
    """Everything `up` checks before recording anything; ``caller_address`` (None: a dry run) looks up
    the address SSH is allowed from when no --ssh-cidr is given. Long because it is `up`'s checks in the order
    they run, each with its one-line refusal."""
    facts, known_to_ec2 = aws.instance_type(plan.instance_type), True
    if facts is None:
        raise UsageError(
            f"unknown instance type {plan.instance_type!r} in {plan.region}: check the name "
            "(`aws ec2 describe-instance-types`), e.g. p3.2xlarge, g5.xlarge"
        )
    if plan.instance_type in pricing.TYPES and facts is pricing.TYPES[plan.instance_type]:
        known_to_ec2 = False  # EC2 did not describe it (moto); ddpctl's table did
    choice = plan.image
    image, source = _find_image(aws, plan, choice, facts.arch)
    arch = image.get("Architecture", facts.arch)
    if arch != facts.arch:
        raise UsageError(
            f"AMI {image['ImageId']} is {arch} but {plan.instance_type} is {facts.arch}: pass an {facts.arch} AMI"
        )
    root_device = image.get("RootDeviceName") or "/dev/sda1"
    snapshot = max(
        (int(m.get("Ebs", {}).get("VolumeSize", 0)) for m in image.get("BlockDeviceMappings", [])), default=0
    )
    if snapshot and plan.volume_gb < snapshot:
        raise UsageError(
            f"--volume-gb {plan.volume_gb} is smaller than the AMI's {snapshot} GB: use {snapshot} or more"
        )
    vpc_id = ""
    if plan.subnet_id:
        subnet = network.check_subnet(aws, plan)
        vpc_id, zones = subnet["VpcId"], [subnet["AvailabilityZone"]]
    else:
        zones = _zones(aws, plan, known_to_ec2)
    warnings = []
    profiles = {
        "--iam-instance-profile": (plan.iam_instance_profile, "a role allowed the snapshot bucket"),
        "--head-instance-profile": (plan.head_instance_profile, "a role with docs/aws-head-iam-policy.json"),
    }
    for flag, (profile, role) in profiles.items():
        if not profile:
            continue
        found, why = aws.instance_profile(profile)
        if found is False:
            raise UsageError(
                f"IAM instance profile {profile!r} not found: create it (`aws iam create-instance-profile` + "
                f"`add-role-to-instance-profile`, {role}) or leave {flag} out"
            )
        if found is None:
            warnings.append(f"IAM instance profile {profile!r} could not be checked ({why}): going on")
    quota = pricing.vcpu_quota(plan.instance_type, plan.spot)
    need = facts.vcpus * plan.count
    value, why = aws.vcpu_quota(quota.code)
    quota_text = (
        f"{plan.count} x {plan.instance_type} need {need} vCPUs; quota {quota.code} ({quota.name}) in "
        f"{plan.region} is {'unknown' if value is None else f'{value:g}'}: ask for more in the Service Quotas "
        f"console, or `aws service-quotas request-service-quota-increase --service-code ec2 --quota-code "
        f"{quota.code} --desired-value {need} --region {plan.region}`"
    )
    if value is None:
        warnings.append(
            f"vCPU quota {quota.code} ({quota.name}) is unknown here ({why}): going on; "
            f"{plan.count} x {plan.instance_type} need {need} vCPUs"
        )
    elif value < need:
        raise DdpctlError(f"vCPU quota too low: {quota_text}")
    alive = aws.alive_instances(plan.cluster)
    others = sorted({home_of(i) for i in alive} - {"", plan.home_id})
    if others:  # a cluster made before the key pair held the name
        how = f"{len(alive)} instance(s) tagged as it run"
        raise network.NameTaken(network.taken_by_another(plan, ", ".join(others), how))
    if alive:
        raise DdpctlError(
            f"{len(alive)} instance(s) tagged as cluster {plan.cluster!r} already run in {plan.region} and no "
            f"state file records them: delete them with `ddpctl down --name {plan.cluster} --region {plan.region}`"
        )
    network.check_name(plan, aws.key_pair(plan.key_pair_name))  # `up` takes the name for good (``claim``)
    cidr = plan.ssh_cidr
    if not cidr and caller_address is not None:
        cidr = ssh_cidr_for(caller_address())
    if cidr:
        network.check_ssh_family(aws, plan, cidr, vpc_id)
    warnings += ssh_cidr_warnings(plan.ssh_cidr, plan.private_ip)  # the one given (your own /32 is fine)
    if choice.source is UBUNTU and not plan.configure:
        warnings.append(f"--no-configure: {UBUNTU.label} has no NVIDIA driver; run `ddpctl configure` before GPU jobs")
    return Preflight(
        facts=facts,
        ami=image["ImageId"],
        ami_name=image.get("Name", ""),
        ami_source=source,
        root_device=root_device,
        zones=zones,
        vpc_id=vpc_id,
        ssh_cidr=cidr,
        quota=quota_text,
        warnings=warnings,
        image=choice,
        described=known_to_ec2,
    )


def _zones(aws: Aws, plan: AwsPlan, known_to_ec2: bool) -> list[str]:
    """The zones a new subnet may go in, in the order to try them: --az, else those offering the type."""
    region_zones = aws.zones()
    offered = aws.offered_zones(plan.instance_type)
    if plan.az:
        if plan.az not in region_zones:
            raise UsageError(f"--az {plan.az} is not a zone of {plan.region}: use one of {', '.join(region_zones)}")
        return [plan.az]
    if offered:
        return [z for z in region_zones if z in offered]
    if known_to_ec2:
        raise UsageError(
            f"{plan.instance_type} is not offered in {plan.region}: try another --region or --instance-type"
        )
    return region_zones  # offerings unknown here: try every zone


def _find_image(aws: Aws, plan: AwsPlan, choice: ImageChoice, arch: str) -> tuple[dict[str, Any], str]:
    """The user's --ami, or the newest image of the chosen source; one line when there is none."""
    if choice.source is None:
        image = aws.image(plan.ami)
        if image is None:
            raise UsageError(
                f"AMI {plan.ami} not found in {plan.region} (AMIs are per region): pass an AMI of "
                f"{plan.region} with --ami, or leave --ami out for ddpctl's default image"
            )
        return image, "--ami"
    image, source = aws.find_image(choice.source, arch)
    if image is None:
        what = "AWS Deep Learning AMI" if choice.source is DLAMI else f"{choice.source.label} image"
        raise UsageError(
            f"no {what} for {arch} found in {plan.region}: pass --ami AMI_ID "
            "(an Ubuntu 22.04 image; site.yml installs the NVIDIA driver)"
        )
    return image, source
