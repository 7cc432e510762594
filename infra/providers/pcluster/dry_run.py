"""``up --dry-run`` of the ParallelCluster provider: the configuration checked offline by
aws-parallelcluster's schema, then ``pcluster create-cluster --dryrun true`` against the given
subnet, or a default-VPC subnet standing in for the one ``up`` would make. Creates nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..aws import network
from ..aws.ec2 import Aws
from ..aws.errors import aws_errors
from . import schema
from .cli import find_pcluster, opened
from .config import PLACEHOLDER_SUBNET, Resolved, to_yaml
from .plan import PclusterPlan

#: --dry-run without --ssh-cidr: a documentation address stands in for yours (looked up at `up`).
DRY_RUN_CIDR = "192.0.2.1/32"


@dataclass
class DryRunReport:
    plan: PclusterPlan
    config: dict[str, Any]
    lines: list[str]
    checks: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "config": self.config, "checks": self.checks, "lines": self.lines}


def dry_run_report(env: Mapping[str, str], plan: PclusterPlan) -> DryRunReport:
    """The offline schema check, then ``create-cluster --dryrun true``."""
    install = find_pcluster(env)
    checks: dict[str, str] = {}
    with aws_errors(plan.region):
        aws = Aws(plan.region)
        if plan.aws.subnet_id:
            subnet, where = network.check_subnet(aws, plan.aws)["SubnetId"], f"--subnet-id {plan.aws.subnet_id}"
        else:
            zone = network.pick_zone(aws, plan.aws, plan.settings.head_instance_type)
            subnet = network.stand_in_subnet(aws, zone)
            where = f"the default VPC's subnet {subnet} standing in for the new one" if subnet else ""
    resolved = Resolved(
        subnet_id=subnet or PLACEHOLDER_SUBNET,
        key_name=plan.aws.key_pair_name,
        ssh_cidr=plan.aws.ssh_cidr or DRY_RUN_CIDR,
    )
    config = plan.config(resolved)
    text = to_yaml(config)
    verdict = schema.validate(text, plan.pcluster_name, install)
    checks["schema"] = f"ok (aws-parallelcluster {verdict.version})"
    warnings: tuple[str, ...] = ()
    with opened(install, plan.region, env) as cli:
        existing = cli.describe(plan.pcluster_name)
        checks["name"] = (
            "ok" if existing is None else f"would fail: {plan.pcluster_name} already exists ({existing.status})"
        )
        if subnet:
            path = cli.log_file.with_name("cluster-config.yaml")
            path.write_text(text)
            # The key pair is imported only at `up`: its validator cannot pass yet.
            suppress = (*plan.settings.suppress_validators, "type:KeyPairValidator")
            result = cli.create(plan.pcluster_name, path, dryrun=True, suppress=suppress)
            checks["create-cluster --dryrun"] = "ok" if result.ok else f"would fail: {result.message}"
            warnings = result.warnings
        else:
            checks["create-cluster --dryrun"] = "skipped: no default VPC subnet to stand in for the new network"
    lines = [f"Would create pcluster cluster {plan.cluster!r} in {plan.region} ({plan.aws.count} compute node(s)):"]
    lines += plan.describe()
    if where:
        lines.append(f"  dry run against {where}")
    lines.append(f"  configuration ({plan.config_path} at `up`; subnet and key filled in then):")
    lines += [f"    {line}" for line in text.splitlines() if not line.startswith("#")]
    lines += [f"  check {name}: {result}" for name, result in checks.items()]
    lines += [f"  warning: {w}" for w in warnings]
    lines.append("Nothing was created.")
    return DryRunReport(plan=plan, config=config, lines=lines, checks=checks)
