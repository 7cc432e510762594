"""``up --dry-run`` of the aws provider: every check ``up`` makes (``preflight.py``), then each
create call with DryRun=True, which EC2 answers without creating anything; what it found, as lines
and as a document for ``--json``. Creates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import keys, preflight
from .ec2 import Aws
from .ec2_requests import client_token, run_instances_request
from .errors import aws_errors
from .plan import VPC_CIDR, AwsPlan


@dataclass
class DryRunReport:
    plan: AwsPlan
    lines: list[str]
    checks: dict[str, str]
    image: dict[str, str] = field(default_factory=dict)  # the AMI found, why, and the GPU driver plan

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "checks": self.checks, "lines": self.lines, "image": self.image}


def dry_run_report(plan: AwsPlan) -> DryRunReport:
    """Every check ``up`` makes, and each create call with DryRun=True."""
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
    lines = [f"Would create aws cluster {plan.cluster!r} in {plan.region} ({plan.count} node(s)):"]
    lines += plan.describe()
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
    return DryRunReport(plan=plan, lines=lines, checks=checks, image=image)
