"""The AWS provider's options, declared once (``providers.options.Option``): ``ddpctl up``'s flags,
the ``[cluster]`` keys of ``ddpctl.toml`` and ``ClusterSpec.options`` come from ``OPTIONS``, with
their format checks (whether a region or AMI exists is checked against AWS at ``up``). pcluster
takes them too, less the instance profiles (``pcluster/options.py``). Pure: no boto3.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...model.errors import UsageError
from ..options import Option

#: What the plan fills in for an option not given (``defaults.with_defaults``).
DEFAULT_INSTANCE_TYPE = "p3.2xlarge"
DEFAULT_REGION = "us-east-1"
DEFAULT_VOLUME_GB = 200
DEFAULT_SSH_USER = "ubuntu"  # the Ubuntu DLAMIs' login user

#: AWS's rules for a tag (EC2 and CloudFormation alike), and how many a user may give.
TAG_KEY_PATTERN = r"[\w .:/=+@-]{1,128}"
TAG_VALUE_PATTERN = r"[\w .:/=+@-]{0,256}"
MAX_USER_TAGS = 40  # AWS allows 50 per resource; ddpctl's own take 4


def check_user_tags(tags: Mapping[str, str]) -> None:
    """``--tag KEY=VALUE``: what AWS accepts on every resource, and not a key ddpctl sets itself."""
    import re

    for key, value in tags.items():
        if not re.fullmatch(TAG_KEY_PATTERN, key):
            raise UsageError(
                f"invalid --tag key {key!r}: 1 to 128 letters, digits, spaces or _ . : / = + - @, e.g. team=ml"
            )
        if key.lower().startswith(("aws:", "ddpctl:")) or key == "Name":
            raise UsageError(
                f"--tag {key} is reserved (aws:, ddpctl: and Name are set by AWS or ddpctl): choose another key"
            )
        if not re.fullmatch(TAG_VALUE_PATTERN, value):
            raise UsageError(f"invalid --tag value for {key}: up to 256 letters, digits, spaces or _ . : / = + - @")
    if len(tags) > MAX_USER_TAGS:
        raise UsageError(f"{len(tags)} --tag values: give at most {MAX_USER_TAGS} (AWS allows 50 tags per resource)")


def check_cidr(value: str) -> None:
    import ipaddress

    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise UsageError(f"invalid --ssh-cidr {value!r}: an address or network, e.g. 203.0.113.7/32") from None


#: a --ssh-cidr with a shorter prefix opens SSH to much of the internet (a /8 is 16 million addresses)
WIDE_PREFIX = 8


def ssh_cidr_warnings(cidr: str, private_ip: bool) -> list[str]:
    """What is wrong with a --ssh-cidr that AWS takes: open to the whole internet or much of it
    (a prefix shorter than /8), or a source the nodes can never see (loopback, link-local; a
    private network where the nodes are reached at their public addresses). Pure."""
    import ipaddress

    if not cidr:
        return []
    net = ipaddress.ip_network(cidr, strict=False)
    if net.prefixlen == 0:
        return [f"--ssh-cidr {cidr} opens SSH on the nodes to the whole internet"]
    if net.prefixlen < WIDE_PREFIX:
        return [
            f"--ssh-cidr {cidr} opens SSH on the nodes to {net.num_addresses:,} addresses, much of the internet: "
            "give your own address/32 (or leave --ssh-cidr out for it)"
        ]
    never = "the nodes can never see SSH come from it, and `up` would wait for SSH until it fails"
    if net.is_loopback or net.is_link_local or net.is_unspecified:
        return [
            f"--ssh-cidr {cidr} is this machine's own (loopback or link-local): {never}; give your public "
            "address/32, or leave --ssh-cidr out"
        ]
    private = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")  # RFC 1918, 6598, 4193
    if not private_ip and any(net.subnet_of(p) for p in map(ipaddress.ip_network, private) if p.version == net.version):
        return [
            f"--ssh-cidr {cidr} is a private network, and the nodes are reached at their public addresses, where "
            f"SSH comes from your public address: {never}; give your public address/32, or --private-ip when "
            "ddpctl runs inside the VPC"
        ]
    return []


def check_ssh_family(options: Mapping[str, object]) -> None:
    """An IPv6 ``--ssh-cidr`` only into a given subnet (``up`` checks its VPC has IPv6): the VPC
    ddpctl makes has none, so no node could be reached from there."""
    import ipaddress

    cidr = str(options.get("ssh_cidr") or "")
    if cidr and not options.get("subnet_id") and ipaddress.ip_network(cidr, strict=False).version == 6:
        raise UsageError(ipv6_refusal(cidr, "the VPC ddpctl makes"))


def ipv6_refusal(cidr: str, vpc: str, *, given: bool = True) -> str:
    """``given``: --ssh-cidr (else the caller's address, looked up)."""
    what = f"--ssh-cidr {cidr}" if given else f"your address {cidr} (the default --ssh-cidr)"
    return (
        f"{what} is IPv6 and {vpc} has no IPv6: give an IPv4 --ssh-cidr address or network "
        "(e.g. 203.0.113.7/32), or --subnet-id of a VPC with IPv6"
    )


OPTIONS: tuple[Option, ...] = (
    Option(
        "region",
        "--region",
        str,
        f"aws: the region. [default: AWS_REGION, AWS_DEFAULT_REGION or your profile's; else {DEFAULT_REGION}]",
        metavar="REGION",
        pattern=r"[a-z]{2}(-[a-z]+)+-\d+",
        example="e.g. us-east-1",
    ),
    Option(
        "az",
        "--az",
        str,
        "aws: launch in this zone only. [default: the first zone with capacity]",
        metavar="ZONE",
        pattern=r"[a-z]{2}(-[a-z]+)+-\d+[a-z]",
        example="e.g. us-east-1a",
    ),
    Option(
        "instance_type",
        "--instance-type",
        str,
        f"aws: EC2 instance type. [default: {DEFAULT_INSTANCE_TYPE}]",
        metavar="TYPE",
        pattern=r"[a-z][a-z0-9-]*\.[a-z0-9-]+",
        example="e.g. p3.2xlarge",
    ),
    Option(
        "volume_gb",
        "--volume-gb",
        int,
        f"aws: root volume size (gp3, encrypted). [default: {DEFAULT_VOLUME_GB}]",
        bounds=(8, 16384),
        unit="GB",
    ),
    Option(
        "ami",
        "--ami",
        str,
        "aws: the image. [default: by the GPU generation: Canonical's Ubuntu 22.04 for p3 (Volta), with "
        "the driver installed by the playbooks; the newest AWS Deep Learning AMI for g4dn, g5, p4d, p5]",
        metavar="AMI_ID",
        pattern=r"ami-[0-9a-f]{8,17}",
        example="e.g. ami-0123456789abcdef0",
    ),
    Option(
        "spot",
        "--spot",
        bool,
        "aws: spot instances (cheaper; AWS may take one back with 2 minutes' notice: an elastic run "
        "(--nodes MIN:MAX) goes on without it while ddpctl launches a new one in its place; any other run, "
        "or the head node's loss, fails it).",
    ),
    Option(
        "ssh_cidr",
        "--ssh-cidr",
        str,
        "aws: who may SSH to the nodes. [default: your public address/32, from checkip.amazonaws.com]",
        metavar="CIDR",
        check=check_cidr,
    ),
    Option(
        "vpc_id",
        "--vpc-id",
        str,
        "aws: an existing VPC (with --subnet-id).",
        metavar="VPC_ID",
        pattern=r"vpc-[0-9a-f]{8,17}",
        example="e.g. vpc-0123456789abcdef0",
        needs=("subnet_id", "a subnet of that VPC for the nodes"),
    ),
    Option(
        "subnet_id",
        "--subnet-id",
        str,
        "aws: an existing subnet for the nodes. [default: a new VPC and subnet for the cluster]",
        metavar="SUBNET_ID",
        pattern=r"subnet-[0-9a-f]{8,17}",
        example="e.g. subnet-0123456789abcdef0",
    ),
    Option(
        "ssh_user",
        "--ssh-user",
        str,
        f"aws: the AMI's login user. [default: {DEFAULT_SSH_USER}]",
        metavar="USER",
        pattern=r"[a-z_][a-z0-9_-]{0,31}",
        example="e.g. ubuntu",
    ),
    Option(
        "private_ip",
        "--private-ip",
        bool,
        "aws: reach the nodes at their private addresses (run ddpctl inside the VPC).",
    ),
    Option(
        "iam_instance_profile",
        "--iam-instance-profile",
        str,
        "aws: an existing IAM instance profile for the nodes, e.g. one allowed s3:GetObject, "
        "s3:PutObject and s3:ListBucket on the bucket of `run --snapshot-dir s3://...`. The "
        "nodes get short-lived credentials from it; none are ever copied to them. [default: none]",
        metavar="NAME",
        pattern=r"[\w+=,.@-]{1,128}",
        example="a profile name, e.g. ddpctl-s3",
    ),
    Option(
        "head_instance_profile",
        "--head-instance-profile",
        str,
        "aws: an existing IAM instance profile for the head node only, in place of "
        "--iam-instance-profile's there: a role with docs/aws-head-iam-policy.json (a lost node's "
        "replacement, nothing more), plus what the nodes' role may do (rank 0 runs on the head). "
        "The head gets short-lived credentials from it; none are ever copied. [default: none]",
        metavar="NAME",
        pattern=r"[\w+=,.@-]{1,128}",
        example="a profile name, e.g. ddpctl-head",
    ),
    Option(
        "tags",
        "--tag",
        dict,
        "aws, pcluster: a tag for everything ddpctl creates (repeatable), e.g. team=ml or "
        "cost-center=42, for tag policies and cost allocation. [ddpctl.toml: [cluster.tags]]",
        metavar="KEY=VALUE",
        check=check_user_tags,
    ),
    Option(
        "configure",
        "--configure/--no-configure",
        bool,
        "aws: configure the nodes with playbooks/site.yml; --no-configure only launches them and "
        "collects their host keys (not ready for jobs until `ddpctl configure`).",
        default=True,
    ),
)
