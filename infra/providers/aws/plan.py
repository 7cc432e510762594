"""What an AWS cluster is made of, as typed values: pure, no boto3, no network.

``plan_from_spec`` turns a ``ClusterSpec`` (with the provider's defaults filled in) into an
``AwsPlan``: which resources, in which order, with which names, tags and parameters.
``--dry-run`` prints it; ``up`` records ``plan.resources()`` in the state before creating any, and
builds each EC2 request from it with ``ec2_requests.py``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ...hosts.autodown import text as autodown_text
from ...model.state import Resource
from . import details as d
from . import pricing
from .images import UBUNTU, ImageChoice, choose_image

TAG_CLUSTER = "ddpctl:cluster"
TAG_CLUSTER_ID = "ddpctl:cluster-id"
TAG_CREATED_BY = "ddpctl:created-by"
#: The id of the state home that made the resource (``StateStore.home_id``): ``down`` deletes only
#: its own home's (``ec2.Tagged.owned_by``); resources without it were made by an older ddpctl.
TAG_HOME = "ddpctl:home"
CREATED_BY = "ddpctl"

VPC_CIDR = "10.77.0.0/16"

#: Resource kinds in creation order (``down`` deletes in reverse). Also the DDPCTL_FAULT steps.
STEPS = (
    "dir",
    "key-file",
    "key-pair",  # first in AWS: its name is the cluster's name in the region (``key_pair_name``)
    "vpc",
    "internet-gateway",
    "route",
    "subnet",
    "security-group",
    "placement-group",
    "instances",
    "configure",
)

SPOT_NOTE = (
    "spot: instances are one-time spot requests; if AWS takes one back (2 minutes' notice), it is "
    "terminated: an elastic run (`--nodes MIN:MAX`) goes on without it, launches a new instance in "
    "its place and takes it back from the snapshot (not the head node: the run fails there); other "
    "runs fail on that node, and `ddpctl down` then `ddpctl up` starts over (jobs resume from their last snapshot)"
)


@dataclass(frozen=True)
class AwsPlan:
    cluster: str
    cluster_id: str
    region: str
    az: str  # "" = any zone of the region that has capacity
    instance_type: str
    count: int
    ami: str  # "" = the image ``choose_image`` picks for the type, looked up at `up`
    volume_gb: int
    spot: bool
    ssh_cidr: str  # "" = the caller's public address as a /32, looked up at `up`
    vpc_id: str  # given network ("" = ddpctl creates one)
    subnet_id: str
    ssh_user: str
    private_ip: bool  # reach the nodes at their private addresses (from inside the VPC)
    configure: bool  # run playbooks/site.yml on the nodes
    placement_group: bool
    cluster_dir: str
    key_path: str
    iam_instance_profile: str = ""  # the nodes' only AWS credentials (S3 snapshots); "" = none
    head_instance_profile: str = ""  # the head node's, in place of the nodes' there (a node's replacement); "" = none
    user_tags: Mapping[str, str] = field(default_factory=dict)  # --tag: on everything, beside ddpctl's own
    #: EFA interfaces the instance type takes, as EC2 describes it (``ec2.efa_interfaces``): 0 = none;
    #: None = not asked yet (the plan ``plan_from_spec`` makes before ``up``'s checks)
    efa_interfaces: int | None = None
    #: the id of the state home that makes the cluster (tagged ``ddpctl:home``); "" = none yet (a
    #: dry run in a home that never brought a cluster up)
    home_id: str = ""
    #: ``--autodown``: seconds without a run after which the nodes take themselves down; 0: off
    autodown_s: int = 0

    @property
    def efa_attached(self) -> int:
        """EFA interfaces each node is launched with: every one the type takes, one per network card,
        where the nodes are reached at their private addresses; else the primary one only, since EC2
        gives no public address to an instance launched with several network interfaces
        (InvalidParameterCombination)."""
        most = self.efa_interfaces or 0
        return most if self.private_ip else min(most, 1)

    def describe_efa(self) -> str:
        """What `up --dry-run` says of EFA on each node."""
        most = self.efa_interfaces
        if most is None:
            return "  EFA per node: asked of EC2 at `up` (describe_instance_types)"
        if most == 0:
            return f"  EFA per node: no EFA: {self.instance_type} does not support it (NCCL uses TCP sockets)"
        text = f"  EFA per node: {self.efa_attached} interface(s)"
        if self.efa_attached < most:
            text += (
                f" of the {most} {self.instance_type} takes (EC2 gives no public address to an instance with "
                f"several network interfaces: --private-ip, from inside the VPC, attaches all {most})"
            )
        else:
            text += f", all {self.instance_type} takes"
        return text + "; the security group lets EFA traffic in and out between the nodes"

    @property
    def new_network(self) -> bool:
        return not self.subnet_id

    @property
    def base_name(self) -> str:
        return base_name(self.cluster)

    @property
    def unique_name(self) -> str:
        """Account-unique names (security group, placement group) carry the cluster id."""
        return f"ddpctl-{self.cluster}-{self.cluster_id}"

    @property
    def key_pair_name(self) -> str:
        """The key pair's name is the cluster's name and nothing more: EC2 keeps key pair names unique
        in a region, so importing it is the conditional create that only one of two ``up``s of one
        name (from two state homes) wins; it is made before anything else in AWS."""
        return self.base_name

    @property
    def hourly_usd(self) -> float | None:
        return pricing.hourly_usd(self.instance_type, self.count)

    @property
    def image(self) -> ImageChoice:
        return choose_image(self.instance_type, self.ami)

    def tags(self, role: str) -> dict[str, str]:
        return {
            **self.user_tags,
            TAG_CLUSTER: self.cluster,
            TAG_CLUSTER_ID: self.cluster_id,
            TAG_CREATED_BY: CREATED_BY,
            **({TAG_HOME: self.home_id} if self.home_id else {}),
            "Name": f"{self.base_name}-{role}",
        }

    def tag_specs(self, role: str, *resource_types: str) -> list[dict[str, Any]]:
        tags = [{"Key": k, "Value": v} for k, v in self.tags(role).items()]
        return [{"ResourceType": rt, "Tags": tags} for rt in resource_types]

    def resources(self) -> list[Resource]:
        """Everything ``up`` creates, in order, each ``planned``."""
        res = [
            Resource("dir", self.cluster_dir),
            d.KeyFileDetail().resource(self.key_path),
            d.KeyPairDetail().resource(self.key_pair_name),
        ]
        if self.new_network:
            res += [
                d.VpcDetail(cidr=VPC_CIDR).resource(f"{self.base_name}-vpc"),
                d.InternetGatewayDetail().resource(f"{self.base_name}-igw"),
                d.RouteDetail(via="internet-gateway", table="main").resource("0.0.0.0/0"),
                d.SubnetDetail(cidr=subnet_cidr(0), az=self.az).resource(f"{self.base_name}-subnet-0"),
            ]
        res.append(d.SecurityGroupDetail(ssh_cidr=self.ssh_cidr).resource(self.unique_name))
        if self.placement_group:
            res.append(d.PlacementGroupDetail(strategy="cluster").resource(self.unique_name))
        nodes = d.InstancesDetail(
            count=self.count, instance_type=self.instance_type, spot=self.spot, efa_interfaces=self.efa_attached
        )
        res.append(nodes.resource(f"{self.base_name}-node"))
        if self.configure:
            res.append(d.ConfigureDetail().resource("playbooks/site.yml"))
        return res

    def describe(self, cost: tuple[float | None, str] | None = None) -> list[str]:
        """The plan in a few lines, for --dry-run and up. ``cost``: a node's price per hour and where
        it comes from, in words (``dry_run.priced``: AWS's answer for the plan's region and market);
        None: ddpctl's table's (``pricing.table_text``)."""
        facts = pricing.TYPES.get(self.instance_type)
        gpus = f", {facts.gpus} GPU(s) each" if facts else ""
        where = self.az or f"any zone of {self.region} with capacity"
        network = (
            f"new VPC {VPC_CIDR} with an internet gateway"
            if self.new_network
            else f"subnet {self.subnet_id}" + (f" of {self.vpc_id}" if self.vpc_id else "")
        )
        ssh = self.ssh_cidr or "your public address/32 (looked up at `up`; --ssh-cidr to set it)"
        lines = [
            f"  {self.count} x {self.instance_type}{gpus} in {self.region} ({where}), "
            + ("spot" if self.spot else "on-demand"),
            *self.describe_image(facts.arch if facts else "x86_64"),
            f"  root volume: {self.volume_gb} GB gp3, encrypted, deleted with the instance; IMDSv2 required (hop limit 1)",
            f"  network: {network}; SSH (22) only from {ssh}; all traffic between the nodes",
            f"  placement: {'a cluster placement group' if self.placement_group else 'none'}",
            self.describe_efa(),
            self.describe_cost(*(cost or self.table_cost())),
        ]
        if self.spot:
            lines.append("  " + SPOT_NOTE)
        if self.iam_instance_profile:
            lines.append(
                f"  IAM instance profile: {self.iam_instance_profile} (the nodes' AWS access, e.g. S3 snapshots; "
                "short-lived credentials through IMDSv2, none copied)"
            )
        else:
            lines.append("  IAM instance profile: none (the nodes get no AWS credentials)")
        if self.head_instance_profile:
            lines.append(
                f"  head node's IAM instance profile: {self.head_instance_profile} (in place of the nodes' there: "
                "a lost node's replacement, docs/aws-head-iam-policy.json)"
            )
        if not self.configure:
            lines.append("  configure: skipped (--no-configure): the nodes are not prepared for jobs")
        if self.autodown_s:
            lines.append(
                f"  autodown: after {autodown_text(self.autodown_s)} without a run the nodes shut themselves down "
                "and EC2 terminates them (a program on node0); the next `ddpctl status`, `down` or `up` deletes the rest"
            )
        return lines

    def table_cost(self) -> tuple[float | None, str]:
        """A node's price per hour in ddpctl's table, and that in words."""
        return (
            pricing.ON_DEMAND_USD_PER_HOUR.get(self.instance_type),
            pricing.table_text(self.instance_type, self.region, self.spot),
        )

    def describe_cost(self, usd_per_hour: float | None, source: str) -> str:
        """The cost line: the cluster's price per hour and a day's, and where a node's price comes
        from (AWS, for the plan's region and market, or ddpctl's dated us-east-1 on-demand table)."""
        if usd_per_hour is None:
            return f"  cost: unknown: {source}"
        total = round(usd_per_hour * self.count, 4)
        until = "until `ddpctl down`" + (
            f" or autodown ({autodown_text(self.autodown_s)} idle)" if self.autodown_s else ""
        )
        return f"  cost: {pricing.format_usd(total)}: {source}; about ${total * 24:,.0f} a day {until}"

    def describe_image(self, arch: str) -> list[str]:
        """The image ``up`` looks for and why, and what becomes of the GPU driver."""
        image = self.image
        if image.source is None:
            where = f"{self.ami} ({image.reason})"
        else:
            where = (
                f"{image.source.label}: {image.reason} (the newest: SSM {image.source.parameter(arch)}, else by name)"
            )
        if self.configure:
            driver = image.driver
        elif image.source is UBUNTU:
            driver = "none: Ubuntu has none and --no-configure skips site.yml; `ddpctl configure` installs it"
        else:
            driver = (
                f"{'the Deep Learning AMI' if image.source else 'your image'}'s own (--no-configure skips site.yml)"
            )
        return [f"  AMI: {where}", f"  GPU driver: {driver}"]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hourly_usd": self.hourly_usd}


def base_name(cluster: str) -> str:
    """What the names of a cluster's AWS resources start with. ParallelCluster's cluster (its
    CloudFormation stack) is named so too: ``down --region`` of the aws provider finds one by it."""
    return f"ddpctl-{cluster}"


def plan_from_spec(spec: Any, cluster_id: str, cluster_dir: str, home_id: str = "") -> AwsPlan:
    """``spec`` is a ClusterSpec with the AWS defaults already filled in (``defaults.with_defaults``);
    its ``options`` are aws's (``options.py``) or pcluster's (the same, less the instance profile);
    ``home_id``: the state home's (``StateStore.home_id``)."""
    o = spec.options
    return AwsPlan(
        cluster=spec.name,
        cluster_id=cluster_id,
        region=o["region"],
        az=o["az"],
        instance_type=o["instance_type"],
        count=spec.nodes,
        ami=o["ami"],
        volume_gb=o["volume_gb"],
        spot=o["spot"],
        ssh_cidr=o["ssh_cidr"],
        vpc_id=o["vpc_id"],
        subnet_id=o["subnet_id"],
        ssh_user=o["ssh_user"],
        private_ip=o["private_ip"],
        configure=o["configure"],
        placement_group=spec.nodes > 1 and pricing.supports_cluster_placement(o["instance_type"]),
        cluster_dir=cluster_dir,
        key_path=f"{cluster_dir}/id_ed25519",
        iam_instance_profile=o.get("iam_instance_profile", ""),
        head_instance_profile=o.get("head_instance_profile", ""),
        user_tags=dict(o["tags"]),
        home_id=home_id,
        autodown_s=getattr(spec, "autodown_s", 0),
    )


def subnet_cidr(index: int) -> str:
    """The index-th /24 of the cluster's VPC (one subnet per zone tried)."""
    return str(list(ipaddress.ip_network(VPC_CIDR).subnets(new_prefix=24))[index])


def ssh_cidr_for(address: str) -> str:
    """The caller's address as a single-host network."""
    ip = ipaddress.ip_address(address.strip())
    return f"{ip}/{32 if ip.version == 4 else 128}"
