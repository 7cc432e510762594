"""The AWS provider: EC2 instances with a network, security group, key pair and placement group.

``up`` checks everything it can before recording anything (credentials, region, instance type,
AMI, zones, the vCPU quota, leftovers of a lost cluster of the same name), then records the plan
and creates resource by resource, each recorded as ``planned`` before its AWS call and ``created``
(with its id) after. Every AWS resource is tagged at creation (``ddpctl:cluster``,
``ddpctl:cluster-id``, ``ddpctl:created-by``, ``Name``), so ``down`` finds what a crash left
between an AWS call and the state write, and ``down --name X --region R`` cleans up after a lost
state file. Only resources that carry ddpctl's tags are ever deleted (a given VPC/subnet is not).
"""

from __future__ import annotations

import ipaddress
import shutil
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...ansible import PlayReport
from ...configure import reconfigure, record_nodes, run_site, site_command
from ...errors import DdpctlError, UsageError
from ...launch.supervise import OutputLine
from ...spec import ClusterSpec
from ...state import ClusterState, NodeInfo, Resource, StateStore
from ..base import PROVIDER_FLAGS, LiveStatus, Progress, Provider
from . import configure, faults, keys, pricing
from .plan import (
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_REGION,
    DEFAULT_SSH_USER,
    DEFAULT_VOLUME_GB,
    DLAMI,
    SPOT_NOTE,
    TAG_CLUSTER,
    TAG_CLUSTER_ID,
    UBUNTU,
    VPC_CIDR,
    AwsPlan,
    ImageChoice,
    client_token,
    ingress_rules,
    plan_from_spec,
    run_instances_request,
    ssh_cidr_for,
    subnet_cidr,
)

CHECKIP_URL = "https://checkip.amazonaws.com"


def lookup_caller_address(timeout: float = 5.0) -> str:
    """This machine's public address as AWS sees it (checkip). Tests pass --ssh-cidr instead."""
    import urllib.request

    try:
        with urllib.request.urlopen(CHECKIP_URL, timeout=timeout) as resp:
            text = resp.read(64).decode().strip()
        ipaddress.ip_address(text)
        return text
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"could not find your public address at {CHECKIP_URL} ({exc}): pass --ssh-cidr YOUR.ADDRESS/32"
        ) from None


def with_defaults(spec: ClusterSpec) -> ClusterSpec:
    """The spec with AWS defaults filled in, and the region checked against botocore's list."""
    from .ec2 import available_regions, default_region

    region = spec.region or default_region() or DEFAULT_REGION
    regions = available_regions()
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


@dataclass
class DryRunReport:
    plan: AwsPlan
    lines: list[str]
    checks: dict[str, str]
    image: dict[str, str] = field(default_factory=dict)  # the AMI found, why, and the GPU driver plan

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "checks": self.checks, "lines": self.lines, "image": self.image}


