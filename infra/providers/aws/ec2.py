"""``Aws``: one region's boto3 clients, and the read-only look-ups ``up``, ``down`` and ``status``
make (instance types, zones, images, quotas, subnets, instances, what carries a cluster's tags).

Clients are made on first use, through ``boto.py`` (so boto3 is loaded only then), each with the
DDPCTL_FAULT hooks (``faults.py``) and the benchmark's ``CLIENT_HOOKS``. What ``up`` creates is
made in ``network.py`` (VPC, gateway, route, subnet, key pair) and ``instances.py`` (security
group, placement group, instances), with these clients. Calls that accept several ids take them
all at once (one DescribeInstances per poll), so the number of calls does not grow with the
number of nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import UsageError
from . import boto, faults, pricing
from .errors import CREDENTIAL_CODES, code_of, is_unsupported, message_of
from .images import ImageSource
from .plan import CREATED_BY, TAG_CLUSTER, TAG_CREATED_BY

#: Called with every botocore client ddpctl makes (the benchmark counts API calls this way).
CLIENT_HOOKS: list[Callable[[Any], None]] = []

ALIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]


@dataclass
class Tagged:
    """A cluster's resources in a region, found by its ddpctl:cluster tag."""

    instances: list[str] = field(default_factory=list)  # not yet terminated
    security_groups: list[str] = field(default_factory=list)
    key_pairs: list[str] = field(default_factory=list)
    placement_groups: list[str] | None = field(default_factory=list)  # None: cannot be listed here
    subnets: list[str] = field(default_factory=list)
    internet_gateways: dict[str, list[str]] = field(default_factory=dict)  # id -> attached VPCs
    vpcs: list[str] = field(default_factory=list)


