"""The aws provider's ``up`` once its checks passed: the creation sequence, each step recorded in
the state before its AWS call and marked after (``steps.Steps``): the cluster's directory and key,
the key pair that holds the cluster's name in the region (``claim``, first: where another state
home holds the name, nothing is left of this ``up``), the network (``network.py``), the security
group, the placement group, the instances
(zone after zone while EC2 has no capacity, each new zone with a subnet of its own), then the
SSH files from their console output and playbooks/site.yml on them (``configure.py``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...hosts.site_play import record_nodes, run_site, site_command
from ...model.errors import DdpctlError
from ...model.progress import Progress
from ...model.state import ClusterPhase, ClusterState, ResourcePhase
from ...model.store import StateStore
from . import configure, faults, instances, network, pricing
from .details import (
    ConfigureDetail,
    InstancesDetail,
    PlacementGroupDetail,
    SecurityGroupDetail,
    SubnetDetail,
    VpcDetail,
)
from .ec2 import Aws, tag_of
from .ec2_requests import client_token, egress_rules, ingress_rules, run_instances_request
from .errors import CapacityError
from .plan import TAG_CLUSTER_ID, AwsPlan, subnet_cidr
from .preflight import Preflight
from .steps import Steps, only, only_created


class Up(Steps):
    """One ``up``: each step recorded before its AWS call and marked after it."""

    def __init__(
        self, state: ClusterState, store: StateStore, progress: Progress, aws: Aws, plan: AwsPlan, pre: Preflight
    ) -> None:
        super().__init__(state, store, progress)
        self.aws, self.plan, self.pre = aws, plan, pre

    def claim(self) -> None:
        """The directory, the key and the key pair that holds the cluster's name in the region
        (``network.claim_name``: where another cluster holds it, nothing is left of this ``up``)."""
        network.claim_name(self, self.aws, self.plan)

    def run(self) -> str:
        """Everything after ``claim``; returns the line that says the cluster is up."""
        plan, aws, state = self.plan, self.aws, self.state
        if plan.new_network:
            vpc_id, subnet_id = network.create_network(self, aws, plan, self.pre.zones[0])
        else:
            vpc_id, subnet_id = self.pre.vpc_id, plan.subnet_id

        group = state.resource("security-group", plan.unique_name)

        def make_group() -> SecurityGroupDetail:
            gid = instances.create_security_group(
                aws, plan.unique_name, vpc_id, plan.cluster_id, plan.tag_specs("sg", "security-group")
            )
            instances.authorize_ingress(
                aws, gid, ingress_rules(self.pre.ssh_cidr, gid), plan.tag_specs("sg-rule", "security-group-rule")
            )
            instances.authorize_egress(
                aws, gid, egress_rules(plan, gid), plan.tag_specs("sg-rule", "security-group-rule")
            )
            return replace(SecurityGroupDetail.of(group), aws_id=gid, vpc=vpc_id)

        group_id = self.step(group, make_group).aws_id
        self.progress(
            f"security group {group_id}: SSH from {self.pre.ssh_cidr} only, all traffic between the nodes"
            + (" (in and out, for EFA)" if plan.efa_attached else "")
        )
        placement = self.placement_group()
        ids = self.launch(subnet_id, group_id, placement)
        return self.finish(ids)

    def placement_group(self) -> str | None:
        if not self.plan.placement_group:
            return None
        res = self.state.resource("placement-group", self.plan.unique_name)
        faults.point("before", res.kind)
        made = instances.create_placement_group(
            self.aws, self.plan.unique_name, self.plan.tag_specs("pg", "placement-group")
        )
        faults.point("after", res.kind)
        if made is None:
            res.status = ResourcePhase.SKIPPED
            replace(PlacementGroupDetail.of(res), reason="this EC2 endpoint does not support placement groups").put(res)
            self.save()
            self.progress("warning: this EC2 endpoint does not support placement groups: launching without one")
            return None
        res.status = ResourcePhase.CREATED
        self.save()
        return self.plan.unique_name

    def launch(self, subnet_id: str, group_id: str, placement: str | None) -> list[str]:
        """Long because it walks the zones in order, each attempt with its own refusal to read (capacity, quota,
        an unsupported zone)."""
        plan, aws, state = self.plan, self.aws, self.state
        inst = only(state, "instances")
        tried: list[str] = []
        for n, zone in enumerate(self.pre.zones):
            if n > 0:
                if not plan.new_network:
                    break
                res = SubnetDetail(cidr=subnet_cidr(n), az=zone).resource(f"{plan.base_name}-subnet-{n}")
                state.resources.insert(state.resources.index(inst), res)
                vpc = VpcDetail.of(only_created(state, "vpc")).aws_id
                subnet_id = network.add_subnet(self, aws, plan, res, vpc, zone)
            existing = [
                i["InstanceId"]
                for i in aws.alive_instances(plan.cluster)
                if tag_of(i, TAG_CLUSTER_ID) == plan.cluster_id
            ]
            count = plan.count - len(existing)  # reconcile: a retried up launches only what is missing
            token = client_token(plan.cluster_id, zone, count)
            replace(InstancesDetail.of(inst), az=zone, client_token=token, ids=tuple(existing)).put(inst)
            if count <= 0:
                inst.status = ResourcePhase.CREATED
                self.save()
                return existing
            self.save()
            request = run_instances_request(
                plan,
                ami=self.pre.ami,
                root_device=self.pre.root_device,
                subnet_id=subnet_id,
                group_id=group_id,
                key_name=plan.key_pair_name,
                az=zone,
                count=count,
                placement_group=placement,
                client_token=token,
            )
            efa = f", {plan.efa_attached} EFA interface(s) each" if plan.efa_attached else ""
            self.progress(
                f"launching {count} x {plan.instance_type} in {zone}" + (" (spot)" if plan.spot else "") + efa
            )
            faults.point("before", "instances")
            try:
                launched = instances.run_instances(aws, request, zone, lambda: self.pre.quota)
            except CapacityError as exc:
                tried.append(zone)
                more = n + 1 < len(self.pre.zones) and plan.new_network
                self.progress(f"no capacity in {zone} ({exc}){': trying the next zone' if more else ''}")
                continue
            faults.point("after", "instances")
            ids = existing + [i["InstanceId"] for i in launched]
            replace(InstancesDetail.of(inst), ids=tuple(ids)).put(inst)
            inst.status = ResourcePhase.CREATED
            self.save()
            return ids
        if plan.subnet_id:
            hint = f"the zone of --subnet-id {plan.subnet_id}: try later, or give a subnet in another zone"
        elif plan.az:
            hint = f"--az {plan.az}: try later, or leave --az out to try the region's other zones"
        else:
            hint = f"every zone of {plan.region} tried: try later, fewer --nodes, another --region or --instance-type"
        raise DdpctlError(f"no capacity for {plan.count} x {plan.instance_type} in {', '.join(tried)} ({hint})")

    def finish(self, ids: list[str]) -> str:
        """Long because it is EC2's steps after the launch in order (running, status checks, addresses, the nodes
        recorded), each with its wait."""
        plan, aws, state = self.plan, self.aws, self.state
        instances.wait(
            aws,
            "instance_running",
            ids,
            self.progress,
            f"starting {len(ids)} x {plan.instance_type}",
            instances.RUNNING_TIMEOUT_S,
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
        files = configure.cluster_files(plan, launched, host_keys)
        hosts = [configure.cluster_host(plan, n, files) for n in launched]
        state.nodes = configure.node_infos(launched, hosts, cpus=self.pre.facts.vcpus, gpus=self.pre.facts.gpus)
        inst = only(state, "instances")
        replace(InstancesDetail.of(inst), nodes={n.name: n.instance_id for n in launched}).put(inst)
        self.save()
        if plan.head_instance_profile:
            instances.give_head_profile(aws, launched[0].instance_id, plan.head_instance_profile, self.progress)
        if plan.configure:
            state.status = ClusterPhase.CONFIGURING  # an interruption from here on: `ddpctl configure` finishes it
            self.save()

            step = only(state, "configure")

            def configure_nodes() -> ConfigureDetail:
                cpus = configure.wait_for_ssh(hosts, self.progress)
                report = run_site(
                    str(files.inventory), state.nodes, cluster_dir / "keys", self.progress, state.spec.playbook_vars
                )
                state.nodes = record_nodes(state.nodes, report, cpus)
                return replace(ConfigureDetail.of(step), inventory=str(files.inventory))

            self.step(step, configure_nodes)
        else:
            command = site_command(str(files.inventory), state.nodes, cluster_dir / "keys", state.spec.playbook_vars)
            self.progress(
                f"skipping configuration (--no-configure): the nodes are not prepared for jobs; configure them "
                f"with `ddpctl configure --name {plan.cluster}`, or by hand with: {command}"
            )
        where = ", ".join(sorted({n.zone for n in launched}))
        return (
            f"aws cluster {plan.cluster!r} is up: {len(launched)} x {plan.instance_type} in {where}, "
            f"{self.pre.cost or pricing.format_usd(plan.hourly_usd)} until `ddpctl down --name {plan.cluster}`"
        )
