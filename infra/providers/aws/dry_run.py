"""``up --dry-run`` of the aws provider: every check ``up`` makes (``preflight.py``), then each
create call with DryRun=True, which EC2 answers without creating anything; what it found, as lines
and as a document for ``--json``. Creates nothing. With no AWS credentials (before having an
account), the plan alone: type, image choice, driver plan and cost from ddpctl's tables, and what
could not be checked. The cost is AWS's where it answers (the Price List API, or the spot price
history with --spot, for the plan's region), else ddpctl's dated table's, and the line says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import boto, keys, preflight, prices, pricing
from .ec2 import Aws
from .ec2_requests import client_token, run_instances_request
from .errors import aws_errors
from .options import ssh_cidr_warnings
from .plan import VPC_CIDR, AwsPlan


@dataclass
class DryRunReport:
    plan: AwsPlan
    lines: list[str]
    checks: dict[str, str]
    image: dict[str, str] = field(default_factory=dict)  # the AMI found, why, and the GPU driver plan
    not_checked: list[str] = field(default_factory=list)  # what needs AWS credentials to check
    #: a node's price per hour and where it came from (``prices.Price``), and that in words
    price: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan.to_dict(),
            "checks": self.checks,
            "lines": self.lines,
            "image": self.image,
            "not_checked": self.not_checked,
            "price": self.price,
        }


def priced(plan: AwsPlan, price: prices.Price) -> tuple[float | None, str]:
    """A node's price per hour and where it comes from, in words, for ``AwsPlan.describe``."""
    text = prices.source_text(price, instance_type=plan.instance_type, region=plan.region, spot=plan.spot)
    return price.usd_per_hour, text


def price_doc(plan: AwsPlan, price: prices.Price) -> dict[str, Any]:
    """The price as ``--json`` shows it: a node's, its source, region and market, and in words."""
    return {
        **price.to_dict(),
        "region": plan.region,
        "market": "spot" if plan.spot else "on-demand",
        "text": priced(plan, price)[1],
    }


#: The create calls a dry run makes with DryRun=True (those that apply to the plan).
def dry_run_calls(plan: AwsPlan) -> list[str]:
    calls = ["CreateVpc", "CreateInternetGateway"] if plan.new_network else []
    calls += ["CreateSecurityGroup", "ImportKeyPair"]
    calls += ["CreatePlacementGroup"] if plan.placement_group else []
    return [*calls, "RunInstances"]


NO_CREDENTIALS = "no AWS credentials found"


def dry_run_report(plan: AwsPlan) -> DryRunReport:
    """Every check ``up`` makes, and each create call with DryRun=True; the plan alone where there
    are no credentials to ask AWS with. Long because it asks AWS each thing `up` would, in the order the
    report prints them."""
    if not boto.credentials_found(plan.region):
        return offline_report(plan)
    with aws_errors(plan.region):
        aws = Aws(plan.region)
        pre = preflight.check(aws, plan, caller_address=None)
        plan = replace(plan, efa_interfaces=pre.facts.efa_interfaces)  # what EC2 says the type takes
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
            PublicKeyMaterial=keys.throwaway_public_key(),
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
            client_token=client_token(plan.cluster_id, pre.zones[0], plan.count),
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
    # as `up` asks: AWS's price for the plan's region and market, else the table's, saying why
    price = prices.hourly(plan.instance_type, plan.region, spot_market=plan.spot)
    lines = [f"Would create aws cluster {plan.cluster!r} in {plan.region} ({plan.count} node(s)):"]
    lines += plan.describe(priced(plan, price))
    lines += [
        f"  AMI found: {pre.ami} {pre.ami_name!r} ({pre.ami_source}); root device {pre.root_device}",
        f"  instance type: {pre.facts.vcpus} vCPUs, {pre.facts.gpus} GPU(s), {pre.facts.arch}"
        + ("" if pre.described else f" ({plan.instance_type} as ddpctl's table has it: EC2 did not describe it)"),
        f"  zones to try, in order: {', '.join(pre.zones)}",
    ]
    lines += [f"  warning: {w}" for w in pre.warnings]
    lines += [f"  DryRun {op}: {result}" for op, result in checks.items()]
    lines.append("Nothing was created.")
    image = {"ami": pre.ami, "name": pre.ami_name, "found_by": pre.ami_source, **plan.image.to_dict()}
    return DryRunReport(plan=plan, lines=lines, checks=checks, image=image, price=price_doc(plan, price))


def offline_report(plan: AwsPlan) -> DryRunReport:
    """What can be said with no AWS credentials: the plan from ddpctl's own tables, and what is left
    for AWS to say. No AWS call is made."""
    facts = pricing.TYPES.get(plan.instance_type)
    quota = pricing.vcpu_quota(plan.instance_type, plan.spot)
    need = f"{plan.count} x {facts.vcpus} = {facts.vcpus * plan.count} vCPUs" if facts else "its vCPUs"
    calls = dry_run_calls(plan)
    not_checked = [
        f"the instance type {plan.instance_type} in {plan.region} and the zones that offer it",
        f"the image: {plan.image.source.label if plan.image.source else plan.ami} in {plan.region} (its AMI id)",
        f"vCPU quota {quota.code} ({quota.name}) in {plan.region}: this cluster needs {need}",
        f"the EC2 DryRun calls: {', '.join(calls)} (your permissions)",
        f"the {'spot' if plan.spot else 'on-demand'} price of {plan.instance_type} in {plan.region} "
        f"({'EC2 spot price history' if plan.spot else 'the AWS Price List API'})",
    ]
    if plan.subnet_id:
        not_checked.append(f"subnet {plan.subnet_id}")
    for profile in (plan.iam_instance_profile, plan.head_instance_profile):
        if profile:
            not_checked.append(f"IAM instance profile {profile}")
    price = prices.table_price(plan.instance_type, f"{NO_CREDENTIALS}: AWS's own prices were not asked")
    lines = [f"Would create aws cluster {plan.cluster!r} in {plan.region} ({plan.count} node(s)):"]
    lines += plan.describe(priced(plan, price))
    if facts:
        lines.append(f"  instance type: {facts.vcpus} vCPUs, {facts.gpus} GPU(s), {facts.arch} (ddpctl's table)")
    lines += [f"  warning: {w}" for w in ssh_cidr_warnings(plan.ssh_cidr, plan.private_ip)]
    lines.append(
        f"Not checked ({NO_CREDENTIALS}: `aws configure` or `aws sso login`, or set AWS_PROFILE; "
        "then this dry run asks AWS):"
    )
    lines += [f"  {what}" for what in not_checked]
    lines.append("Nothing was created.")
    checks = {call: f"not checked: {NO_CREDENTIALS}" for call in calls}
    return DryRunReport(
        plan=plan,
        lines=lines,
        checks=checks,
        image=plan.image.to_dict(),
        not_checked=not_checked,
        price=price_doc(plan, price),
    )