class Aws:
    """One region's EC2 (plus SSM, Service Quotas, IAM and CloudFormation for look-ups)."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._session = boto.session(region)
        self._config = boto.client_config()
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            client = self._session.client(service, config=self._config)
            faults.install(client)
            for hook in CLIENT_HOOKS:
                hook(client)
            self._clients[service] = client
        return self._clients[service]

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    # ---- look-ups (read only) -------------------------------------------------------------

    def stack_tags(self, name: str) -> dict[str, str] | None:
        """The tags of CloudFormation stack ``name`` while it exists; None when there is none, or
        when these credentials may not look (a look-up that only sharpens an error message)."""
        try:
            stacks = self.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
        except boto.aws_exceptions():
            return None
        live = [s for s in stacks if s.get("StackStatus") != "DELETE_COMPLETE"]
        return {t["Key"]: t["Value"] for t in live[0].get("Tags", [])} if live else None

    def instance_type(self, name: str) -> pricing.TypeFacts | None:
        """vCPUs, GPUs and architecture from EC2, else ddpctl's table, else None (unknown type)."""
        try:
            types = self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"]
        except boto.client_error() as exc:
            if code_of(exc) not in ("InvalidInstanceType", "InvalidParameterValue"):
                raise
            types = []
        if not types:
            return pricing.TYPES.get(name)
        info = types[0]
        gpus = sum(g.get("Count", 0) for g in info.get("GpuInfo", {}).get("Gpus", []))
        archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
        arch = "x86_64" if "x86_64" in archs else archs[0]
        return pricing.TypeFacts(
            vcpus=int(info.get("VCpuInfo", {}).get("DefaultVCpus", 1)),
            gpus=gpus,
            arch=arch,
            efa_interfaces=efa_interfaces(info.get("NetworkInfo", {})),
        )

    def zones(self) -> list[str]:
        zones = self.ec2.describe_availability_zones()["AvailabilityZones"]
        return [
            z["ZoneName"]
            for z in zones
            if z.get("State", "available") == "available"
            and z.get("ZoneType", "availability-zone") == "availability-zone"
        ]

    def offered_zones(self, instance_type: str) -> list[str]:
        offers = self.ec2.describe_instance_type_offerings(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
        )["InstanceTypeOfferings"]
        return sorted(o["Location"] for o in offers)

    def image(self, ami: str) -> dict[str, Any] | None:
        try:
            images = self.ec2.describe_images(ImageIds=[ami])["Images"]
        except boto.client_error() as exc:
            if code_of(exc).startswith("InvalidAMIID"):
                return None
            raise
        return images[0] if images else None

    def find_image(self, source: ImageSource, arch: str) -> tuple[dict[str, Any] | None, str]:
        """The newest image of ``source`` for ``arch`` (EC2's name: x86_64, arm64), and where it
        was found: SSM's public parameter, else describe_images by owner and name."""
        name = source.parameter(arch)
        image = self._image_from_ssm(name)
        if image:
            return image, f"SSM {name}"
        images = self.ec2.describe_images(
            Owners=[source.owner],
            Filters=[
                {"Name": "name", "Values": source.patterns(arch)},
                {"Name": "architecture", "Values": [arch]},
                {"Name": "state", "Values": ["available"]},
            ],
        )["Images"]
        if not images:
            return None, "describe_images"
        newest = max(images, key=lambda i: i.get("CreationDate", ""))
        return newest, f"the newest image owned by {source.owner} named like {source.label}"

    def _image_from_ssm(self, name: str) -> dict[str, Any] | None:
        """The image an SSM public parameter names; None where SSM does not answer (moto has no
        /aws/service parameters, some partitions lack them, the caller may not read SSM)."""
        try:
            ami = self.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
            return self.image(ami)
        except boto.aws_exceptions() as exc:
            if code_of(exc) in CREDENTIAL_CODES or isinstance(exc, boto.exceptions().NoCredentialsError):
                raise
            return None

    def vcpu_quota(self, code: str) -> tuple[float | None, str]:
        """The account's value of an EC2 vCPU quota, or (None, why it is unknown)."""
        try:
            quota = self.client("service-quotas").get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        except boto.aws_exceptions() as exc:
            if code_of(exc) in CREDENTIAL_CODES:
                raise
            return None, code_of(exc) or type(exc).__name__
        return float(quota["Value"]), ""

    def instance_profile(self, name: str) -> tuple[bool | None, str]:
        """Whether IAM has an instance profile of that name, or (None, why it is unknown)."""
        try:
            self.client("iam").get_instance_profile(InstanceProfileName=name)
        except boto.aws_exceptions() as exc:
            code = code_of(exc)
            if code == "NoSuchEntity":
                return False, ""
            if code in CREDENTIAL_CODES:
                raise
            return None, code or type(exc).__name__  # e.g. no iam:GetInstanceProfile: RunInstances will say
        return True, ""

    def subnet(self, subnet_id: str) -> dict[str, Any]:
        try:
            return self.ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
        except boto.client_error() as exc:
            if code_of(exc).startswith("InvalidSubnetID"):
                raise UsageError(
                    f"subnet {subnet_id} does not exist in {self.region}: check --subnet-id and --region"
                ) from None
            raise

    def alive_instances(self, cluster: str) -> list[dict[str, Any]]:
        return self._instances(_cluster_filters(cluster) + [{"Name": "instance-state-name", "Values": ALIVE}])

    def instances_by_id(self, ids: list[str]) -> list[dict[str, Any]]:
        """Instances by id; ids EC2 no longer knows are simply absent (a filter, not InstanceIds)."""
        return self._instances([{"Name": "instance-id", "Values": ids}]) if ids else []

    def _instances(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                out += reservation["Instances"]
        return out

    def console_output(self, instance_id: str) -> str:
        """The instance's console log (botocore decodes it), where cloud-init prints the host keys."""
        return self.ec2.get_console_output(InstanceId=instance_id, Latest=True).get("Output") or ""

    def find_tagged(self, cluster: str) -> Tagged:
        """Everything in the region tagged as this cluster's by ddpctl (one describe per kind)."""
        filters = _cluster_filters(cluster)
        found = Tagged()
        found.instances = [i["InstanceId"] for i in self.alive_instances(cluster)]
        found.security_groups = [
            g["GroupId"] for g in self.ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
        ]
        found.key_pairs = [k["KeyName"] for k in self.ec2.describe_key_pairs(Filters=filters)["KeyPairs"]]
        try:
            groups = self.ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]
            found.placement_groups = [g["GroupName"] for g in groups if g.get("State") != "deleted"]
        except boto.aws_exceptions() as exc:
            if not is_unsupported(exc):
                raise
            found.placement_groups = None
        found.subnets = [s["SubnetId"] for s in self.ec2.describe_subnets(Filters=filters)["Subnets"]]
        found.internet_gateways = {
            g["InternetGatewayId"]: [a["VpcId"] for a in g.get("Attachments", [])]
            for g in self.ec2.describe_internet_gateways(Filters=filters)["InternetGateways"]
        }
        found.vpcs = [v["VpcId"] for v in self.ec2.describe_vpcs(Filters=filters)["Vpcs"]]
        return found

    # ---- dry run ---------------------------------------------------------------------------

    def dry_run(
        self, what: str, call: Callable[..., Any], undo: Callable[[Any], None] | None = None, **kwargs: Any
    ) -> str:
        """Call with DryRun=True: 'ok' (would succeed), or why not. An endpoint that ignores DryRun
        and really creates is caught: what it made is deleted at once (``undo``)."""
        try:
            result = call(DryRun=True, **kwargs)
        except boto.aws_exceptions() as exc:
            code = code_of(exc)
            if code == "DryRunOperation":
                return "ok"
            if code in CREDENTIAL_CODES:
                raise
            if is_unsupported(exc):
                return "not supported by this endpoint"
            return f"would fail: {code or type(exc).__name__}: {message_of(exc)}"
        if undo is not None:
            undo(result)
        return "ok (this endpoint ignored DryRun; what it created was deleted at once)"


def efa_interfaces(network: dict[str, Any]) -> int:
    """How many EFA interfaces an instance type takes, from describe_instance_types' NetworkInfo:
    0 unless EfaSupported; else EfaInfo.MaximumEfaInterfaces, at most one per network card (an
    instance's extra EFA interfaces go on network cards 1, 2, ...)."""
    if not network.get("EfaSupported"):
        return 0
    most = int(network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 1))
    return max(1, min(most, int(network.get("MaximumNetworkCards", most))))


def _cluster_filters(cluster: str) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
        {"Name": f"tag:{TAG_CREATED_BY}", "Values": [CREATED_BY]},
    ]
