"""What a cluster spec leaves to AWS, filled in before planning (by both AWS providers): the region
(the AWS CLI's, checked against botocore's list), instance type, volume size and SSH user; and
this machine's public address, which the SSH rule allows when no --ssh-cidr is given.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from dataclasses import replace

from ...model.errors import UsageError
from ...model.spec import ClusterSpec
from . import boto
from .options import DEFAULT_INSTANCE_TYPE, DEFAULT_REGION, DEFAULT_SSH_USER, DEFAULT_VOLUME_GB

CHECKIP_URL = "https://checkip.amazonaws.com"


def with_defaults(spec: ClusterSpec) -> ClusterSpec:
    """The spec with AWS defaults filled in, and the region checked against botocore's list."""
    o = spec.options
    region = o["region"] or boto.default_region() or DEFAULT_REGION
    regions = boto.available_regions()
    if region not in regions:
        sample = ", ".join(r for r in regions if r.startswith(("us-", "eu-west-1")))
        raise UsageError(f"unknown AWS region {region!r}: use one of {sample}, ... (`aws ec2 describe-regions`)")
    if o["az"] and not o["az"].startswith(region):
        raise UsageError(f"--az {o['az']} is not in region {region}: give a zone of {region} (e.g. {region}a)")
    filled = {
        "region": region,
        "instance_type": o["instance_type"] or DEFAULT_INSTANCE_TYPE,
        "volume_gb": o["volume_gb"] or DEFAULT_VOLUME_GB,
        "ssh_user": o["ssh_user"] or DEFAULT_SSH_USER,
    }
    return replace(spec, options={**o, **filled})


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
