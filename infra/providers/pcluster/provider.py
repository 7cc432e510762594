"""The ParallelCluster provider: a Slurm cluster on AWS made by the real ``pcluster`` CLI.

``up``: everything checkable is checked before anything is recorded: the pcluster install, the
given subnet, that no ParallelCluster of the same name exists, and the configuration against
aws-parallelcluster's own schema (offline, with a placeholder subnet when ddpctl makes the
network). Then, each step recorded before it is made (as the aws provider does, with its code):
the cluster dir, the ed25519 key, the network (VPC, internet gateway, route, subnet), the key
pair, the configuration file, and ``pcluster create-cluster``; then describe-cluster is polled
until CREATE_COMPLETE (or a failure, reported in one line), the static compute nodes are waited
for (describe-cluster-instances; ``compute.py``: a fleet that never starts ends the wait with one
line on what to check), and the head node is recorded as the cluster's login node with
``launcher = "sbatch"``. ``DDPCTL_PCLUSTER_POLL_S`` and ``DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S`` set
the waits (30 s between polls, 30 min for the compute nodes).
Last, playbooks/site.yml configures the head node (``configure_head``): the Python env with
PyTorch's CUDA wheels, the env file and the training bundle go to its /home, which ParallelCluster
NFS-exports to every compute node, so that sbatch jobs find them there.

``check`` (``check_targets``): the running compute nodes, reached through the head node, their
host keys read on the head node (``compute.py`` says why that is trusted).

``down``: delete-cluster, wait until describe-cluster no longer finds it (not found = gone), then
the key pair and network ddpctl made. Only a cluster tagged with this state's cluster id is ever
deleted. Safe to repeat, and after a crash at any step. ``down_lost``: the same with no state file,
from the cluster's name and region (the ParallelCluster's name and its tags follow from them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...ansible import PlayReport
from ...configure import record_nodes, run_site
from ...errors import DdpctlError, UsageError
from ...launch.supervise import OutputLine
from ...spec import ClusterSpec
from ...state import ClusterState, NodeInfo, Resource, StateStore, atomic_write
from ..aws import configure, keys, pricing
from ..aws.plan import TAG_CLUSTER, TAG_CLUSTER_ID, ssh_cidr_for
from ..aws.provider import lookup_caller_address, record_step, with_defaults
from ..base import PROVIDER_FLAGS, LiveStatus, Progress, Provider
from . import compute, network, schema
from .cli import ClusterInfo, ClusterInstance, Install, PclusterCli, find_pcluster
from .config import PLACEHOLDER_SUBNET, Resolved, Settings, pcluster_name, settings_from_env, to_yaml
from .plan import HEAD_TAGS, PclusterPlan, plan_from_spec

#: --dry-run without --ssh-cidr: a documentation address stands in for yours (looked up at `up`).
DRY_RUN_CIDR = "192.0.2.1/32"
#: The waits' settings (seconds): between two describe calls, and for the compute nodes to start.
ENV_POLL_S = "DDPCTL_PCLUSTER_POLL_S"
ENV_COMPUTE_TIMEOUT_S = "DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S"


@dataclass
class DryRunReport:
    plan: PclusterPlan
    config: dict[str, Any]
    lines: list[str]
    checks: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "config": self.config, "checks": self.checks, "lines": self.lines}


class PclusterProvider(Provider):
    name = "pcluster"
    runs_playbooks = True
    billed = True
    options = frozenset(PROVIDER_FLAGS) - {"inventory", "iam_instance_profile"}
    poll_s = 30.0
    create_timeout_s = 3600.0
    compute_timeout_s = 1800.0
    delete_timeout_s = 3600.0
    report_s = 300.0  # a progress line at least this often while a wait shows no change

    def __init__(
        self, caller_address: Callable[[], str] = lookup_caller_address, env: Mapping[str, str] | None = None
    ) -> None:
        self.caller_address = caller_address
        self._env = env

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    # ---- plan (pure but for the region list and the environment) ------------------------------

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        spec = with_defaults(spec)
        cluster_id = uuid.uuid4().hex[:12]
        plan = plan_from_spec(spec, cluster_id, str(store.cluster_dir(spec.name)), settings_from_env(self.env))
        facts = pricing.TYPES.get(spec.instance_type)
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
            status="planned",
            shared_dir=plan.shared_dir,
            nodes=[head],
            resources=plan.resources(),
            ephemeral=ephemeral,
            launcher="sbatch",
        )

    @staticmethod
    def pcluster_plan(state: ClusterState, store: StateStore) -> PclusterPlan:
        """The plan as recorded: settings from the state, not from today's environment."""
        recorded = next((r for r in state.resources if r.kind == "config"), None)
        settings = Settings.from_dict(recorded.detail.get("settings", {})) if recorded else Settings()
        return plan_from_spec(state.spec, state.cluster_id, str(store.cluster_dir(state.name)), settings)

    # ---- shared checks ---------------------------------------------------------------------------

    @contextmanager
    def _cli(self, install: Install, plan: PclusterPlan, log: Path | None = None) -> Iterator[PclusterCli]:
        """The CLI adapter, logging to ``log`` (the cluster dir), else to a temporary directory."""
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            yield PclusterCli(install, plan.region, log, self.env)
            return
        with tempfile.TemporaryDirectory(prefix="ddpctl-pcluster-") as tmp:
            yield PclusterCli(install, plan.region, Path(tmp) / "pcluster-cli.log", self.env)

    @staticmethod
    def _refuse_existing(cli: PclusterCli, plan: PclusterPlan) -> None:
        if cli.describe(plan.pcluster_name) is not None:
            raise DdpctlError(
                f"a ParallelCluster named {plan.pcluster_name} already exists in {plan.region} and no state file "
                f"records it: delete it with `pcluster delete-cluster -n {plan.pcluster_name} -r {plan.region}`, "
                "or pick another --name"
            )

    # ---- dry run ---------------------------------------------------------------------------------

    def dry_run(self, state: ClusterState, store: StateStore, progress: Progress) -> DryRunReport:
        """The offline schema check, then ``create-cluster --dryrun true``. Creates nothing."""
        from ..aws.ec2 import Aws, aws_errors

        plan = self.pcluster_plan(state, store)
        install = find_pcluster(self.env)
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
            key_name=plan.aws.unique_name,
            ssh_cidr=plan.aws.ssh_cidr or DRY_RUN_CIDR,
        )
        config = plan.config(resolved)
        text = to_yaml(config)
        verdict = schema.validate(text, plan.pcluster_name, install)
        checks["schema"] = f"ok (aws-parallelcluster {verdict.version})"
        warnings: tuple[str, ...] = ()
        with self._cli(install, plan) as cli:
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

    # ---- up --------------------------------------------------------------------------------------

    def up(self, state: ClusterState, store: StateStore, progress: Progress) -> ClusterState:
        from ..aws.ec2 import Aws, aws_errors

        plan = self.pcluster_plan(state, store)
        install = find_pcluster(self.env)
        _ = self.poll(), self.compute_timeout()  # a bad wait setting is one line, before anything is made
        with aws_errors(plan.region):
            aws = Aws(plan.region)
            zone = ""
            if plan.aws.subnet_id:
                network.check_subnet(aws, plan.aws)
            else:
                zone = network.pick_zone(aws, plan.aws, plan.settings.head_instance_type)
            cidr = plan.aws.ssh_cidr or ssh_cidr_for(self.caller_address())
            resolved = Resolved(
                subnet_id=plan.aws.subnet_id or PLACEHOLDER_SUBNET, key_name=plan.aws.unique_name, ssh_cidr=cidr
            )
            verdict = schema.validate(to_yaml(plan.config(resolved)), plan.pcluster_name, install)
            with self._cli(install, plan) as cli:
                self._refuse_existing(cli, plan)
            # Nothing recorded or created before this point.
            progress(
                f"creating pcluster cluster {plan.cluster!r} ({plan.pcluster_name}, aws-parallelcluster {verdict.version}): "
                f"{plan.aws.count} x {plan.aws.instance_type} + a {plan.settings.head_instance_type} head node in "
                f"{plan.region}, {pricing.format_usd(plan.hourly_usd)}"
            )
            _Up(state, store, progress, aws, plan, install, self).run(zone, cidr)
        return state

    def wait_created(self, cli: PclusterCli, plan: PclusterPlan, progress: Progress) -> ClusterInfo:
        start = time.monotonic()
        last, last_report = "", start
        while True:
            info = cli.describe(plan.pcluster_name)
            if info is None:
                raise DdpctlError(
                    f"{plan.pcluster_name} disappeared while being created: see the CloudFormation console"
                )
            if info.status == "CREATE_COMPLETE":
                return info
            if info.failed:
                why = "; ".join(info.failures) or info.stack_status
                raise DdpctlError(
                    f"ParallelCluster could not create {plan.pcluster_name} ({info.status}: {why}): "
                    f"`pcluster get-cluster-stack-events -n {plan.pcluster_name} -r {plan.region}` tells more"
                )
            now = time.monotonic()
            if info.status != last or now - last_report > 300:
                progress(
                    f"{plan.pcluster_name}: {info.status} ({(now - start) / 60:.0f} min; ParallelCluster takes 10-20)"
                )
                last, last_report = info.status, now
            if now - start > self.create_timeout_s:
                raise DdpctlError(
                    f"{plan.pcluster_name} still {info.status} after {self.create_timeout_s / 60:.0f} min"
                )
            time.sleep(self.poll())

    def wait_compute(self, cli: PclusterCli, plan: PclusterPlan, progress: Progress) -> list[ClusterInstance]:
        """Static compute nodes start after CREATE_COMPLETE (clustermgtd launches them); a job
        submitted before would only pend. Polls describe-cluster-instances (and describe-cluster, for
        a fleet ParallelCluster gave up on) until ``--nodes`` of them run, with a progress line
        whenever the fleet changes and every few minutes while it does not."""
        want, poll, timeout = plan.aws.count, self.poll(), self.compute_timeout()
        start = time.monotonic()
        last, last_report = "", start
        while True:
            instances = cli.compute_instances(plan.pcluster_name)
            summary = compute.fleet_summary(instances, want)
            up = compute.running(instances)
            if len(up) >= want:
                progress(f"{plan.pcluster_name}: compute nodes {summary}")
                return up
            info = cli.describe(plan.pcluster_name)
            if info is None or info.failed:
                why = "it is gone" if info is None else "; ".join(info.failures) or info.status
                raise DdpctlError(
                    f"{plan.pcluster_name} failed while its compute nodes started ({why}): "
                    f"`ddpctl down --name {plan.cluster}` deletes what is left"
                )
            if info.fleet_status == "PROTECTED":
                raise DdpctlError(compute.protected(plan, summary))
            now = time.monotonic()
            if summary != last or now - last_report >= self.report_s:
                progress(
                    f"{plan.pcluster_name}: compute nodes {summary} ({compute.duration(now - start)}; "
                    f"waiting up to {compute.duration(timeout)})"
                )
                last, last_report = summary, now
            if now - start >= timeout:
                raise DdpctlError(compute.not_started(plan, summary, timeout))
            time.sleep(poll)

    def poll(self) -> float:
        """Seconds between two describe calls: ``DDPCTL_PCLUSTER_POLL_S``, else ``poll_s``."""
        return _seconds(self.env, ENV_POLL_S, self.poll_s)

    def compute_timeout(self) -> float:
        """How long ``up`` waits for the compute nodes: ``DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S``, else ``compute_timeout_s``."""
        return _seconds(self.env, ENV_COMPUTE_TIMEOUT_S, self.compute_timeout_s)

    # ---- down ------------------------------------------------------------------------------------

    def down(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        from ..aws.ec2 import Aws, aws_errors

        plan = self.pcluster_plan(state, store)
        name = state.name
        persisted = store.exists(name)
        if persisted:
            state.status = "deleting"
            store.save(state)
        cluster = _only(state, "cluster")
        deleted_cluster = False
        if cluster.status != "deleted" and cluster.detail.get("create_called"):
            install = find_pcluster(self.env)  # one line on how to install it, if missing
            with self._cli(install, plan, Path(plan.log_path)) as cli:
                deleted_cluster = self._delete_cluster(cli, plan, state, progress)
            cluster.status = "deleted"
            if persisted:
                store.save(state)
        with aws_errors(plan.region):
            made, problems = network.delete_own(Aws(plan.region), state, progress)
        if problems:
            if persisted:
                store.save(state)
            raise DdpctlError(
                f"could not delete {len(problems)} resource(s) ({'; '.join(problems)}): run `ddpctl down --name {name}` again"
            )
        cluster_dir = store.cluster_dir(name)
        keys.remove_key(cluster_dir / "id_ed25519")
        shutil.rmtree(cluster_dir, ignore_errors=True)
        store.delete(name)
        what = f"{plan.pcluster_name} and {made}" if deleted_cluster else f"{made}"
        progress(
            f"pcluster cluster {name!r} is down: {what} resource(s) deleted, nothing of it is left in {plan.region}"
        )

    def _delete_cluster(self, cli: PclusterCli, plan: PclusterPlan, state: ClusterState, progress: Progress) -> bool:
        info = cli.describe(plan.pcluster_name)
        if info is None:
            return False  # never made, or long gone
        # With a state file, the cluster id must match; without one (down_lost), the cluster name.
        tag, mine = (TAG_CLUSTER_ID, state.cluster_id) if state.cluster_id else (TAG_CLUSTER, state.name)
        if info.tags.get(tag) != mine:
            progress(
                f"warning: {plan.pcluster_name} in {plan.region} is not this cluster's (its {tag} tag is "
                f"{info.tags.get(tag)!r}): left alone"
            )
            return False
        if info.status != "DELETE_IN_PROGRESS":
            progress(f"deleting {plan.pcluster_name} ({info.status})")
            cli.delete(plan.pcluster_name)
        start, last = time.monotonic(), ""
        while True:
            info = cli.describe(plan.pcluster_name)
            if info is None:
                return True
            if info.status == "DELETE_FAILED":
                why = "; ".join(info.failures) or info.stack_status
                raise DdpctlError(
                    f"ParallelCluster could not delete {plan.pcluster_name} ({why}): fix it in the CloudFormation "
                    f"console, then run `ddpctl down --name {state.name}` again"
                )
            if info.status != last:
                progress(f"{plan.pcluster_name}: {info.status} ({(time.monotonic() - start) / 60:.0f} min)")
                last = info.status
            if time.monotonic() - start > self.delete_timeout_s:
                raise DdpctlError(
                    f"{plan.pcluster_name} still {info.status} after {self.delete_timeout_s / 60:.0f} min: "
                    f"run `ddpctl down --name {state.name}` again"
                )
            time.sleep(self.poll())

    def down_lost(self, name: str, region: str, store: StateStore, progress: Progress) -> None:
        """``ddpctl down --name X --region R --provider pcluster`` with no state file: the
        ParallelCluster named for X, if its ``ddpctl:cluster`` tag says it is X's, then the key pair
        and network found by their tags."""
        spec = with_defaults(ClusterSpec(name=name, provider="pcluster", region=region))
        cluster = pcluster_name(name)
        progress(
            f"no state file for {name!r}: looking for ParallelCluster {cluster} and {name}'s network by tag in {region}"
        )
        lost = Resource("cluster", cluster, detail={"region": region, "create_called": True})
        self.down(
            ClusterState(spec=spec, cluster_id="", status="deleting", resources=[lost], launcher="sbatch"),
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
            with self._cli(install, plan) as cli:
                described = cli.describe(plan.pcluster_name)
        except DdpctlError as exc:
            error = summary = str(exc)
            running = state.status == "up"
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

    def configure(self, state: ClusterState, store: StateStore, progress: Progress, tags: str | None) -> PlayReport:
        """The head node's site.yml again (``ddpctl configure``), into the shared /home."""
        plan = self.pcluster_plan(state, store)
        cluster_dir = Path(plan.aws.cluster_dir)
        return configure_head(
            state,
            str(configure.inventory_path(cluster_dir)),
            cluster_dir / "keys",
            progress,
            plan.head_playbook_vars(),
            tags=tags or HEAD_TAGS,
        )

    def check_targets(
        self, state: ClusterState, progress: Progress
    ) -> tuple[ClusterState, Callable[[Callable[[OutputLine], None]], object]]:
        """What ``ddpctl check`` tests: the running compute nodes (describe-cluster-instances), which
        run the jobs, each reached through the head node (``compute.check_view``), not the login
        node alone."""
        plan = self.pcluster_plan(state, StateStore())
        install = find_pcluster(self.env)
        with self._cli(install, plan, Path(plan.log_path)) as cli:
            instances = cli.compute_instances(plan.pcluster_name)
        return compute.check_view(state, instances, Path(plan.aws.cluster_dir), progress)

    def preflight(self, state: ClusterState) -> None:
        """Nothing to check from here: Slurm on the head node schedules the job."""

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]):
        from ...launch.ssh import SshExecutor

        return SshExecutor({n.name: n.ssh for n in state.nodes}, sink)


