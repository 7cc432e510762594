"""What a ParallelCluster cluster is made of, as typed values: pure, no boto3, no pcluster.

The network, the key and every name and tag come from the aws provider's own plan
(``aws.plan.plan_from_spec``), so both providers build and tag them the same way; this plan adds
the ParallelCluster configuration file and the cluster (its CloudFormation stack) on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model.state import Resource
from ..aws import pricing
from ..aws.plan import TAG_CLUSTER, TAG_CLUSTER_ID, TAG_HOME, VPC_CIDR, AwsPlan
from ..aws.plan import plan_from_spec as aws_plan_from_spec
from .config import (
    DEFAULT_USER,
    OS,
    QUEUE,
    SHARED_MOUNT,
    ComputeFleet,
    Resolved,
    Settings,
    cluster_config,
    compute_resource_name,
)
from .details import ClusterDetail, ConfigDetail

#: The aws plan's resources this provider makes itself (ParallelCluster makes the security
#: groups, placement group, instances and volumes, in its CloudFormation stack).
OWN_KINDS = ("dir", "key-file", "vpc", "internet-gateway", "route", "subnet", "key-pair")

#: The roles of playbooks/site.yml that run on the head node. Not ssh_mesh (ParallelCluster sets up
#: the cluster user's SSH between its nodes) and not nvidia (its images carry the driver, and the
#: head node has no GPU). common with ParallelCluster's host names and hosts file left alone.
HEAD_TAGS = "common,python_env,nccl_env,bundle"
#: The CUDA version of the driver in ParallelCluster's images: python_env picks PyTorch's wheels for
#: it. The head node has no GPU (nor nvidia-smi), so its play is told what the compute nodes have.
COMPUTE_CUDA = "12.8"
#: V100s (p3): the newest CUDA whose PyTorch wheels still have Volta kernels (since torch 2.11).
COMPUTE_CUDA_VOLTA = "12.6"


def compute_cuda(instance_type: str) -> str:
    return COMPUTE_CUDA_VOLTA if pricing.is_volta(instance_type) else COMPUTE_CUDA


@dataclass(frozen=True)
class PclusterPlan:
    aws: AwsPlan  # network, key, names and tags, as the aws provider plans them
    settings: Settings

    @property
    def cluster(self) -> str:
        return self.aws.cluster

    @property
    def region(self) -> str:
        return self.aws.region

    @property
    def pcluster_name(self) -> str:
        """ParallelCluster's (and CloudFormation's) name for the cluster: the aws plan's base name."""
        return self.aws.base_name

    @property
    def config_path(self) -> str:
        return f"{self.aws.cluster_dir}/cluster-config.yaml"

    @property
    def log_path(self) -> str:
        return f"{self.aws.cluster_dir}/pcluster-cli.log"

    @property
    def ssh_user(self) -> str:
        return self.aws.ssh_user or DEFAULT_USER

    @property
    def workdir(self) -> str:
        """On the head node's /home, which ParallelCluster NFS-exports to every compute node."""
        return f"/home/{self.ssh_user}/ddpctl"

    def head_playbook_vars(self) -> dict[str, Any]:
        """site.yml's variables for the head node. Everything lands in the head node's /home, which
        ParallelCluster NFS-exports to every compute node, so one install serves them all."""
        return {
            "ddpctl_node_dir": self.workdir,
            "ddpctl_run_user": self.ssh_user,
            "common_set_hostname": False,
            "common_manage_hosts": False,
            "common_packages_update_cache": True,  # a fresh image's package index may be empty
            # python_env's wheel choice for the compute nodes' GPUs (nvidia_gpu_present: the nvidia
            # role's fact, as it would be on a compute node)
            "nvidia_gpu_present": True,
            "python_env_cuda_version": compute_cuda(self.aws.instance_type),
            # one env file for every compute node: each finds its own interface at run time
            "nccl_env_pin_interface": False,
        }

    @property
    def shared_dir(self) -> str:
        return f"{SHARED_MOUNT}/ddpctl" if self.settings.shared_gb else f"{self.workdir}/shared"

    @property
    def fleet(self) -> ComputeFleet:
        a = self.aws
        return ComputeFleet(
            instance_type=a.instance_type,
            count=a.count,
            volume_gb=a.volume_gb,
            spot=a.spot,
            placement_group=a.placement_group,
            ami=a.ami,
        )

    @property
    def tags(self) -> dict[str, str]:
        """Put on the cluster; ParallelCluster copies them to what its stack makes. Not
        ``ddpctl:created-by``: those resources are ParallelCluster's to delete, so no ddpctl sweep by
        tag (the aws provider's ``down --region`` included) ever touches them."""
        home = {TAG_HOME: self.aws.home_id} if self.aws.home_id else {}
        return {**self.aws.user_tags, TAG_CLUSTER: self.aws.cluster, TAG_CLUSTER_ID: self.aws.cluster_id, **home}

    @property
    def hourly_usd(self) -> float | None:
        nodes = pricing.hourly_usd(self.aws.instance_type, self.aws.count)
        head = pricing.hourly_usd(self.settings.head_instance_type, 1)
        return None if nodes is None or head is None else nodes + head

    @property
    def price_source(self) -> str:
        """Where the cost line's figure comes from: ddpctl's table, dated by its older source, as the
        us-east-1 on-demand list price (saying so where the cluster is elsewhere)."""
        date = min(pricing.price_date(self.aws.instance_type), pricing.price_date(self.settings.head_instance_type))
        elsewhere = f", not {self.region}'s" if self.region != pricing.PRICE_REGION else ""
        return f"the {pricing.PRICE_REGION} on-demand list price of {date}, from ddpctl's table{elsewhere}"

    def config(self, resolved: Resolved) -> dict[str, Any]:
        return cluster_config(
            region=self.region, fleet=self.fleet, resolved=resolved, settings=self.settings, tags=self.tags
        )

    def resources(self) -> list[Resource]:
        """Everything ``up`` creates, in order, each ``planned``."""
        own = [r for r in self.aws.resources() if r.kind in OWN_KINDS]
        return own + [
            ConfigDetail.planned(self.settings).resource(self.config_path),
            ClusterDetail(region=self.region).resource(self.pcluster_name),
        ]

    def describe(self) -> list[str]:
        a, s = self.aws, self.settings
        facts = pricing.TYPES.get(a.instance_type)
        gpus = f", {facts.gpus} GPU(s) each" if facts else ""
        network = (
            f"new VPC {VPC_CIDR} (DNS hostnames on) with an internet gateway and a public subnet in "
            f"{a.az or 'a zone that offers ' + a.instance_type}"
            if a.new_network
            else f"subnet {a.subnet_id}" + (f" of {a.vpc_id}" if a.vpc_id else "")
        )
        ssh = a.ssh_cidr or "your public address/32 (looked up at `up`; --ssh-cidr to set it)"
        lines = [
            f"  ParallelCluster {self.pcluster_name} in {a.region}: Slurm, {OS}"
            + (f", custom AMI {a.ami}" if a.ami else ", ParallelCluster's official AMI"),
            f"  head node: 1 x {s.head_instance_type}, IMDS secured, encrypted gp3 root volume; SSH only from {ssh}",
            f"  queue {QUEUE!r}: {a.count} x {a.instance_type}{gpus} (compute resource "
            f"{compute_resource_name(a.instance_type)}, MinCount = MaxCount = {a.count}: static nodes), "
            + ("spot" if a.spot else "on-demand")
            + f", encrypted {a.volume_gb} GB gp3 root volumes, IMDSv2 only",
            f"  placement: {'a cluster placement group' if a.placement_group else 'none'}",
            f"  network: {network}",
            "  shared storage: /home from the head node (NFS)"
            + (
                f"; {s.shared_gb} GB encrypted gp3 EBS at {SHARED_MOUNT}, deleted with the cluster"
                if s.shared_gb
                else ""
            ),
            f"  key: an ed25519 key made here ({a.key_path}), imported as {a.key_pair_name} (which holds the name)",
            (
                f"  configure: playbooks/site.yml ({HEAD_TAGS.replace(',', ', ')}) on the head node, into "
                f"{self.workdir} (NFS-shared with the compute nodes): a venv with torch's CUDA {compute_cuda(a.instance_type)} wheels, "
                "the env file, the training bundle"
                if a.configure
                else "  configure: skipped (--no-configure): jobs need torch and the bundle on the compute nodes"
            ),
            f"  cost: {pricing.format_usd(self.hourly_usd)}: {self.price_source}, head node included",
        ]
        if s.custom_s3_bucket:
            lines.append(f"  ParallelCluster's artifacts go to s3://{s.custom_s3_bucket}")
        if s.suppress_validators:
            lines.append(f"  create-cluster skips validators: {' '.join(s.suppress_validators)}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "pcluster_name": self.pcluster_name,
            "region": self.region,
            "instance_type": self.aws.instance_type,
            "count": self.aws.count,
            "settings": self.settings.to_dict(),
            "hourly_usd": self.hourly_usd,
            "config_path": self.config_path,
        }


def plan_from_spec(spec: Any, cluster_id: str, cluster_dir: str, settings: Settings, home_id: str = "") -> PclusterPlan:
    """``spec`` has the AWS defaults filled in (``aws.defaults.with_defaults``); ``home_id``: the
    state home's (``StateStore.home_id``)."""
    return PclusterPlan(aws=aws_plan_from_spec(spec, cluster_id, cluster_dir, home_id), settings=settings)
