"""The ParallelCluster provider's ``up`` once its checks passed, each step recorded in the state
before it is made (``aws/steps.py``, as the aws provider's): the cluster's directory and key, the
key pair that holds the cluster's name in the region, the network (``aws/network.py``, with DNS
hostnames and public addresses), the
configuration file (checked once more by the schema, as create-cluster gets it), then
``pcluster create-cluster`` and the waits (``waits.py``); last, the head node recorded as the
cluster's login node and configured by playbooks/site.yml (``configure_head``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...hosts.ansible import Play, PlayReport
from ...hosts.site_play import record_nodes, run_site
from ...model.errors import DdpctlError
from ...model.progress import Progress
from ...model.state import ClusterState, LaunchKind
from ...model.store import StateStore, atomic_write
from ..aws import configure, network, pricing
from ..aws.ec2 import Aws
from ..aws.steps import Steps, only
from . import schema
from .cli import ClusterInfo, Install, opened
from .config import Resolved, to_yaml
from .details import ClusterDetail, ConfigDetail
from .plan import HEAD_TAGS, PclusterPlan
from .waits import Waits


class Up(Steps):
    """One ``up``: each step recorded before it is made and marked after (as the aws provider's)."""

    def __init__(
        self,
        state: ClusterState,
        store: StateStore,
        progress: Progress,
        aws: Aws,
        plan: PclusterPlan,
        install: Install,
        waits: Waits,
        env: Mapping[str, str],
    ) -> None:
        super().__init__(state, store, progress)
        self.aws, self.plan, self.install, self.waits, self.env = aws, plan, install, waits, env

    def run(self, zone: str, cidr: str) -> str:
        """Every step, the cluster already recorded as creating; returns the line that says it is up."""
        plan, aws, state = self.plan, self.aws, self.state
        a = plan.aws
        config = only(state, "config")
        replace(ConfigDetail.of(config), ssh_cidr=cidr, zone=zone).put(config)
        self.save()
        network.claim_name(self, aws, a)  # first: where another state home holds the name, nothing is left
        if a.new_network:
            _, subnet_id = network.create_network(self, aws, a, zone, parallelcluster=True)
        else:
            subnet_id = a.subnet_id
        text = to_yaml(plan.config(Resolved(subnet_id=subnet_id, key_name=a.key_pair_name, ssh_cidr=cidr)))
        schema.validate(text, plan.pcluster_name, self.install)  # the final file, as create-cluster gets it

        def write_config() -> ConfigDetail:
            atomic_write(Path(plan.config_path), text)
            return replace(ConfigDetail.of(config), subnet_id=subnet_id)

        self.step(config, write_config)
        with opened(self.install, plan.region, self.env, Path(plan.log_path)) as cli:
            cluster = only(state, "cluster")
            # from here on, `down` asks ParallelCluster
            replace(ClusterDetail.of(cluster), create_called=True).put(cluster)
            self.save()
            self.progress(
                f"pcluster create-cluster {plan.pcluster_name}: validating, synthesizing and submitting the stack"
            )

            def create() -> ClusterDetail:
                result = cli.create(
                    plan.pcluster_name, Path(plan.config_path), dryrun=False, suppress=plan.settings.suppress_validators
                )
                for warning in result.warnings:
                    self.progress(f"pcluster: {warning}")
                return replace(ClusterDetail.of(cluster), status=result.message)

            self.step(cluster, create)
            info = self.waits.wait_created(cli, plan, self.progress)
            self.waits.wait_compute(cli, plan, self.progress)
        return self.finish(info)

    def finish(self, info: ClusterInfo) -> str:
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
        state.launcher = LaunchKind.SBATCH
        self.save()
        if a.configure:
            configure_head(state, str(files.inventory), cluster_dir / "keys", self.progress, plan.head_playbook_vars())
        else:
            self.progress(
                "skipping configuration (--no-configure): jobs need torch and the training bundle on the "
                f"compute nodes; configure the head node with `ansible-playbook -i {files.inventory} --tags "
                f"{HEAD_TAGS} -e {shlex.quote(json.dumps(plan.head_playbook_vars()))} playbooks/site.yml`"
            )
        return (
            f"pcluster cluster {plan.cluster!r} is up: head node {launched.address(a.private_ip)} (ssh -F {files.ssh_config} "
            f"{launched.address(a.private_ip)}), {a.count} x {a.instance_type} in Slurm queue 'gpu'; jobs go through "
            f"sbatch; {pricing.format_usd(plan.hourly_usd)} until `ddpctl down --name {plan.cluster}`"
        )


#: What ``up`` runs on the head node: the roles of ``HEAD_TAGS``.
HEAD_PLAY = Play(tags=HEAD_TAGS)


def configure_head(
    state: ClusterState,
    inventory: str,
    key_dir: Path,
    progress: Progress,
    head_vars: Mapping[str, Any],
    play: Play = HEAD_PLAY,
) -> PlayReport:
    """site.yml's ``HEAD_TAGS`` roles on the head node (``state.nodes[0]``), into the home directory
    the compute nodes share; the user's ``--playbook-var`` values win over ``head_vars``. The head
    node then stands for the compute nodes: the play's Python, env file, bundle and work dir, with the
    CPUs and GPUs of the compute instance type."""
    head = state.nodes[0]
    configure.wait_for_ssh([head.ssh], progress)
    report = run_site(inventory, [head], key_dir, progress, {**head_vars, **state.spec.playbook_vars}, play=play)
    if play.check:
        return report
    [node] = record_nodes([head], report, {})
    state.nodes = [replace(node, cpus=head.cpus, gpus=head.gpus)]
    return report
