"""The ParallelCluster provider: a Slurm cluster on AWS made by the real ``pcluster`` CLI.

``up``: everything checkable is checked before anything is recorded: the pcluster install, the
given subnet, that no ParallelCluster of the same name exists, and the configuration against
aws-parallelcluster's own schema (offline, with a placeholder subnet when ddpctl makes the
network). Then ``up.py`` makes it, each step recorded before it is made (as the aws provider does,
with its code): the cluster dir, the ed25519 key, the network (VPC, internet gateway, route,
subnet), the key pair, the configuration file, and ``pcluster create-cluster``; then
describe-cluster is polled until CREATE_COMPLETE (or a failure, reported in one line), the static
compute nodes are waited for (``waits.py``; describe-cluster-instances; ``compute.py``: a fleet
that never starts ends the wait with one line on what to check), and the head node is recorded as
the cluster's login node with ``launcher = LaunchKind.SBATCH``. Last, playbooks/site.yml configures the head
node (``up.configure_head``): the Python env with PyTorch's CUDA wheels, the env file and the
training bundle go to its /home, which ParallelCluster NFS-exports to every compute node, so that
sbatch jobs find them there.

``check`` (``check_targets``): the running compute nodes, reached through the head node, their
host keys read on the head node (``compute.py`` says why that is trusted).

``down``: delete-cluster, wait until describe-cluster no longer finds it (not found = gone), then
the key pair and network ddpctl made. Only a cluster tagged with this state's cluster id is ever
deleted. Safe to repeat, and after a crash at any step. ``down_lost``: the same with no state file,
from the cluster's name and region (the ParallelCluster's name and its tags follow from them).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...hosts.ansible import Play, PlayReport
from ...launch.ssh_executor import SshExecutor
from ...launch.supervise import OutputLine
from ...model.errors import DdpctlError
from ...model.spec import ClusterSpec
from ...model.state import ClusterPhase, ClusterState, LaunchKind, NodeInfo, ResourcePhase
from ...model.store import StateStore
from ..aws import configure, keys, network, pricing
from ..aws.defaults import lookup_caller_address, with_defaults
from ..aws.ec2 import Aws
from ..aws.errors import aws_errors
from ..aws.options import check_ssh_family
from ..aws.plan import base_name, ssh_cidr_for
from ..aws.steps import only
from ..base import LiveStatus, Progress, Provider
from ..registry import checked_spec
from . import compute, schema
from .cli import find_pcluster, opened
from .config import PLACEHOLDER_SUBNET, Resolved, Settings, settings_from_env, to_yaml
from .details import ClusterDetail, ConfigDetail
from .dry_run import DryRunReport, dry_run_report
from .options import OPTIONS
from .plan import HEAD_TAGS, PclusterPlan, plan_from_spec
from .up import Up, configure_head
from .waits import Waits


class PclusterProvider(Waits, Provider):
    name = "pcluster"
    runs_playbooks = True
    billed = True
    disks_go_with_down = True
    gpus_counted_by = "its instance type has"  # its compute nodes: configured by ParallelCluster, not one by one
    #: its head node cannot delete its CloudFormation stack; ParallelCluster stops idle compute nodes itself
    no_autodown_why = (
        "ParallelCluster stops idle compute nodes itself (ScaledownIdletime), and its head node cannot delete its stack"
    )
    options = OPTIONS

    def __init__(
        self, caller_address: Callable[[], str] = lookup_caller_address, env: Mapping[str, str] | None = None
    ) -> None:
        self.caller_address = caller_address
        self._env = env

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    # ---- plan (pure but for the region list and the environment) ------------------------------

    def check_up(self, spec: ClusterSpec) -> None:
        check_ssh_family(spec.options)  # an IPv6 --ssh-cidr into ddpctl's own VPC, which has none

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        spec = with_defaults(spec)
        cluster_id = uuid.uuid4().hex[:12]
        plan = plan_from_spec(
            spec, cluster_id, str(store.cluster_dir(spec.name)), settings_from_env(self.env), store.home_id()
        )
        facts = pricing.TYPES.get(spec.options["instance_type"])
        # The login node as the launcher sees it; jobs run on compute nodes, so cpus/gpus are theirs.
        head = NodeInfo(
            name="head",
            host="",
            workdir=plan.workdir,
            cpus=facts.vcpus if facts else 1,
            gpus=facts.gpus if facts else 0,
        )
        return ClusterState(
            spec=spec,
            cluster_id=cluster_id,
            status=ClusterPhase.PLANNED,
            shared_dir=plan.shared_dir,
            nodes=[head],
            resources=plan.resources(),
            ephemeral=ephemeral,
            launcher=LaunchKind.SBATCH,
        )

    @staticmethod
    def pcluster_plan(state: ClusterState, store: StateStore) -> PclusterPlan:
        """The plan as recorded: settings from the state, not from today's environment."""
        recorded = next((r for r in state.resources if r.kind == "config"), None)
        settings = ConfigDetail.of(recorded).plan_settings if recorded else Settings()
        return plan_from_spec(
            state.spec, state.cluster_id, str(store.cluster_dir(state.name)), settings, store.home_id()
        )

    def dry_run(self, state: ClusterState, store: StateStore, progress: Progress) -> DryRunReport:
        """The offline schema check, then ``create-cluster --dryrun true``. Creates nothing."""
        return dry_run_report(self.env, self.pcluster_plan(state, store))

    # ---- up --------------------------------------------------------------------------------------

    def ready(self, state: ClusterState, store: StateStore, progress: Progress) -> Callable[[], str]:
        plan = self.pcluster_plan(state, store)
        install = find_pcluster(self.env)
        _ = self.poll(), self.compute_timeout()  # a bad wait setting is one line, before anything is made
        with aws_errors(plan.region):
            aws = Aws(plan.region)
            zone, vpc_id = "", ""
            if plan.aws.subnet_id:
                vpc_id = network.check_subnet(aws, plan.aws)["VpcId"]
            else:
                zone = network.pick_zone(aws, plan.aws, plan.settings.head_instance_type)
            cidr = plan.aws.ssh_cidr or ssh_cidr_for(self.caller_address())
            network.check_ssh_family(aws, plan.aws, cidr, vpc_id)
            network.check_name(plan.aws, aws.key_pair(plan.aws.key_pair_name))  # up's key pair holds the name
            resolved = Resolved(
                subnet_id=plan.aws.subnet_id or PLACEHOLDER_SUBNET, key_name=plan.aws.key_pair_name, ssh_cidr=cidr
            )
            verdict = schema.validate(to_yaml(plan.config(resolved)), plan.pcluster_name, install)
            with opened(install, plan.region, self.env) as cli:
                if cli.describe(plan.pcluster_name) is not None:
                    raise DdpctlError(
                        f"a ParallelCluster named {plan.pcluster_name} already exists in {plan.region} and no state "
                        f"file records it: delete it with `pcluster delete-cluster -n {plan.pcluster_name} -r "
                        f"{plan.region}`, or pick another --name"
                    )
            # Nothing recorded or created before this point. The id of this state home, made with its
            # first cluster, tags everything the cluster is made of (the stack too).
            plan = replace(plan, aws=replace(plan.aws, home_id=store.make_home_id()))

        def create() -> str:
            progress(
                f"creating pcluster cluster {plan.cluster!r} ({plan.pcluster_name}, aws-parallelcluster {verdict.version}): "
                f"{plan.aws.count} x {plan.aws.instance_type} + a {plan.settings.head_instance_type} head node in "
                f"{plan.region}, {pricing.format_usd(plan.hourly_usd)}"
            )
            with aws_errors(plan.region):
                return Up(state, store, progress, aws, plan, install, self, self.env).run(zone, cidr)

        return create

    # ---- down ------------------------------------------------------------------------------------

    def delete(self, state: ClusterState, store: StateStore, progress: Progress, *, persisted: bool) -> str:
        plan = self.pcluster_plan(state, store)
        name = state.name
        cluster = only(state, "cluster")
        deleted_cluster = False
        if cluster.status != ResourcePhase.DELETED and ClusterDetail.of(cluster).create_called:
            install = find_pcluster(self.env)  # one line on how to install it, if missing
            with opened(install, plan.region, self.env, Path(plan.log_path)) as cli:
                deleted_cluster = self._delete_cluster(cli, plan, state, progress)
            cluster.status = ResourcePhase.DELETED
            if persisted:
                store.save(state)
        with aws_errors(plan.region):
            made, problems, others = network.delete_network(Aws(plan.region), state, progress, store.home_id())
        if problems:
            if persisted:
                store.save(state)
            raise DdpctlError(
                f"could not delete {len(problems)} resource(s) ({'; '.join(problems)}): run `ddpctl down --name {name}` again"
            )
        keys.remove_key(store.cluster_dir(name) / "id_ed25519")
        what = f"{plan.pcluster_name} and {made}" if deleted_cluster else f"{made}"
        return (
            f"pcluster cluster {name!r} is down: {what} resource(s) deleted, nothing of it is left in {plan.region}"
            + (f"; {others}" if others else "")
        )

    def down_lost(self, name: str, region: str, store: StateStore, progress: Progress) -> None:
        """``ddpctl down --name X --region R --provider pcluster`` with no state file: the
        ParallelCluster named for X, if its ``ddpctl:cluster`` tag says it is X's, then the key pair
        and network found by their tags."""
        spec = with_defaults(checked_spec(ClusterSpec(name=name, provider="pcluster", options={"region": region})))
        cluster = base_name(name)  # the ParallelCluster of that name
        progress(
            f"no state file for {name!r}: looking for ParallelCluster {cluster} and {name}'s network by tag in {region}"
        )
        lost = ClusterDetail(region=region, create_called=True).resource(cluster)
        self.down(
            ClusterState(
                spec=spec, cluster_id="", status=ClusterPhase.DELETING, resources=[lost], launcher=LaunchKind.SBATCH
            ),
            store,
            progress,
        )

    # ---- status ----------------------------------------------------------------------------------

    def status(self, state: ClusterState) -> LiveStatus:
        """What ParallelCluster says about the cluster now, and what that costs per hour."""
        plan = self.pcluster_plan(state, StateStore())
        details: dict[str, Any] = {
            "pcluster_name": plan.pcluster_name,
            "region": plan.region,
            "instance_type": plan.aws.instance_type,
        }
        running, error = False, ""
        try:
            install = find_pcluster(self.env)
            with opened(install, plan.region, self.env) as cli:
                described = cli.describe(plan.pcluster_name)
        except DdpctlError as exc:
            error = summary = str(exc)
            running = state.status == ClusterPhase.UP
        else:
            if described is None:
                summary = "ParallelCluster: not found"
            else:
                details.update(cluster_status=described.status, compute_fleet_status=described.fleet_status)
                summary = f"ParallelCluster: {described.status}" + (
                    f", fleet {described.fleet_status}" if described.fleet_status else ""
                )
                running = not described.status.startswith("DELETE")
        price = plan.hourly_usd
        return LiveStatus(
            summary=summary,
            billed_instances=1 + plan.aws.count if running else 0,
            cost_per_hour_usd=None if price is None else (round(price, 4) if running else 0.0),
            error=error,
            details=details,
        )

    # ---- running jobs ----------------------------------------------------------------------------

    def configure(self, state: ClusterState, store: StateStore, progress: Progress, play: Play) -> PlayReport:
        """The head node's site.yml again (``ddpctl configure``), into the shared /home."""
        plan = self.pcluster_plan(state, store)
        cluster_dir = Path(plan.aws.cluster_dir)
        return configure_head(
            state,
            str(configure.inventory_path(cluster_dir)),
            cluster_dir / "keys",
            progress,
            plan.head_playbook_vars(),
            play=replace(play, tags=play.tags or HEAD_TAGS),
        )

    def check_targets(
        self, state: ClusterState, progress: Progress
    ) -> tuple[ClusterState, Callable[[Callable[[OutputLine], None]], object]]:
        """What ``ddpctl check`` tests: the running compute nodes (describe-cluster-instances), which
        run the jobs, each reached through the head node (``compute.check_view``), not the login
        node alone."""
        plan = self.pcluster_plan(state, StateStore())
        install = find_pcluster(self.env)
        with opened(install, plan.region, self.env, Path(plan.log_path)) as cli:
            instances = cli.compute_instances(plan.pcluster_name)
        return compute.check_view(state, instances, Path(plan.aws.cluster_dir), progress)

    def preflight(self, state: ClusterState) -> None:
        """Nothing to check from here: Slurm on the head node schedules the job."""

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]) -> SshExecutor:
        return SshExecutor({n.name: n.ssh for n in state.nodes}, sink)


PROVIDER = PclusterProvider()