class _Up:
    """One ``up``: each step recorded before it is made and marked after (as the aws provider's)."""

    def __init__(
        self,
        state: ClusterState,
        store: StateStore,
        progress: Progress,
        aws: Any,
        plan: PclusterPlan,
        install: Install,
        provider: PclusterProvider,
    ) -> None:
        self.state, self.store, self.progress, self.aws = state, store, progress, aws
        self.plan, self.install, self.provider = plan, install, provider

    def step(self, kind: str, create: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return record_step(self.state, self.store, self.progress, _only(self.state, kind), create)

    def run(self, zone: str, cidr: str) -> None:
        plan, aws, state = self.plan, self.aws, self.state
        a = plan.aws
        _only(state, "config").detail.update({"ssh_cidr": cidr, "zone": zone})
        state.status = "creating"
        self.store.save(state)

        def make_dir() -> dict[str, Any]:
            Path(a.cluster_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            return {}

        self.step("dir", make_dir)
        public_key = self.step("key-file", lambda: {"public_key": keys.ensure_key(Path(a.key_path), a.unique_name)})[
            "public_key"
        ]
        if a.new_network:
            vpc_id = self.step("vpc", lambda: {"aws_id": network.create_vpc(aws, a)})["aws_id"]
            igw = self.step(
                "internet-gateway",
                lambda: {
                    "aws_id": aws.create_internet_gateway(vpc_id, a.tag_specs("igw", "internet-gateway")),
                    "vpc": vpc_id,
                },
            )["aws_id"]
            self.step("route", lambda: {"route_table": aws.add_default_route(vpc_id, igw)})
            _only(state, "subnet").detail["az"] = zone
            self.store.save(state)  # the zone is part of the record before the call
            subnet_id = self.step("subnet", lambda: {"aws_id": network.create_subnet(aws, a, vpc_id, zone)})["aws_id"]
        else:
            subnet_id = a.subnet_id
        self.step(
            "key-pair",
            lambda: {
                "aws_id": aws.import_key_pair(a.unique_name, public_key, a.cluster_id, a.tag_specs("key", "key-pair"))
            },
        )
        text = to_yaml(plan.config(Resolved(subnet_id=subnet_id, key_name=a.unique_name, ssh_cidr=cidr)))
        schema.validate(text, plan.pcluster_name, self.install)  # the final file, as create-cluster gets it

        def write_config() -> dict[str, Any]:
            atomic_write(Path(plan.config_path), text)
            return {"subnet_id": subnet_id}

        self.step("config", write_config)
        with self.provider._cli(self.install, plan, Path(plan.log_path)) as cli:
            cluster = _only(state, "cluster")
            cluster.detail["create_called"] = True  # from here on, `down` asks ParallelCluster
            self.store.save(state)
            self.progress(
                f"pcluster create-cluster {plan.pcluster_name}: validating, synthesizing and submitting the stack"
            )

            def create() -> dict[str, Any]:
                result = cli.create(
                    plan.pcluster_name, Path(plan.config_path), dryrun=False, suppress=plan.settings.suppress_validators
                )
                for warning in result.warnings:
                    self.progress(f"pcluster: {warning}")
                return {"status": result.message}

            self.step("cluster", create)
            info = self.provider.wait_created(cli, plan, self.progress)
            self.provider.wait_compute(cli, plan, self.progress)
        self.finish(info)

    def finish(self, info: ClusterInfo) -> None:
        plan, state = self.plan, self.state
        a = plan.aws
        head = info.head
        if head is None or not head.private_ip:
            raise DdpctlError(
                f"describe-cluster reports no head node address for {plan.pcluster_name}: see `pcluster describe-cluster`"
            )
        launched = configure.Launched(
            name="head", instance_id=head.instance_id, private_ip=head.private_ip, public_ip=head.public_ip, zone=""
        )
        cluster_dir = Path(a.cluster_dir)
        host_keys = configure.collect_host_keys([launched], self.aws.console_output, self.progress)
        files = configure.write_files(
            cluster_dir, [launched], user=plan.ssh_user, key_path=a.key_path, private=a.private_ip, host_keys=host_keys
        )
        host = configure.ssh_host(launched, files, user=plan.ssh_user, key_path=a.key_path, private=a.private_ip)
        state.nodes = [replace(state.nodes[0], host=head.private_ip, python="python3", ssh=host)]
        state.launcher = "sbatch"
        self.store.save(state)
        if a.configure:
            configure_head(state, str(files.inventory), cluster_dir / "keys", self.progress, plan.head_playbook_vars())
        else:
            self.progress(
                "skipping configuration (--no-configure): jobs need torch and the training bundle on the "
                f"compute nodes; configure the head node with `ansible-playbook -i {files.inventory} --tags "
                f"{HEAD_TAGS} -e {shlex.quote(json.dumps(plan.head_playbook_vars()))} playbooks/site.yml`"
            )
        state.status = "up"
        self.store.save(state)
        self.progress(
            f"pcluster cluster {plan.cluster!r} is up: head node {launched.address(a.private_ip)} (ssh -F {files.ssh_config} "
            f"{launched.address(a.private_ip)}), {a.count} x {a.instance_type} in Slurm queue 'gpu'; jobs go through "
            f"sbatch; {pricing.format_usd(plan.hourly_usd)} until `ddpctl down --name {plan.cluster}`"
        )


def configure_head(
    state: ClusterState,
    inventory: str,
    key_dir: Path,
    progress: Progress,
    head_vars: Mapping[str, Any],
    tags: str = HEAD_TAGS,
) -> PlayReport:
    """site.yml's ``HEAD_TAGS`` roles on the head node (``state.nodes[0]``), into the home directory
    the compute nodes share; the user's ``--playbook-var`` values win over ``head_vars``. The head
    node then stands for the compute nodes: the play's Python, env file, bundle and work dir, with the
    CPUs and GPUs of the compute instance type."""
    head = state.nodes[0]
    configure.wait_for_ssh([head.ssh], progress)
    report = run_site(inventory, [head], key_dir, progress, {**head_vars, **state.spec.playbook_vars}, tags=tags)
    [node] = record_nodes([head], report, {})
    state.nodes = [replace(node, cpus=head.cpus, gpus=head.gpus)]
    return report


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise UsageError(f"{name}={raw} is not a number of seconds: give one >= 0, or unset it for {default:g}")
    return value


def _only(state: ClusterState, kind: str) -> Resource:
    return next(r for r in state.resources if r.kind == kind)


PROVIDER = PclusterProvider()
