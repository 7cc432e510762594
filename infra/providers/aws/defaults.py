"""What a cluster spec leaves to AWS, filled in before planning (by both AWS providers): the region
(the AWS CLI's, checked against botocore's list), instance type, volume size and SSH user; and
this machine's public address, which the SSH rule allows when no --ssh-cidr is given.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from dataclasses import replace

from ...errors import UsageError
from ...spec import ClusterSpec
from . import boto
from .plan import DEFAULT_INSTANCE_TYPE, DEFAULT_REGION, DEFAULT_SSH_USER, DEFAULT_VOLUME_GB

CHECKIP_URL = "https://checkip.amazonaws.com"


def with_defaults(spec: ClusterSpec) -> ClusterSpec:
    """The spec with AWS defaults filled in, and the region checked against botocore's list."""
    region = spec.region or boto.default_region() or DEFAULT_REGION
    regions = boto.available_regions()
    if region not in regions:
        sample = ", ".join(r for r in regions if r.startswith(("us-", "eu-west-1")))
        raise UsageError(f"unknown AWS region {region!r}: use one of {sample}, ... (`aws ec2 describe-regions`)")
    if spec.az and not spec.az.startswith(region):
        raise UsageError(f"--az {spec.az} is not in region {region}: give a zone of {region} (e.g. {region}a)")
    return replace(
        spec,
        region=region,
        instance_type=spec.instance_type or DEFAULT_INSTANCE_TYPE,
        volume_gb=spec.volume_gb or DEFAULT_VOLUME_GB,
        ssh_user=spec.ssh_user or DEFAULT_SSH_USER,
    )


def lookup_caller_address(timeout: float = 5.0) -> str:
    """This machine's public address as AWS sees it (checkip). Tests pass --ssh-cidr instead."""
    try:
        with urllib.request.urlopen(CHECKIP_URL, timeout=timeout) as resp:
            text = resp.read(64).decode().strip()
        ipaddress.ip_address(text)
        return text
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"could not find your public address at {CHECKIP_URL} ({exc}): pass --ssh-cidr YOUR.ADDRESS/32"
        ) from None
