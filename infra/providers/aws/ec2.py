"""The boto3 adapter: every AWS call the provider makes, and AWS errors as one line to act on.

boto3 is imported here only, when a client is first made (``ddpctl --help`` never loads it). The
endpoint is boto3's own business: ``AWS_ENDPOINT_URL`` (and the per-service variants), profiles and
credentials all work as they do for the AWS CLI. Clients retry throttling and transient errors
(botocore's "standard" mode); RunInstances carries a ClientToken so a retried launch does not
launch twice.

Calls that accept several ids take them all at once (one RunInstances with MinCount = MaxCount,
one TerminateInstances, one DescribeInstances per poll), so the number of calls does not grow
with the number of nodes.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ...errors import DdpctlError, UsageError
from ...progress import Progress
from . import faults, pricing
from .plan import (
    CREATED_BY,
    TAG_CLUSTER,
    TAG_CLUSTER_ID,
    TAG_CREATED_BY,
    ImageSource,
)

#: Called with every botocore client ddpctl makes (the benchmark counts API calls this way).
CLIENT_HOOKS: list[Callable[[Any], None]] = []

ALIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]
POLL_S = 5.0
RUNNING_TIMEOUT_S = 900.0
TERMINATED_TIMEOUT_S = 900.0
DEPENDENCY_TIMEOUT_S = 300.0  # security groups, subnets, VPCs: ENIs linger a while after termination

CREDENTIAL_CODES = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
    "OptInRequired",
}
PERMISSION_CODES = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "Blocked"}


class CapacityError(DdpctlError):
    """No capacity for the instance type in one zone (the caller tries another)."""

    def __init__(self, zone: str, message: str) -> None:
        super().__init__(message)
        self.zone = zone


class QuotaError(DdpctlError):
    """The account's vCPU quota is too low for the launch (raised by EC2 itself)."""


def code_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def message_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Message", "")) or str(exc)


def aws_exceptions() -> tuple[type[BaseException], ...]:
    """What a boto3 call raises: API errors, client-side errors, and unparseable answers."""
    import botocore.exceptions
    import botocore.parsers

    return (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError, botocore.parsers.ResponseParserError)


def is_unsupported(exc: BaseException) -> bool:
    """The endpoint does not implement the call (moto: HTTP 500 with an HTML page)."""
    import botocore.parsers

    if isinstance(exc, (botocore.parsers.ResponseParserError, NotImplementedError)):
        return True
    return code_of(exc) in ("NotImplemented", "InvalidAction", "UnsupportedOperation", "InternalFailure")


