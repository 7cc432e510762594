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

from ...model.errors import UsageError
from . import boto, faults, pricing
from .errors import CREDENTIAL_CODES, code_of, is_unsupported, message_of
from .images import ImageSource
from .plan import CREATED_BY, TAG_CLUSTER, TAG_CREATED_BY, TAG_HOME

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
    #: each one's ddpctl:home tag (the state home that made it; "": made by an older ddpctl)
    homes: dict[str, str] = field(default_factory=dict)
    #: what ``owned_by`` left out: each resource with the home that made it
    foreign: dict[str, str] = field(default_factory=dict)

    def owned_by(self, home_id: str) -> Tagged:
        """What of these the state home ``home_id`` may delete; the rest in ``foreign``.

        A resource tagged with another home's id is that home's. One with no home tag was made by a
        ddpctl older than the tag, in this home or another, which cannot be told: it counts as this
        home's while no other home has resources of the same cluster name (as before the tag, when
        a name was one cluster in a region), and is left alone where one has, so that an old cluster
        never takes a new one with it. (What this home's state file records is its own either way:
        ``down`` adds the recorded ids.)
        """
        foreign = {i: h for i, h in self.homes.items() if h and h != home_id}

        def mine(ident: str) -> bool:
            tag = self.homes.get(ident, "")
            return tag == home_id if tag else not foreign

        def keep(ids: list[str]) -> list[str]:
            return [i for i in ids if mine(i)]

        return Tagged(
            instances=keep(self.instances),
            security_groups=keep(self.security_groups),
            key_pairs=keep(self.key_pairs),
            placement_groups=None if self.placement_groups is None else keep(self.placement_groups),
            subnets=keep(self.subnets),
            internet_gateways={g: vpcs for g, vpcs in self.internet_gateways.items() if mine(g)},
            vpcs=keep(self.vpcs),
            homes={i: h for i, h in self.homes.items() if mine(i)},
            foreign={i: h for i, h in self.homes.items() if not mine(i)},
        )


def foreign_note(cluster: str, region: str, foreign: dict[str, str]) -> str:
    """What ``down`` left alone as another state home's, in a few words ("" when nothing)."""
    homes = sorted(set(foreign.values()) - {""})
    if not homes:
        return ""
    older = sum(1 for h in foreign.values() if not h)
    made = len(foreign) - older
    text = (
        f"left alone: {made} resource(s) of a cluster {cluster!r} in {region} that another state home made "
        f"(home id{'s' if len(homes) > 1 else ''} {', '.join(homes)})"
    )
    if older:
        text += f" and {older} an older ddpctl made (whose, it cannot tell)"
    return (
        text + f": `ddpctl down --name {cluster}` from that home deletes them (where that home is lost: "
        f"`ddpctl down --name {cluster} --region {region} --home-id {homes[0]}`)"
    )


def tag_of(resource: dict[str, Any], key: str) -> str:
    """A described resource's tag ``key`` ("": none)."""
    return next((t["Value"] for t in resource.get("Tags", []) if t["Key"] == key), "")


def home_of(resource: dict[str, Any]) -> str:
    """A described resource's ddpctl:home tag: the state home that made it ("": an older ddpctl)."""
    return tag_of(resource, TAG_HOME)


class Aws:
    """One region's EC2 (plus SSM, Service Quotas, IAM and CloudFormation for look-ups)."""

    def __init__(self, region: str, config: Any = None) -> None:
        self.region = region
        self._session = boto.session(region)
        self._config = config or boto.client_config()  # a price look-up's: boto.price_config()
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
        """Everything in the region tagged as this cluster's by ddpctl (one describe per kind), each
        with the state home that made it (``Tagged.owned_by`` tells them apart)."""
        filters = _cluster_filters(cluster)
        found = Tagged()

        def ids(items: list[dict[str, Any]], key: str) -> list[str]:
            for item in items:
                found.homes[item[key]] = home_of(item)
            return [item[key] for item in items]

        found.instances = ids(self.alive_instances(cluster), "InstanceId")
        found.security_groups = ids(self.ec2.describe_security_groups(Filters=filters)["SecurityGroups"], "GroupId")
        found.key_pairs = ids(self.ec2.describe_key_pairs(Filters=filters)["KeyPairs"], "KeyName")
        try:
            groups = self.ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]
            found.placement_groups = ids([g for g in groups if g.get("State") != "deleted"], "GroupName")
        except boto.aws_exceptions() as exc:
            if not is_unsupported(exc):
                raise
            found.placement_groups = None
        found.subnets = ids(self.ec2.describe_subnets(Filters=filters)["Subnets"], "SubnetId")
        gateways = self.ec2.describe_internet_gateways(Filters=filters)["InternetGateways"]
        found.internet_gateways = {
            g: [a["VpcId"] for a in item.get("Attachments", [])]
            for g, item in zip(ids(gateways, "InternetGatewayId"), gateways, strict=True)
        }
        found.vpcs = ids(self.ec2.describe_vpcs(Filters=filters)["Vpcs"], "VpcId")
        return found

    def key_pair(self, name: str) -> dict[str, Any] | None:
        """Key pair ``name`` with its tags, or None (a filter: no error when there is none)."""
        pairs = self.ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"]
        return pairs[0] if pairs else None

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