class AwsProvider(Provider):
    name = "aws"
    runs_playbooks = True
    billed = True
    options = frozenset(PROVIDER_FLAGS) - {"inventory"}

    def __init__(self, caller_address: Callable[[], str] = lookup_caller_address) -> None:
        self.caller_address = caller_address

    # ---- plan (pure) ---------------------------------------------------------------------

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        spec = with_defaults(spec)
        cluster_id = uuid.uuid4().hex[:12]
        plan = plan_from_spec(spec, cluster_id, str(store.cluster_dir(spec.name)))
        facts = pricing.TYPES.get(spec.instance_type)
        nodes = [
            NodeInfo(
                name=f"node{i}", host="", workdir="", cpus=facts.vcpus if facts else 1, gpus=facts.gpus if facts else 0
            )
            for i in range(spec.nodes)
        ]
        return ClusterState(
            spec=spec,
            cluster_id=cluster_id,
            status="planned",
            nodes=nodes,
            resources=plan.resources(),
            ephemeral=ephemeral,
        )

    @staticmethod
    def aws_plan(state: ClusterState, store: StateStore) -> AwsPlan:
        return plan_from_spec(state.spec, state.cluster_id, str(store.cluster_dir(state.name)))

    # ---- checks shared by up and --dry-run ---------------------------------------------------

    def preflight(self, state: ClusterState) -> None:
        """site.yml verified every node's Python environment at `up`."""

    def _check(self, aws: Any, plan: AwsPlan, *, look_up_address: bool) -> Preflight:
        facts, known_to_ec2 = aws.instance_type(plan.instance_type), True
        if facts is None:
            raise UsageError(
                f"unknown instance type {plan.instance_type!r} in {plan.region}: check the name "
                "(`aws ec2 describe-instance-types`), e.g. p3.2xlarge, g5.xlarge"
            )
        if plan.instance_type in pricing.TYPES and facts is pricing.TYPES[plan.instance_type]:
            known_to_ec2 = False  # EC2 did not describe it (moto); ddpctl's table did
        choice = plan.image
        image, source = self._find_image(aws, plan, choice, facts.arch)
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
            subnet = aws.subnet(plan.subnet_id)
            vpc_id = subnet["VpcId"]
            if plan.vpc_id and plan.vpc_id != vpc_id:
                raise UsageError(f"subnet {plan.subnet_id} is in {vpc_id}, not in --vpc-id {plan.vpc_id}")
            if plan.az and plan.az != subnet["AvailabilityZone"]:
                raise UsageError(f"subnet {plan.subnet_id} is in {subnet['AvailabilityZone']}, not in --az {plan.az}")
            zones = [subnet["AvailabilityZone"]]
        else:
            region_zones = aws.zones()
            offered = aws.offered_zones(plan.instance_type)
            if plan.az:
                if plan.az not in region_zones:
                    raise UsageError(
                        f"--az {plan.az} is not a zone of {plan.region}: use one of {', '.join(region_zones)}"
                    )
                zones = [plan.az]
            elif offered:
                zones = [z for z in region_zones if z in offered]
            elif known_to_ec2:
                raise UsageError(
                    f"{plan.instance_type} is not offered in {plan.region}: try another --region or --instance-type"
                )
            else:
                zones = region_zones  # offerings unknown here: try every zone
        warnings = []
        if plan.iam_instance_profile:
            found, why = aws.instance_profile(plan.iam_instance_profile)
            if found is False:
                raise UsageError(
                    f"IAM instance profile {plan.iam_instance_profile!r} not found: create it (`aws iam "
                    "create-instance-profile` + `add-role-to-instance-profile`, a role allowed the snapshot bucket) "
                    "or leave --iam-instance-profile out"
                )
            if found is None:
                warnings.append(
                    f"IAM instance profile {plan.iam_instance_profile!r} could not be checked ({why}): going on"
                )
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
        if alive:
            raise DdpctlError(
                f"{len(alive)} instance(s) tagged as cluster {plan.cluster!r} already run in {plan.region} and no "
                f"state file records them: delete them with `ddpctl down --name {plan.cluster} --region {plan.region}`"
            )
        cidr = plan.ssh_cidr
        if not cidr and look_up_address:
            cidr = ssh_cidr_for(self.caller_address())
        if cidr and ipaddress.ip_network(cidr, strict=False).prefixlen == 0:
            warnings.append(f"--ssh-cidr {cidr} opens SSH on the nodes to the whole internet")
        if choice.source is UBUNTU and not plan.configure:
            warnings.append(
                f"--no-configure: {UBUNTU.label} has no NVIDIA driver; run `ddpctl configure` before GPU jobs"
            )
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
        )

    @staticmethod
    def _find_image(aws: Any, plan: AwsPlan, choice: ImageChoice, arch: str) -> tuple[dict[str, Any], str]:
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

    # ---- dry run -----------------------------------------------------------------------------

    def dry_run(self, state: ClusterState, store: StateStore, progress: Progress) -> DryRunReport:
        """Every check ``up`` makes, and each create call with DryRun=True. Creates nothing."""
        from .ec2 import Aws, aws_errors

        plan = self.aws_plan(state, store)
        with aws_errors(plan.region):
            aws = Aws(plan.region)
            pre = self._check(aws, plan, look_up_address=False)
            ec2 = aws.ec2
            tags = plan.tag_specs
            checks: dict[str, str] = {}
            if plan.new_network:
                checks["CreateVpc"] = aws.dry_run(
                    "CreateVpc",
                    ec2.create_vpc,
                    lambda r: ec2.delete_vpc(VpcId=r["Vpc"]["VpcId"]),
                    CidrBlock=VPC_CIDR,
                    TagSpecifications=tags("vpc", "vpc"),
                )
                checks["CreateInternetGateway"] = aws.dry_run(
                    "CreateInternetGateway",
                    ec2.create_internet_gateway,
                    lambda r: ec2.delete_internet_gateway(InternetGatewayId=r["InternetGateway"]["InternetGatewayId"]),
                    TagSpecifications=tags("igw", "internet-gateway"),
                )
            sg_args = {"VpcId": pre.vpc_id} if pre.vpc_id else {}
            checks["CreateSecurityGroup"] = aws.dry_run(
                "CreateSecurityGroup",
                ec2.create_security_group,
                lambda r: ec2.delete_security_group(GroupId=r["GroupId"]),
                GroupName=plan.unique_name,
                Description="ddpctl dry run",
                TagSpecifications=tags("sg", "security-group"),
                **sg_args,
            )
            checks["ImportKeyPair"] = aws.dry_run(
                "ImportKeyPair",
                ec2.import_key_pair,
                lambda r: ec2.delete_key_pair(KeyName=plan.unique_name),
                KeyName=plan.unique_name,
                PublicKeyMaterial=_throwaway_public_key(),
                TagSpecifications=tags("key", "key-pair"),
            )
            if plan.placement_group:
                checks["CreatePlacementGroup"] = aws.dry_run(
                    "CreatePlacementGroup",
                    ec2.create_placement_group,
                    lambda r: ec2.delete_placement_group(GroupName=plan.unique_name),
                    GroupName=plan.unique_name,
                    Strategy="cluster",
                    TagSpecifications=tags("pg", "placement-group"),
                )
            request = run_instances_request(
                plan,
                ami=pre.ami,
                root_device=pre.root_device,
                subnet_id=plan.subnet_id,
                group_id="",
                key_name="",
                az=pre.zones[0],
                count=plan.count,
                placement_group=None,
                client_token=client_token(state.cluster_id, pre.zones[0], plan.count),
            )
            for key in ("KeyName", "ClientToken", "NetworkInterfaces"):
                request.pop(key)  # they do not exist yet: the default VPC stands in
            if plan.subnet_id:
                request["SubnetId"] = plan.subnet_id
            checks["RunInstances"] = aws.dry_run(
                "RunInstances",
                ec2.run_instances,
                lambda r: ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in r["Instances"]]),
                **request,
            )
        lines = [f"Would create aws cluster {plan.cluster!r} in {plan.region} ({plan.count} node(s)):"]
        lines += plan.describe()
        lines += [
            f"  AMI found: {pre.ami} {pre.ami_name!r} ({pre.ami_source}); root device {pre.root_device}",
            f"  instance type: {pre.facts.vcpus} vCPUs, {pre.facts.gpus} GPU(s), {pre.facts.arch}",
            f"  zones to try, in order: {', '.join(pre.zones)}",
        ]
        lines += [f"  warning: {w}" for w in pre.warnings]
        lines += [f"  DryRun {op}: {result}" for op, result in checks.items()]
        lines.append("Nothing was created.")
        image = {"ami": pre.ami, "name": pre.ami_name, "found_by": pre.ami_source, **plan.image.to_dict()}
        return DryRunReport(plan=plan, lines=lines, checks=checks, image=image)

    # ---- up ------------------------------------------------------------------------------------

    def up(self, state: ClusterState, store: StateStore, progress: Progress) -> ClusterState:
        from .ec2 import Aws, aws_errors

        plan = self.aws_plan(state, store)
        with aws_errors(plan.region):
            aws = Aws(plan.region)
            pre = self._check(aws, plan, look_up_address=True)  # nothing recorded or created before this passes
            state.resource("security-group", plan.unique_name).detail["ssh_cidr"] = pre.ssh_cidr
            inst = _only(state, "instances")
            inst.detail.update({"ami": pre.ami, "zones": pre.zones})
            state.status = "creating"
            store.save(state)
            for warning in pre.warnings:
                progress(f"warning: {warning}")
            if plan.spot:
                progress(SPOT_NOTE)
            progress(
                f"creating aws cluster {plan.cluster!r}: {plan.count} x {plan.instance_type} in {plan.region}, "
                f"AMI {pre.ami} ({pre.ami_name or pre.ami_source}), {pricing.format_usd(plan.hourly_usd)}"
            )
            if pre.image is not None and pre.image.source is not None:
                progress(f"image: {pre.image.reason}; {pre.image.driver}")
            _Up(state, store, progress, aws, plan, pre).run()
        return state

    # ---- down ----------------------------------------------------------------------------------

    def down(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        from .ec2 import TERMINATED_TIMEOUT_S, Aws, aws_errors

        name = state.name
        region = state.spec.region or DEFAULT_REGION
        persisted = store.exists(name)
        if persisted:
            state.status = "deleting"
            store.save(state)
        problems: list[str] = []
        with aws_errors(region):
            aws = Aws(region)
            found = aws.find_tagged(name)
            recorded = [i for r in state.resources if r.kind == "instances" for i in r.detail.get("ids", [])]
            alive = found.instances
            if not set(recorded) <= set(alive):
                described = aws.instances_by_id(sorted(set(recorded) | set(alive)))
                alive = [i["InstanceId"] for i in described if i["State"]["Name"] != "terminated"]
            if alive:
                progress(f"terminating {len(alive)} instance(s) of {name!r} in {region}")
                aws.terminate(alive, progress)
                aws.wait("instance_terminated", alive, progress, "terminating", TERMINATED_TIMEOUT_S)
            for res in state.resources:  # dropped only now that EC2 reports them terminated
                if res.kind == "instances":
                    res.detail["ids"] = []
                    res.status = "deleted"
            if persisted:
                store.save(state)

            def ids(kind: str, key: str = "aws_id") -> set[str]:
                return {r.detail[key] for r in state.resources if r.kind == kind and r.detail.get(key)}

            def names(kind: str) -> set[str]:
                return {r.id for r in state.resources if r.kind == kind and r.status != "deleted"}

            igws = dict(found.internet_gateways)
            for res in state.resources:
                if res.kind == "internet-gateway" and res.detail.get("aws_id"):
                    igws.setdefault(res.detail["aws_id"], [res.detail.get("vpc", "")])
            steps: list[tuple[str, str, list[str] | None]] = []
            steps += [
                ("placement-group", n, None)
                for n in sorted(set(found.placement_groups or []) | names("placement-group"))
            ]
            steps += [("security-group", g, None) for g in sorted(set(found.security_groups) | ids("security-group"))]
            steps += [("key-pair", k, None) for k in sorted(set(found.key_pairs) | names("key-pair"))]
            steps += [("subnet", s, None) for s in sorted(set(found.subnets) | ids("subnet"))]
            steps += [("internet-gateway", g, [v for v in vpcs if v]) for g, vpcs in sorted(igws.items())]
            steps += [("vpc", v, None) for v in sorted(set(found.vpcs) | ids("vpc"))]
            problems += delete_in_order(aws, steps, state)
        if problems:
            if persisted:
                store.save(state)
            again = f"ddpctl down --name {name}" + ("" if persisted else f" --region {region}")
            raise DdpctlError(
                f"could not delete {len(problems)} resource(s) ({'; '.join(problems)}): run `{again}` again"
            )
        cluster_dir = store.cluster_dir(name)
        keys.remove_key(cluster_dir / "id_ed25519")
        shutil.rmtree(cluster_dir, ignore_errors=True)
        store.delete(name)
        made = len(alive) + len(steps)
        progress(f"aws cluster {name!r} is down: {made} resource(s) deleted, nothing of it is left in {region}")

    def down_lost(self, name: str, region: str, store: StateStore, progress: Progress) -> None:
        """``ddpctl down --name X --region R`` with no state file: everything found by tag."""
        from ..pcluster.config import pcluster_name
        from .ec2 import Aws, aws_errors

        spec = with_defaults(ClusterSpec(name=name, provider="aws", region=region))  # the region as `up` checks it
        with aws_errors(region):
            stack = Aws(region).stack_tags(pcluster_name(name))
        if stack is not None and stack.get(TAG_CLUSTER) == name:  # its network would be in use
            raise UsageError(
                f"{name!r} in {region} is a ParallelCluster ({pcluster_name(name)}): run "
                f"`ddpctl down --name {name} --region {region} --provider pcluster`"
            )
        progress(f"no state file for {name!r}: looking for its resources by tag in {region}")
        self.down(ClusterState(spec=spec, cluster_id="", status="deleting"), store, progress)

    # ---- status --------------------------------------------------------------------------------

    def status(self, state: ClusterState) -> LiveStatus:
        """What EC2 says runs for the cluster now, and what that costs per hour."""
        from .ec2 import Aws, aws_errors

        price = pricing.ON_DEMAND_USD_PER_HOUR.get(state.spec.instance_type)
        details: dict[str, Any] = {"instance_type": state.spec.instance_type, "region": state.spec.region}
        error = ""
        try:
            with aws_errors(state.spec.region):
                alive = Aws(state.spec.region).alive_instances(state.name)
        except DdpctlError as exc:
            error = str(exc)
            billed = len(state.nodes) if state.status == "up" else 0
            summary = error
        else:
            details["instances"] = dict(Counter(i["State"]["Name"] for i in alive))
            billed = sum(1 for i in alive if i["State"]["Name"] in ("pending", "running"))
            summary = "EC2: " + (", ".join(f"{n} {st}" for st, n in sorted(details["instances"].items())) or "none")
        cost = None if price is None else round(price * billed, 4)
        return LiveStatus(
            summary=summary, billed_instances=billed, cost_per_hour_usd=cost, error=error, details=details
        )

    def configure(self, state: ClusterState, store: StateStore, progress: Progress, tags: str | None) -> PlayReport:
        """site.yml again (``ddpctl configure``) through the inventory ``up`` wrote."""

        cluster_dir = store.cluster_dir(state.name)
        inventory = configure.inventory_path(cluster_dir)
        if not inventory.is_file():
            raise DdpctlError(
                f"{inventory} is missing: take the cluster down and up again (`ddpctl down --name {state.name}`)"
            )
        self._collect_missing_host_keys(state, store, progress)
        configure.wait_for_ssh([n.ssh for n in state.nodes], progress)
        report = reconfigure(state, str(inventory), cluster_dir / "keys", progress, tags)
        for res in state.resources:
            if res.kind == "configure":  # an `up` stopped in its configure step is finished now
                res.status = "created"
        state.status = "up"
        return report

    def _collect_missing_host_keys(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        """Host keys that `up --no-configure` did not find yet, from the consoles; the SSH files rewritten."""
        from .ec2 import Aws, aws_errors

        plan = self.aws_plan(state, store)
        ids = _only(state, "instances").detail.get("nodes", {})
        launched = [
            configure.Launched(
                name=n.name,
                instance_id=ids.get(n.name, ""),
                private_ip=n.host,
                public_ip="" if plan.private_ip or n.ssh is None else n.ssh.address,
                zone="",
            )
            for n in state.nodes
        ]
        cluster_dir = store.cluster_dir(state.name)
        if not configure.without_host_keys(cluster_dir / "known_hosts", launched, plan.private_ip):
            return
        with aws_errors(plan.region):
            keys = configure.collect_host_keys(launched, Aws(plan.region).console_output, progress)
        configure.write_files(
            cluster_dir, launched, user=plan.ssh_user, key_path=plan.key_path, private=plan.private_ip, host_keys=keys
        )

    # ---- running jobs --------------------------------------------------------------------------

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]):
        from ...launch.ssh import SshExecutor

        return SshExecutor({n.name: n.ssh for n in state.nodes}, sink)


