"""Autodown that keeps the runs' outputs: the head node stops instead of terminating.

The runs' outputs (snapshots, metrics) live on the head node's disk, which EC2 deletes with a
terminated instance. So ``set_autodown`` marks the head's instance to *stop* when it shuts itself
down (``InstanceInitiatedShutdownBehavior=stop``, through ModifyInstanceAttribute) while the other
nodes still terminate: an idle cluster then costs only the head's disk. ``down`` starts the head
again (``start``), copies the outputs into the runs' records as for any cluster, then deletes it
all. Spot instances cannot stop (a one-time spot request): theirs all terminate, as ``set_autodown``
says.
"""

from __future__ import annotations

from dataclasses import replace

from ...model.errors import DdpctlError
from ...model.progress import Progress
from ...model.state import ClusterState
from ...model.store import StateStore
from ..base import TakenDown
from . import configure, instances
from .details import InstancesDetail
from .ec2 import Aws
from .plan import AwsPlan
from .spot_plan import known_host_keys, launched_nodes

#: gp3 storage, USD per GB-month (us-east-1 list price): what a stopped head's disk costs.
GP3_USD_PER_GB_MONTH = 0.08
GONE = ("shutting-down", "terminated")
STOPPED = ("stopping", "stopped")


def head_id(state: ClusterState) -> str:
    """The head node's instance id ("": none recorded)."""
    if not state.nodes:
        return ""
    for r in state.resources:
        if r.kind == "instances":
            return InstancesDetail.of(r).nodes.get(state.nodes[0].name, "")
    return ""


def taken_down(states: dict[str, str], head: str) -> TakenDown | None:
    """Pure: from the instances' EC2 states (an instance EC2 no longer lists is gone), whether the
    cluster took itself down, and whether its head was kept stopped. None: it did not."""
    if any(s not in GONE for iid, s in states.items() if iid != head):
        return None
    found = states.get(head, "terminated")
    if found in GONE:
        return TakenDown()
    if found in STOPPED:
        return TakenDown(kept_head=head)
    return None


def disk_cost_text(volume_gb: int) -> str:
    return f"{volume_gb} GB, about ${volume_gb * GP3_USD_PER_GB_MONTH:,.2f}/month"


def keep_on_shutdown(aws: Aws, state: ClusterState) -> str:
    """Mark the head's instance to stop, not terminate, when it shuts itself down; its id."""
    head = head_id(state)
    if not head:
        raise DdpctlError(f"cluster {state.name!r} records no head instance: take it down and up again")
    aws.ec2.modify_instance_attribute(InstanceId=head, InstanceInitiatedShutdownBehavior={"Value": "stop"})
    return head


def start(state: ClusterState, store: StateStore, plan: AwsPlan, progress: Progress) -> None:
    """Start the stopped head, then point the cluster's SSH files at its new address (EC2 gives a
    stopped instance another public address; its host keys, on its disk, are the same) and wait
    for SSH; the state records the head's new address."""
    aws = Aws(plan.region)
    head = head_id(state)
    node = state.nodes[0]
    progress(f"starting {node.name} ({head}), stopped by autodown, to copy the runs' outputs off its disk")
    aws.ec2.start_instances(InstanceIds=[head])
    instances.wait(aws, "instance_running", [head], progress, f"starting {node.name}", instances.RUNNING_TIMEOUT_S)
    [found] = aws.instances_by_id([head])
    fresh = configure.Launched(
        name=node.name,
        instance_id=head,
        private_ip=found.get("PrivateIpAddress", node.host),
        public_ip=found.get("PublicIpAddress", ""),
        zone=found.get("Placement", {}).get("AvailabilityZone", ""),
    )
    cluster_dir = store.cluster_dir(state.name)
    known = cluster_dir / "known_hosts"
    before = launched_nodes(state, plan.private_ip, {})
    keys = known_host_keys(known.read_text() if known.is_file() else "", before, plan.private_ip)
    now = launched_nodes(state, plan.private_ip, {node.name: fresh})
    files = configure.cluster_files(plan, now, keys)
    host = configure.cluster_host(plan, fresh, files)
    state.nodes = [replace(node, ssh=host), *state.nodes[1:]]
    store.save(state)
    configure.wait_for_ssh([host], progress)