def explain(exc: BaseException, region: str) -> DdpctlError:
    """An exception from boto3 as one line that says what to do."""
    import botocore.exceptions as bx

    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return DdpctlError(
            "no AWS credentials found: run `aws configure` (or `aws sso login`), or set AWS_PROFILE, "
            "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(exc, bx.ProfileNotFound):
        return DdpctlError(f"{exc}: set AWS_PROFILE to a profile in ~/.aws/config, or unset it")
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return DdpctlError(f"cannot reach AWS in {region} ({exc}): check your network and --region")
    code, op = code_of(exc), getattr(exc, "operation_name", "the call")
    if code in CREDENTIAL_CODES:
        return DdpctlError(
            f"AWS rejected your credentials ({code} on {op}): check them with `aws sts get-caller-identity`, "
            "and refresh expired ones (`aws sso login`, or new access keys)"
        )
    if code in PERMISSION_CODES:
        return DdpctlError(
            f"your AWS identity may not call {op} ({code}): ask for EC2 permissions (create/delete VPC, "
            "security group, key pair, placement group; run/terminate instances)"
        )
    if code.startswith("InvalidAMIID"):
        return UsageError(f"AMI problem ({code}): {message_of(exc)}: pass an AMI of {region} with --ami")
    if isinstance(exc, bx.WaiterError):
        return DdpctlError(f"EC2 did not reach the expected state: {exc}")
    if is_unsupported(exc):
        return DdpctlError(f"the EC2 endpoint for {region} does not support {op}: {str(exc)[:120]}")
    if isinstance(exc, bx.BotoCoreError) or code:
        return DdpctlError(f"AWS {op} failed in {region}: {code or type(exc).__name__}: {message_of(exc)}")
    return DdpctlError(f"AWS call failed: {exc}")


@contextmanager
def aws_errors(region: str) -> Iterator[None]:
    """Turn botocore's exceptions into DdpctlError (the CLI prints one line)."""
    try:
        yield
    except DdpctlError:
        raise
    except Exception as exc:
        if isinstance(exc, aws_exceptions()):
            raise explain(exc, region) from None
        raise


def available_regions() -> list[str]:
    """EC2's regions as botocore's bundled endpoint data knows them (no call made)."""
    import boto3

    session = boto3.session.Session()
    regions = set(session.get_available_regions("ec2"))
    for partition in ("aws-us-gov", "aws-cn"):
        regions |= set(session.get_available_regions("ec2", partition_name=partition))
    return sorted(regions)


def default_region() -> str:
    """The region the AWS CLI would use (AWS_REGION, AWS_DEFAULT_REGION, the profile), or ''."""
    import botocore.session

    try:
        return botocore.session.get_session().get_config_variable("region") or ""
    except Exception:
        return ""


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

    def count(self) -> int:
        return sum(
            len(x)
            for x in (
                self.instances,
                self.security_groups,
                self.key_pairs,
                self.placement_groups or [],
                self.subnets,
                self.internet_gateways,
                self.vpcs,
            )
        )


class Aws:
    """One region's EC2 (plus SSM and Service Quotas for look-ups)."""

    def __init__(self, region: str) -> None:
        import boto3
        from botocore.config import Config

        self.region = region
        self._session = boto3.session.Session(region_name=region)
        self._config = Config(
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=10,
            read_timeout=60,
            user_agent_extra="ddpctl",
        )
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
        except aws_exceptions():
            return None
        live = [s for s in stacks if s.get("StackStatus") != "DELETE_COMPLETE"]
        return {t["Key"]: t["Value"] for t in live[0].get("Tags", [])} if live else None

    def instance_type(self, name: str) -> pricing.TypeFacts | None:
        """vCPUs, GPUs and architecture from EC2, else ddpctl's table, else None (unknown type)."""
        import botocore.exceptions

        try:
            types = self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"]
        except botocore.exceptions.ClientError as exc:
            if code_of(exc) not in ("InvalidInstanceType", "InvalidParameterValue"):
                raise
            types = []
        if not types:
            return pricing.TYPES.get(name)
        info = types[0]
        gpus = sum(g.get("Count", 0) for g in info.get("GpuInfo", {}).get("Gpus", []))
        archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
        arch = "x86_64" if "x86_64" in archs else archs[0]
        return pricing.TypeFacts(vcpus=int(info.get("VCpuInfo", {}).get("DefaultVCpus", 1)), gpus=gpus, arch=arch)

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
        import botocore.exceptions

        try:
            images = self.ec2.describe_images(ImageIds=[ami])["Images"]
        except botocore.exceptions.ClientError as exc:
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
        import botocore.exceptions

        try:
            ami = self.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
            return self.image(ami)
        except aws_exceptions() as exc:
            if code_of(exc) in CREDENTIAL_CODES or isinstance(exc, botocore.exceptions.NoCredentialsError):
                raise
            return None

    def vcpu_quota(self, code: str) -> tuple[float | None, str]:
        """The account's value of an EC2 vCPU quota, or (None, why it is unknown)."""

        try:
            quota = self.client("service-quotas").get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        except aws_exceptions() as exc:
            if code_of(exc) in CREDENTIAL_CODES:
                raise
            return None, code_of(exc) or type(exc).__name__
        return float(quota["Value"]), ""

    def instance_profile(self, name: str) -> tuple[bool | None, str]:
        """Whether IAM has an instance profile of that name, or (None, why it is unknown)."""
        try:
            self.client("iam").get_instance_profile(InstanceProfileName=name)
        except aws_exceptions() as exc:
            code = code_of(exc)
            if code == "NoSuchEntity":
                return False, ""
            if code in CREDENTIAL_CODES:
                raise
            return None, code or type(exc).__name__  # e.g. no iam:GetInstanceProfile: RunInstances will say
        return True, ""

    def subnet(self, subnet_id: str) -> dict[str, Any]:
        import botocore.exceptions

        try:
            return self.ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
        except botocore.exceptions.ClientError as exc:
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

    # ---- creation --------------------------------------------------------------------------

    def create_vpc(self, cidr: str, tag_specs: list[dict[str, Any]]) -> str:
        return self.ec2.create_vpc(CidrBlock=cidr, TagSpecifications=tag_specs)["Vpc"]["VpcId"]

    def create_internet_gateway(self, vpc_id: str, tag_specs: list[dict[str, Any]]) -> str:
        igw = self.ec2.create_internet_gateway(TagSpecifications=tag_specs)["InternetGateway"]["InternetGatewayId"]
        self.attach_internet_gateway(igw, vpc_id)
        return igw

    def attach_internet_gateway(self, igw: str, vpc_id: str) -> None:
        import botocore.exceptions

        try:
            self.ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc_id)
        except botocore.exceptions.ClientError as exc:
            if code_of(exc) != "Resource.AlreadyAssociated":
                raise

    def add_default_route(self, vpc_id: str, igw: str) -> str:
        """0.0.0.0/0 via the gateway in the VPC's main route table (deleted with the VPC)."""
        import botocore.exceptions

        tables = self.ec2.describe_route_tables(
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "association.main", "Values": ["true"]}]
        )["RouteTables"]
        table = tables[0]["RouteTableId"]
        try:
            self.ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
        except botocore.exceptions.ClientError as exc:
            if code_of(exc) != "RouteAlreadyExists":
                raise
        return table

    def create_subnet(self, vpc_id: str, cidr: str, zone: str, tag_specs: list[dict[str, Any]]) -> str:
        return self.ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=zone, TagSpecifications=tag_specs)[
            "Subnet"
        ]["SubnetId"]

    def create_security_group(self, name: str, vpc_id: str, cluster_id: str, tag_specs: list[dict[str, Any]]) -> str:
        import botocore.exceptions

        try:
            return self.ec2.create_security_group(
                GroupName=name,
                Description=f"ddpctl cluster {name}: SSH from the controller, all traffic between nodes",
                VpcId=vpc_id,
                TagSpecifications=tag_specs,
            )["GroupId"]
        except botocore.exceptions.ClientError as exc:
            if code_of(exc) != "InvalidGroup.Duplicate":
                raise
        groups = self.ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]}]
        )["SecurityGroups"]
        return _adopt(groups[0], "GroupId", cluster_id, f"security group {name}")

    def authorize_ingress(self, group_id: str, rules: list[dict[str, Any]], tag_specs: list[dict[str, Any]]) -> None:
        import botocore.exceptions

        try:
            self.ec2.authorize_security_group_ingress(
                GroupId=group_id, IpPermissions=rules, TagSpecifications=tag_specs
            )
        except botocore.exceptions.ClientError as exc:
            if code_of(exc) != "InvalidPermission.Duplicate":
                raise

    def import_key_pair(self, name: str, public_key: str, cluster_id: str, tag_specs: list[dict[str, Any]]) -> str:
        import botocore.exceptions

        try:
            return self.ec2.import_key_pair(
                KeyName=name, PublicKeyMaterial=public_key.encode(), TagSpecifications=tag_specs
            ).get("KeyPairId", name)
        except botocore.exceptions.ClientError as exc:
            if code_of(exc) != "InvalidKeyPair.Duplicate":
                raise
        pair = self.ec2.describe_key_pairs(KeyNames=[name])["KeyPairs"][0]
        return _adopt(pair, "KeyPairId", cluster_id, f"key pair {name}")

    def create_placement_group(self, name: str, tag_specs: list[dict[str, Any]]) -> str | None:
        """Create a cluster placement group; None (with the reason) where the endpoint has none."""

        try:
            self.ec2.create_placement_group(GroupName=name, Strategy="cluster", TagSpecifications=tag_specs)
        except aws_exceptions() as exc:
            if code_of(exc) == "InvalidPlacementGroup.Duplicate":
                return ""
            if is_unsupported(exc):
                return None
            raise
        return ""

    def run_instances(
        self, request: dict[str, Any], zone: str, describe_quota: Callable[[], str]
    ) -> list[dict[str, Any]]:
        import botocore.exceptions

        try:
            return self.ec2.run_instances(**request)["Instances"]
        except botocore.exceptions.ClientError as exc:
            code = code_of(exc)
            if code in ("InsufficientInstanceCapacity", "Unsupported", "InsufficientCapacityOnHost"):
                raise CapacityError(zone, message_of(exc)) from None
            if code in ("VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded"):
                raise QuotaError(f"EC2 refused the launch ({code}): {describe_quota()}") from None
            raise

    def wait(self, waiter_name: str, ids: list[str], progress: Progress, what: str, timeout: float) -> None:
        """A boto3 waiter, polled one attempt at a time so each poll can report progress."""
        import botocore.exceptions

        waiter = self.ec2.get_waiter(waiter_name)
        deadline = time.monotonic() + timeout
        last = ""
        while True:
            try:
                waiter.wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 1})
                return
            except botocore.exceptions.WaiterError as exc:
                response = exc.last_response or {}
                gone = response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound"
                if waiter_name == "instance_terminated" and gone:
                    return  # EC2 no longer knows them: long terminated
                if "terminal failure" in str(exc) or response.get("Error"):
                    raise DdpctlError(
                        f"{what}: {self._states(response) or response.get('Error', {}).get('Message', exc)}: "
                        "see the instances in the EC2 console"
                    ) from None
                states = self._states(response)
                if states != last:
                    progress(f"{what}: {states}")
                    last = states
            if time.monotonic() > deadline:
                raise DdpctlError(f"{what}: still not done after {timeout:.0f} s ({last})")
            time.sleep(POLL_S)

    @staticmethod
    def _states(response: dict[str, Any]) -> str:
        counts = Counter(i["State"]["Name"] for r in response.get("Reservations", []) for i in r.get("Instances", []))
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))

    def console_output(self, instance_id: str) -> str:
        """The instance's console log (botocore decodes it), where cloud-init prints the host keys."""
        return self.ec2.get_console_output(InstanceId=instance_id, Latest=True).get("Output") or ""

    # ---- dry run ---------------------------------------------------------------------------

    def dry_run(
        self, what: str, call: Callable[..., Any], undo: Callable[[Any], None] | None = None, **kwargs: Any
    ) -> str:
        """Call with DryRun=True: 'ok' (would succeed), or why not. An endpoint that ignores DryRun
        and really creates is caught: what it made is deleted at once (``undo``)."""

        try:
            result = call(DryRun=True, **kwargs)
        except aws_exceptions() as exc:
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

    # ---- finding and deleting ----------------------------------------------------------------

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
        except aws_exceptions() as exc:
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

    def terminate(self, ids: list[str], progress: Progress, attempts: int = 5) -> None:
        """TerminateInstances for all ids at once, retried; ids EC2 does not know are dropped."""
        import botocore.exceptions

        pending = list(ids)
        for attempt in range(attempts):
            if not pending:
                return
            try:
                self.ec2.terminate_instances(InstanceIds=pending)
                return
            except botocore.exceptions.ClientError as exc:
                if code_of(exc) == "InvalidInstanceID.NotFound":
                    unknown = set(re.findall(r"i-[0-9a-f]+", message_of(exc)))
                    pending = [i for i in pending if i not in unknown] if unknown else []
                    continue
                if code_of(exc) in CREDENTIAL_CODES or attempt == attempts - 1:
                    raise
                progress(f"terminating failed ({code_of(exc)}): retrying")
                time.sleep(min(2**attempt, 30))

    def delete(self, kind: str, ident: str, vpcs: list[str] | None = None) -> None:
        """Delete one resource; already gone is fine; DependencyViolation is waited out."""
        import botocore.exceptions

        calls: dict[str, Callable[[], Any]] = {
            "placement-group": lambda: self.ec2.delete_placement_group(GroupName=ident),
            "security-group": lambda: self.ec2.delete_security_group(GroupId=ident),
            "key-pair": lambda: self.ec2.delete_key_pair(KeyName=ident),
            "subnet": lambda: self.ec2.delete_subnet(SubnetId=ident),
            "internet-gateway": lambda: self._delete_igw(ident, vpcs or []),
            "vpc": lambda: self.ec2.delete_vpc(VpcId=ident),
        }
        deadline = time.monotonic() + DEPENDENCY_TIMEOUT_S
        delay = 2.0
        while True:
            try:
                calls[kind]()
                return
            except botocore.exceptions.ClientError as exc:
                code = code_of(exc)
                if code.endswith(("NotFound", ".Unknown", "Malformed")) or code == "InvalidPlacementGroup.Unknown":
                    return
                if code != "DependencyViolation" or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 1.5, 15.0)

    def _delete_igw(self, igw: str, vpcs: list[str]) -> None:
        import botocore.exceptions

        for vpc in vpcs:
            try:
                self.ec2.detach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
            except botocore.exceptions.ClientError as exc:
                if code_of(exc) not in ("Gateway.NotAttached", "InvalidInternetGatewayID.NotFound"):
                    raise
        self.ec2.delete_internet_gateway(InternetGatewayId=igw)


def _cluster_filters(cluster: str) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]},
        {"Name": f"tag:{TAG_CREATED_BY}", "Values": [CREATED_BY]},
    ]


def _adopt(resource: dict[str, Any], id_key: str, cluster_id: str, what: str) -> str:
    """A same-named resource is reused only if it is this cluster's own (a retried create)."""
    tags = {t["Key"]: t["Value"] for t in resource.get("Tags", [])}
    if tags.get(TAG_CLUSTER_ID) != cluster_id:
        raise DdpctlError(f"{what} already exists and is not this cluster's: delete it, or pick another --name")
    return str(resource.get(id_key, ""))