class _Up:
    """One ``up``: each step recorded before its AWS call and marked after it."""

    def __init__(
        self, state: ClusterState, store: StateStore, progress: Progress, aws: Any, plan: AwsPlan, pre: Preflight
    ):
        self.state, self.store, self.progress, self.aws, self.plan, self.pre = state, store, progress, aws, plan, pre

    def step(self, res: Resource, create: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return record_step(self.state, self.store, self.progress, res, create)

    def run(self) -> None:
        plan, aws, state = self.plan, self.aws, self.state
        cluster_dir = Path(plan.cluster_dir)

        def make_dir() -> dict[str, Any]:
            cluster_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            return {}

        self.step(_only(state, "dir"), make_dir)
        public_key = self.step(
            _only(state, "key-file"), lambda: {"public_key": keys.ensure_key(Path(plan.key_path), plan.unique_name)}
        )["public_key"]
        zone = self.pre.zones[0]
        if plan.new_network:
            vpc_id = self.step(
                _only(state, "vpc"), lambda: {"aws_id": aws.create_vpc(VPC_CIDR, plan.tag_specs("vpc", "vpc"))}
            )["aws_id"]
            igw = self.step(
                _only(state, "internet-gateway"),
                lambda: {
                    "aws_id": aws.create_internet_gateway(vpc_id, plan.tag_specs("igw", "internet-gateway")),
                    "vpc": vpc_id,
                },
            )["aws_id"]
            self.step(_only(state, "route"), lambda: {"route_table": aws.add_default_route(vpc_id, igw)})
            subnet_id = self.new_subnet(_only(state, "subnet"), vpc_id, zone)
        else:
            vpc_id, subnet_id = self.pre.vpc_id, plan.subnet_id
        sg = state.resource("security-group", plan.unique_name)

        def make_group() -> dict[str, Any]:
            gid = aws.create_security_group(
                plan.unique_name, vpc_id, plan.cluster_id, plan.tag_specs("sg", "security-group")
            )
            aws.authorize_ingress(
                gid, ingress_rules(self.pre.ssh_cidr, gid), plan.tag_specs("sg-rule", "security-group-rule")
            )
            return {"aws_id": gid, "vpc": vpc_id}

        group_id = self.step(sg, make_group)["aws_id"]
        self.progress(f"security group {group_id}: SSH from {self.pre.ssh_cidr} only, all traffic between the nodes")
        self.step(
            state.resource("key-pair", plan.unique_name),
            lambda: {
                "aws_id": aws.import_key_pair(
                    plan.unique_name, public_key, plan.cluster_id, plan.tag_specs("key", "key-pair")
                )
            },
        )
        placement = self.placement_group()
        ids = self.launch(subnet_id, group_id, placement)
        self.finish(ids)

    def new_subnet(self, res: Resource, vpc_id: str, zone: str) -> str:
        res.detail["az"] = zone
        self.store.save(self.state)  # the zone is part of the record before the call
        index = int(res.id.rsplit("-", 1)[1])
        return self.step(
            res,
            lambda: {
                "aws_id": self.aws.create_subnet(
                    vpc_id, subnet_cidr(index), zone, self.plan.tag_specs("subnet", "subnet")
                )
            },
        )["aws_id"]

    def placement_group(self) -> str | None:
        if not self.plan.placement_group:
            return None
        res = self.state.resource("placement-group", self.plan.unique_name)
        faults.point("before", res.kind)
        made = self.aws.create_placement_group(self.plan.unique_name, self.plan.tag_specs("pg", "placement-group"))
        faults.point("after", res.kind)
        if made is None:
            res.status = "skipped"
            res.detail["reason"] = "this EC2 endpoint does not support placement groups"
            self.store.save(self.state)
            self.progress("warning: this EC2 endpoint does not support placement groups: launching without one")
            return None
        res.status = "created"
        self.store.save(self.state)
        return self.plan.unique_name

    def launch(self, subnet_id: str, group_id: str, placement: str | None) -> list[str]:
        from .ec2 import CapacityError

        plan, aws, state = self.plan, self.aws, self.state
        inst = _only(state, "instances")
        tried: list[str] = []
        for n, zone in enumerate(self.pre.zones):
            if n > 0:
                if not plan.new_network:
                    break
                res = Resource("subnet", f"{plan.base_name}-subnet-{n}", detail={"cidr": subnet_cidr(n), "az": zone})
                state.resources.insert(state.resources.index(inst), res)
                subnet_id = self.new_subnet(res, _only_created(state, "vpc").detail["aws_id"], zone)
            existing = [
                i["InstanceId"] for i in aws.alive_instances(plan.cluster) if _tag(i, TAG_CLUSTER_ID) == plan.cluster_id
            ]
            count = plan.count - len(existing)  # reconcile: a retried up launches only what is missing
            token = client_token(plan.cluster_id, zone, count)
            inst.detail.update({"az": zone, "client_token": token, "ids": existing})
            if count <= 0:
                inst.status = "created"
                self.store.save(state)
                return existing
            self.store.save(state)
            request = run_instances_request(
                plan,
                ami=self.pre.ami,
                root_device=self.pre.root_device,
                subnet_id=subnet_id,
                group_id=group_id,
                key_name=plan.unique_name,
                az=zone,
                count=count,
                placement_group=placement,
                client_token=token,
            )
            self.progress(f"launching {count} x {plan.instance_type} in {zone}" + (" (spot)" if plan.spot else ""))
            faults.point("before", "instances")
            try:
                launched = aws.run_instances(request, zone, lambda: self.pre.quota)
            except CapacityError as exc:
                tried.append(zone)
                more = n + 1 < len(self.pre.zones) and plan.new_network
                self.progress(f"no capacity in {zone} ({exc}){': trying the next zone' if more else ''}")
                continue
            faults.point("after", "instances")
            inst.detail["ids"] = existing + [i["InstanceId"] for i in launched]
            inst.status = "created"
            self.store.save(state)
            return inst.detail["ids"]
        if plan.subnet_id:
            hint = f"the zone of --subnet-id {plan.subnet_id}: try later, or give a subnet in another zone"
        elif plan.az:
            hint = f"--az {plan.az}: try later, or leave --az out to try the region's other zones"
        else:
            hint = f"every zone of {plan.region} tried: try later, fewer --nodes, another --region or --instance-type"
        raise DdpctlError(f"no capacity for {plan.count} x {plan.instance_type} in {', '.join(tried)} ({hint})")

    def finish(self, ids: list[str]) -> None:
        from .ec2 import RUNNING_TIMEOUT_S

        plan, aws, state = self.plan, self.aws, self.state
        aws.wait(
            "instance_running", ids, self.progress, f"starting {len(ids)} x {plan.instance_type}", RUNNING_TIMEOUT_S
        )
        described = sorted(
            aws.instances_by_id(ids), key=lambda i: (str(i.get("LaunchTime", "")), i.get("AmiLaunchIndex", 0))
        )
        launched = [
            configure.Launched(
                name=f"node{k}",
                instance_id=i["InstanceId"],
                private_ip=i.get("PrivateIpAddress", ""),
                public_ip=i.get("PublicIpAddress", ""),
                zone=i.get("Placement", {}).get("AvailabilityZone", ""),
            )
            for k, i in enumerate(described)
        ]
        cluster_dir = Path(plan.cluster_dir)
        # whether or not site.yml runs now (ssh, ansible-playbook and `ddpctl configure` need them too);
        # with --no-configure, what the consoles hold now: `ddpctl configure` waits for the rest
        host_keys = configure.collect_host_keys(launched, aws.console_output, self.progress, wait=plan.configure)
        if len(host_keys) < len(launched):
            missing = ", ".join(n.name for n in launched if n.name not in host_keys)
            self.progress(
                f"the host keys of {missing} are not in the console output yet: `ddpctl configure` collects them"
            )
        files = configure.write_files(
            cluster_dir,
            launched,
            user=plan.ssh_user,
            key_path=plan.key_path,
            private=plan.private_ip,
            host_keys=host_keys,
        )
        hosts = [
            configure.ssh_host(n, files, user=plan.ssh_user, key_path=plan.key_path, private=plan.private_ip)
            for n in launched
        ]
        state.nodes = configure.node_infos(launched, hosts, cpus=self.pre.facts.vcpus, gpus=self.pre.facts.gpus)
        _only(state, "instances").detail["nodes"] = {n.name: n.instance_id for n in launched}
        self.store.save(state)
        if plan.configure:
            state.status = "configuring"  # an interruption from here on can be finished with `ddpctl configure`
            self.store.save(state)

            def configure_nodes() -> dict[str, Any]:
                cpus = configure.wait_for_ssh(hosts, self.progress)
                report = run_site(
                    str(files.inventory), state.nodes, cluster_dir / "keys", self.progress, state.spec.playbook_vars
                )
                state.nodes = record_nodes(state.nodes, report, cpus)
                return {"inventory": str(files.inventory)}

            self.step(_only(state, "configure"), configure_nodes)
        else:
            command = site_command(str(files.inventory), state.nodes, cluster_dir / "keys", state.spec.playbook_vars)
            self.progress(
                f"skipping configuration (--no-configure): the nodes are not prepared for jobs; configure them "
                f"with `ddpctl configure --name {plan.cluster}`, or by hand with: {command}"
            )
        state.status = "up"
        self.store.save(state)
        where = ", ".join(sorted({n.zone for n in launched}))
        self.progress(
            f"aws cluster {plan.cluster!r} is up: {len(launched)} x {plan.instance_type} in {where}, "
            f"{pricing.format_usd(plan.hourly_usd)} until `ddpctl down --name {plan.cluster}`"
        )


def record_step(
    state: ClusterState, store: StateStore, progress: Progress, res: Resource, create: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Create one planned resource (already in the saved state as planned) and record what was made."""
    faults.point("before", res.kind)
    detail = create()
    faults.point("after", res.kind)  # made in AWS, not yet in the state: down finds it by tag
    res.detail.update(detail)
    res.status = "created"
    store.save(state)
    if "aws_id" in detail:
        progress(f"created {res.kind} {detail['aws_id']}")
    return res.detail


def delete_in_order(aws: Any, steps: list[tuple[str, str, list[str] | None]], state: ClusterState) -> list[str]:
    """Delete each (kind, id, VPCs) in order, marking the state's record deleted; return the problems."""
    from .ec2 import aws_exceptions, explain, is_unsupported

    problems = []
    for kind, ident, vpcs in steps:
        try:
            aws.delete(kind, ident, vpcs)
        except DdpctlError as exc:
            problems.append(f"{kind} {ident}: {exc}")
        except Exception as exc:
            if kind == "placement-group" and is_unsupported(exc):
                continue  # this endpoint has no placement groups (none was made)
            if not isinstance(exc, aws_exceptions()):
                raise
            problems.append(f"{kind} {ident}: {explain(exc, aws.region)}")
        else:
            for res in state.resources:
                if res.kind == kind and ident in (res.id, res.detail.get("aws_id")):
                    res.status = "deleted"
    return problems


def _only(state: ClusterState, kind: str) -> Resource:
    return next(r for r in state.resources if r.kind == kind)


def _only_created(state: ClusterState, kind: str) -> Resource:
    return next(r for r in state.resources if r.kind == kind and r.status == "created")


def _tag(resource: dict[str, Any], key: str) -> str:
    return next((t["Value"] for t in resource.get("Tags", []) if t["Key"] == key), "")


def _throwaway_public_key() -> bytes:
    """A fresh public key for ImportKeyPair's dry run (its private half is never kept)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )


PROVIDER = AwsProvider()
