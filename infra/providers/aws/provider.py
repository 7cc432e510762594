"""The AWS provider: EC2 instances with a network, security group, key pair and placement group.

``up`` checks everything it can before recording anything (``preflight.py``: credentials, region,
instance type, AMI, zones, the vCPU quota, leftovers of a lost cluster of the same name), then
records the plan and creates resource by resource (``up.py``), each recorded as ``planned`` before
its AWS call and ``created`` (with its id) after. Every AWS resource is tagged at creation
(``ddpctl:cluster``, ``ddpctl:cluster-id``, ``ddpctl:created-by``, ``ddpctl:home``, ``Name``), so
``down`` finds what a crash left between an AWS call and the state write, and ``down --name X
--region R`` cleans up after a lost state file. Only resources that carry ddpctl's tags are ever
deleted (a given VPC/subnet is not), and of those only the state home's own (``ddpctl:home``,
``Tagged.owned_by``): a cluster of the same name from another state home is named in one line and
left alone. The key pair, named for the cluster alone, is the first thing made in AWS: it holds
the name in the region, so of two homes' ``up`` of one name only one gets past it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...hosts import autodown
from ...hosts.ansible import Play, PlayReport
from ...hosts.site_play import reconfigure
from ...launch.ssh_executor import SshExecutor
from ...launch.supervise import OutputLine
from ...model.errors import DdpctlError, UsageError
from ...model.spec import ClusterSpec
from ...model.state import ClusterPhase, ClusterState, NodeInfo, ResourcePhase
from ...model.store import StateStore
from ..base import LiveStatus, Progress, Provider, TakenDown
from ..registry import checked_spec
from . import configure, head_home, instances, kept_head, keys, network, preflight, prices, pricing, spot
from .defaults import lookup_caller_address, with_defaults
from .details import InstancesDetail, SecurityGroupDetail
from .dry_run import DryRunReport, dry_run_report
from .ec2 import Aws, foreign_note, tag_of
from .errors import HEAD_POLICY_DOC, POLICY_DOC, aws_errors
from .options import DEFAULT_REGION, OPTIONS, check_ssh_family
from .plan import SPOT_NOTE, TAG_CLUSTER, TAG_CLUSTER_ID, TAG_HOME, AwsPlan, base_name, plan_from_spec
from .spot_plan import launched_nodes
from .steps import only
from .up import Up


def check_autodown_nodes(spec: ClusterSpec, idle_s: int) -> None:
    """Autodown (``up --autodown``, ``ddpctl autodown``) only on configured nodes: the head node shuts
    the others down over the cluster's SSH mesh, which ``--no-configure``'s nodes do not have yet
    (``ddpctl configure`` makes it)."""
    if idle_s and not with_defaults(spec).options["configure"]:
        raise UsageError(
            "--autodown needs configured nodes (the head node shuts the others down over the cluster's SSH "
            f"mesh): drop --no-configure, or run `ddpctl configure --name {spec.name}` first and then "
            f"`ddpctl autodown {spec.name} {autodown.flag_text(idle_s)}`"
        )


class AwsProvider(Provider):
    name = "aws"
    runs_playbooks = True
    billed = True
    head_supervises = True
    disks_go_with_down = True
    options = OPTIONS
    autodown = True  # instances terminate when they shut down, but the head, which stops (kept_head.py)

    def __init__(self, caller_address: Callable[[], str] = lookup_caller_address) -> None:
        self.caller_address = caller_address

    # ---- plan (pure) ---------------------------------------------------------------------

    def hourly_cost(self, spec: ClusterSpec) -> float | None:
        """AWS's price (the Price List API, spot history for --spot), else ddpctl's dated table."""
        spec = with_defaults(spec)
        o = spec.options
        price = prices.hourly(o["instance_type"], o["region"], spot_market=o["spot"]).usd_per_hour
        return None if price is None else round(price * spec.nodes, 4)

    def check_up(self, spec: ClusterSpec) -> None:
        check_ssh_family(spec.options)  # an IPv6 --ssh-cidr into ddpctl's own VPC, which has none
        check_autodown_nodes(spec, spec.autodown_s)

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        spec = with_defaults(spec)
        cluster_id = uuid.uuid4().hex[:12]
        plan = plan_from_spec(spec, cluster_id, str(store.cluster_dir(spec.name)), store.home_id())
        _ = plan.image  # a type no image fits (p2 without --ami): refused here, before `up` asks or calls AWS
        facts = pricing.TYPES.get(spec.options["instance_type"])
        nodes = [
            NodeInfo(
                name=f"node{i}", host="", workdir="", cpus=facts.vcpus if facts else 1, gpus=facts.gpus if facts else 0
            )
            for i in range(spec.nodes)
        ]
        return ClusterState(
            spec=spec,
            cluster_id=cluster_id,
            status=ClusterPhase.PLANNED,
            nodes=nodes,
            resources=plan.resources(),
            ephemeral=ephemeral,
        )

    @staticmethod
    def aws_plan(state: ClusterState, store: StateStore) -> AwsPlan:
        return plan_from_spec(state.spec, state.cluster_id, str(store.cluster_dir(state.name)), store.home_id())

    def preflight(self, state: ClusterState) -> None:
        """site.yml verified every node's Python environment at `up`; a cluster that took itself down
        (autodown) is said so, not taken for nodes that do not answer."""
        taken = self.took_itself_down(state) if state.spec.autodown_s else None
        if taken:
            kept = f"; {state.nodes[0].name} is stopped with the runs' outputs on its disk" if taken.kept_head else ""
            raise DdpctlError(
                f"cluster {state.name!r} took itself down (autodown after {autodown.text(state.spec.autodown_s)} "
                f"idle){kept}: `ddpctl down --name {state.name}` {'copies them here and ' if kept else ''}deletes "
                "what is left; then `ddpctl up` a new one"
            )

    def dry_run(self, state: ClusterState, store: StateStore, progress: Progress) -> DryRunReport:
        """Every check ``up`` makes, and each create call with DryRun=True. Creates nothing."""
        return dry_run_report(self.aws_plan(state, store))

    # ---- up ------------------------------------------------------------------------------------

    def ready(self, state: ClusterState, store: StateStore, progress: Progress) -> Callable[[], str]:
        plan = self.aws_plan(state, store)
        with aws_errors(plan.region):
            aws = Aws(plan.region)
            pre = preflight.check(aws, plan, self.caller_address)  # nothing recorded or created before this passes
        price = prices.hourly(plan.instance_type, plan.region, spot_market=plan.spot)  # the cost question's (cached)
        pre.cost = prices.cluster_words(
            price, plan.count, instance_type=plan.instance_type, region=plan.region, spot=plan.spot
        )
        # what EC2 says the type takes; the id of this state home, made with its first cluster
        plan = replace(plan, efa_interfaces=pre.facts.efa_interfaces, home_id=store.make_home_id())
        group = state.resource("security-group", plan.unique_name)
        replace(SecurityGroupDetail.of(group), ssh_cidr=pre.ssh_cidr).put(group)
        inst = only(state, "instances")
        replace(InstancesDetail.of(inst), ami=pre.ami, zones=tuple(pre.zones), efa_interfaces=plan.efa_attached).put(
            inst
        )

        def create() -> str:
            with aws_errors(plan.region):
                steps = Up(state, store, progress, aws, plan, pre)
                steps.claim()  # the cluster's name in the region: another home's `up` of it stops here
                for warning in pre.warnings:
                    progress(f"warning: {warning}")
                if plan.spot:
                    progress(SPOT_NOTE)
                progress(
                    f"creating aws cluster {plan.cluster!r}: {plan.count} x {plan.instance_type} in {plan.region}, "
                    f"AMI {pre.ami} ({pre.ami_name or pre.ami_source}), {pre.cost}"
                )
                if pre.image is not None and pre.image.source is not None:
                    progress(f"image: {pre.image.reason}; {pre.image.driver}")
                progress(plan.describe_efa().strip())
                return steps.run()

        return create

    # ---- down ----------------------------------------------------------------------------------

    def delete(self, state: ClusterState, store: StateStore, progress: Progress, *, persisted: bool) -> str:
        name = state.name
        region = state.spec.options["region"] or DEFAULT_REGION
        problems: list[str] = []
        with aws_errors(region):
            aws = Aws(region)
            # what this state home made (or an older ddpctl, while no other home has the name): never
            # another home's cluster of the same name
            found = aws.find_tagged(name).owned_by(store.home_id())
            recorded = [i for r in state.resources if r.kind == "instances" for i in InstancesDetail.of(r).ids]
            alive = found.instances
            if not set(recorded) <= set(alive):
                described = aws.instances_by_id(sorted(set(recorded) | set(alive)))
                alive = [i["InstanceId"] for i in described if i["State"]["Name"] != "terminated"]
            if alive:
                progress(f"terminating {len(alive)} instance(s) of {name!r} in {region}")
                instances.terminate(aws, alive, progress)
                instances.wait(
                    aws, "instance_terminated", alive, progress, "terminating", instances.TERMINATED_TIMEOUT_S
                )
            for res in state.resources:  # dropped only now that EC2 reports them terminated
                if res.kind == "instances":
                    replace(InstancesDetail.of(res), ids=()).put(res)
                    res.status = ResourcePhase.DELETED
            if persisted:
                store.save(state)
            groups = (set(found.placement_groups or []) | network.recorded_names(state, "placement-group")) - set(
                found.foreign
            )
            steps: list[network.Deletion] = [("placement-group", n, None) for n in sorted(groups)]
            security_groups = set(found.security_groups) | network.recorded_ids(state, "security-group")
            steps += [("security-group", g, None) for g in sorted(security_groups)]
            steps += network.deletions(found, state)
            problems += network.delete_in_order(aws, steps, state)
        if problems:
            if persisted:
                store.save(state)
            again = f"ddpctl down --name {name}" + ("" if persisted else f" --region {region}")
            again += f" --home-id {store.acting_for}" if store.acting_for and not persisted else ""
            raise DdpctlError(
                f"could not delete {len(problems)} resource(s) ({'; '.join(problems)}): run `{again}` again"
            )
        keys.remove_key(store.cluster_dir(name) / "id_ed25519")
        made = len(alive) + len(steps)
        others = foreign_note(name, region, found.foreign)
        return f"aws cluster {name!r} is down: {made} resource(s) deleted, nothing of it is left in {region}" + (
            f"; {others}" if others else ""
        )

    def down_lost(self, name: str, region: str, store: StateStore, progress: Progress) -> None:
        """``ddpctl down --name X --region R`` with no state file: everything found by tag."""
        spec = with_defaults(
            checked_spec(ClusterSpec(name=name, provider="aws", options={"region": region}))
        )  # the region as `up` checks it
        stack_name = base_name(name)  # what a ParallelCluster cluster of that name is called
        with aws_errors(region):
            stack = Aws(region).stack_tags(stack_name)
        if (
            stack is not None and stack.get(TAG_CLUSTER) == name and stack.get(TAG_HOME, "") in ("", store.home_id())
        ):  # its network would be in use (another home's is left alone below)
            raise UsageError(
                f"{name!r} in {region} is a ParallelCluster ({stack_name}): run "
                f"`ddpctl down --name {name} --region {region} --provider pcluster`"
            )
        progress(f"no state file for {name!r}: looking for its resources by tag in {region}")
        self.down(ClusterState(spec=spec, cluster_id="", status=ClusterPhase.DELETING), store, progress)

    # ---- status --------------------------------------------------------------------------------

    def status(self, state: ClusterState) -> LiveStatus:
        """What EC2 says runs for the cluster now, and what that costs per hour."""
        o = state.spec.options
        zones = {z for r in state.resources if r.kind == "instances" for z in InstancesDetail.of(r).zones}
        found = prices.hourly(
            o["instance_type"], o["region"], spot_market=o["spot"], zone=next(iter(zones)) if len(zones) == 1 else ""
        )
        price = found.usd_per_hour
        details: dict[str, Any] = {
            "instance_type": state.spec.options["instance_type"],
            "region": state.spec.options["region"],
        }
        error = ""
        try:
            with aws_errors(state.spec.options["region"]):
                alive = [  # this cluster's: not another home's of the same name
                    i
                    for i in Aws(state.spec.options["region"]).alive_instances(state.name)
                    if not state.cluster_id or tag_of(i, TAG_CLUSTER_ID) == state.cluster_id
                ]
        except DdpctlError as exc:
            error = str(exc)
            billed = len(state.nodes) if state.status == ClusterPhase.UP else 0
            summary = error
        else:
            details["instances"] = dict(Counter(i["State"]["Name"] for i in alive))
            billed = sum(1 for i in alive if i["State"]["Name"] in ("pending", "running"))
            summary = "EC2: " + (", ".join(f"{n} {st}" for st, n in sorted(details["instances"].items())) or "none")
            head = kept_head.head_id(state)
            if state.spec.autodown_s and not billed and any(i["InstanceId"] == head for i in alive):
                details["kept_head"] = head  # stopped by autodown, with the runs' outputs
                summary = (
                    f"stopped by autodown: {state.nodes[0].name}'s disk keeps the runs' outputs "
                    f"({kept_head.disk_cost_text(state.spec.options['volume_gb'])}); `ddpctl down` copies them here"
                )
        cost = None if price is None else round(price * billed, 4)
        details["price_source"] = found.source
        return LiveStatus(
            summary=summary,
            billed_instances=billed,
            cost_per_hour_usd=cost,
            error=error,
            details=details,
            price_note=found.note,
        )

    # ---- autodown ------------------------------------------------------------------------------

    def set_autodown(self, state: ClusterState, idle_s: int, progress: Progress) -> None:
        """The program on the head node (``infra/hosts/autodown.py``): the nodes shut themselves down, and
        EC2 terminates them (``InstanceInitiatedShutdownBehavior``), but the head, set to stop so that its
        disk keeps the runs' outputs (``kept_head.py``; not spot's); no AWS credentials go to them."""
        check_autodown_nodes(state.spec, idle_s)  # as `up --no-configure --autodown` is refused
        if not idle_s:
            autodown.remove(state)
            progress(f"autodown of {state.name!r} is off")
            return
        o, head = state.spec.options, state.nodes[0].name
        if not o["spot"]:  # the head stops, its disk with the runs' outputs kept (kept_head.py)
            with aws_errors(o["region"]):
                kept_head.keep_on_shutdown(Aws(o["region"]), state)
        how = autodown.install(state, idle_s)
        where = f"{'a systemd service' if how == 'systemd' else 'a process'} on {head}"
        if o["spot"]:
            progress(
                f"autodown of {state.name!r}: after {autodown.text(idle_s)} without a run its nodes shut down and EC2 "
                f"terminates them, their disks and the runs' outputs on them too (spot instances cannot stop: "
                f"`ddpctl download` what you need before) ({where}); the next `ddpctl status`, `down` or `up` of "
                f"{state.name!r} deletes its network and key pair"
            )
            return
        progress(
            f"autodown of {state.name!r}: after {autodown.text(idle_s)} without a run its nodes shut down: EC2 "
            f"terminates the others and stops {head}, whose disk keeps the runs' outputs "
            f"({kept_head.disk_cost_text(o['volume_gb'])}) until `ddpctl down` copies them here and deletes it ({where})"
        )

    def took_itself_down(self, state: ClusterState) -> TakenDown | None:
        """Autodown was on, and EC2 says every recorded instance is terminated (or gone), but the head,
        which may be stopped with the runs' outputs on its disk (``kept_head.py``)."""
        ids = [i for r in state.resources if r.kind == "instances" for i in InstancesDetail.of(r).ids]
        if not state.spec.autodown_s or state.status != ClusterPhase.UP or not ids:
            return None
        region = state.spec.options["region"] or DEFAULT_REGION
        try:
            with aws_errors(region):
                found = Aws(region).instances_by_id(ids)
        except DdpctlError:
            return None  # not known now: the next command asks again
        return kept_head.taken_down({i["InstanceId"]: i["State"]["Name"] for i in found}, kept_head.head_id(state))

    def start_kept_head(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        plan = self.aws_plan(state, store)
        with aws_errors(plan.region):
            kept_head.start(state, store, plan, progress)

    # ---- configure -----------------------------------------------------------------------------

    def configure(self, state: ClusterState, store: StateStore, progress: Progress, play: Play) -> PlayReport:
        """site.yml again (``ddpctl configure``) through the inventory ``up`` wrote."""
        cluster_dir = store.cluster_dir(state.name)
        inventory = configure.inventory_path(cluster_dir)
        if not inventory.is_file():
            raise DdpctlError(
                f"{inventory} is missing: take the cluster down and up again (`ddpctl down --name {state.name}`)"
            )
        self._collect_missing_host_keys(state, store, progress)
        configure.wait_for_ssh([n.ssh for n in state.nodes], progress)
        report = reconfigure(state, str(inventory), cluster_dir / "keys", progress, play)
        if play.check:
            return report
        for res in state.resources:
            if res.kind == "configure":  # an `up` stopped in its configure step is finished now
                res.status = ResourcePhase.CREATED
        state.status = ClusterPhase.UP
        if play.tags is None or "ssh_mesh" in play.tags.split(","):  # `up --no-configure`'s nodes now have their mesh
            state.spec = replace(state.spec, options={**state.spec.options, "configure": True})
        return report

    def _collect_missing_host_keys(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        """Host keys that `up --no-configure` did not find yet, from the consoles; the SSH files rewritten."""
        plan = self.aws_plan(state, store)
        launched = launched_nodes(state, plan.private_ip, {})  # as recorded
        cluster_dir = store.cluster_dir(state.name)
        if not configure.without_host_keys(cluster_dir / "known_hosts", launched, plan.private_ip):
            return
        with aws_errors(plan.region):
            host_keys = configure.collect_host_keys(launched, Aws(plan.region).console_output, progress)
        configure.cluster_files(plan, launched, host_keys)

    # ---- running jobs --------------------------------------------------------------------------

    def replace_lost_nodes(
        self,
        state: ClusterState,
        store: StateStore,
        nodes: list[str],
        progress: Progress,
        unhealthy: Callable[[str], str] | None = None,
    ) -> ClusterState | None:
        """--spot: the nodes whose instances EC2 took back, or that are unhealthy, each on a new instance
        (``spot.py``); on the head node, from its own state home (``head_home.on_head``), its role's
        policy named where a call is refused."""
        here = not head_home.on_head(store)
        state = state if here else head_home.settle(store, state.name)
        plan = self.aws_plan(state, store)
        if not plan.spot:
            return None
        with aws_errors(plan.region, POLICY_DOC if here else HEAD_POLICY_DOC):
            return spot.replace_lost(state, store, plan, nodes, progress, unhealthy)

    def replaces_lost_nodes(self, state: ClusterState, store: StateStore) -> bool:
        return self.aws_plan(state, store).spot

    def head_replacer(self, state: ClusterState, store: StateStore) -> Callable[[Any, str], list[str]] | None:
        """--spot with --head-instance-profile: the head replaces nodes itself (``head_home.py``)."""
        plan = self.aws_plan(state, store)
        return head_home.replacer(state, store) if plan.spot and plan.head_instance_profile else None

    def machine_of(self, state: ClusterState, node: str) -> str:
        return InstancesDetail.of(only(state, "instances")).nodes.get(node, "")

    def adopt_replacements(
        self, state: ClusterState, store: StateStore, replaced: dict[str, dict[str, str]], progress: Progress
    ) -> None:
        plan = self.aws_plan(state, store)
        with aws_errors(plan.region):
            spot.adopt(state, store, plan, replaced, progress)

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]) -> SshExecutor:
        return SshExecutor({n.name: n.ssh for n in state.nodes}, sink, head_node=state.nodes[0])


PROVIDER = AwsProvider()
