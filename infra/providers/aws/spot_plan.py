"""Spot instances taken back, pure: which of an elastic run's lost nodes EC2 took back (or, their
machines still running, the health query finds unhealthy), and what replaces each (``spot.py`` carries
it out).

A node is taken back when its instance is shutting down, stopping, stopped or terminated (a spot
interruption: AWS gives 2 minutes' notice on the node, then terminates it), or when EC2 no longer
knows it. Its replacement is one instance launched as ``up`` launched the nodes (same image, type,
subnet and zone, security group, placement group, tags, spot), with a client token of its own, so a
retried replacement launches it once. The head node is never replaced: the run's rendezvous store
lives on it, and every node's environment names its address.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...model.errors import DdpctlError
from ...model.state import ClusterState, NodeInfo, Resource, ResourcePhase
from .configure import Launched
from .details import InstancesDetail, SubnetDetail
from .ec2_requests import run_instances_request
from .plan import TAG_CLUSTER_ID, TAG_HOME, AwsPlan

#: EC2 instance states of an instance taken back (or on its way out)
GONE_STATES = ("shutting-down", "terminated", "stopping", "stopped")
#: of those, the states in which the old instance still needs terminating (ours: it would bill)
TERMINABLE = ("stopping", "stopped")


@dataclass(frozen=True)
class Lost:
    """A node whose instance EC2 took back, or (``unhealthy``: the health query's reasons) one still
    running on a machine found unhealthy."""

    node: str
    instance_id: str
    state: str  # EC2's state of it ("" where EC2 no longer knows it)
    unhealthy: str = ""

    @property
    def why(self) -> str:
        if self.unhealthy:
            return f"unhealthy: {self.unhealthy}"
        return (
            f"its instance {self.instance_id} is {self.state}"
            if self.state
            else f"EC2 no longer knows {self.instance_id}"
        )

    @property
    def terminate(self) -> bool:
        """The old instance is still there (stopped, not terminated; or unhealthy, still running): terminate it
        first."""
        return self.state in TERMINABLE or (bool(self.unhealthy) and self.state not in GONE_STATES)


def taken_back(
    nodes: Mapping[str, str],
    asked: Iterable[str],
    states: Mapping[str, str],
    head: str,
    unhealthy: Callable[[str], str] | None = None,
    owned: Collection[str] = (),
) -> list[Lost]:
    """Of the ``asked`` nodes (node name -> instance id in ``nodes``), those whose instance EC2 took
    back, by ``states`` (instance id -> EC2 state, as described now; an id missing: EC2 no longer
    knows it), and, asked only of the others (a machine that answers) whose instance is proven this
    cluster's (``owned``: its tags, ``ours``), those ``unhealthy`` finds unhealthy (node -> its reasons,
    "" where healthy): a running instance is terminated only then. The ``head`` and nodes without a
    recorded instance are never replaced."""
    lost = []
    for node in asked:
        instance = nodes.get(node, "")
        if node == head or not instance:
            continue
        state = states.get(instance, "")
        if not state or state in GONE_STATES:
            lost.append(Lost(node, instance, state))
        elif unhealthy is not None and instance in owned and (reasons := unhealthy(node)):
            lost.append(Lost(node, instance, state, unhealthy=reasons))
    return lost


def ours(instance: Mapping[str, Any], plan: AwsPlan) -> bool:
    """An instance, as DescribeInstances gives it, carries this cluster's id and this state home's id in
    its tags (what ``up`` tagged it with): one a damaged or edited state names is never terminated."""
    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags", [])}
    return tags.get(TAG_CLUSTER_ID) == plan.cluster_id and tags.get(TAG_HOME, "") == plan.home_id


def replacement_token(cluster_id: str, node: str, old_instance: str) -> str:
    """One token per loss: a retried replacement of the same instance does not launch twice."""
    return f"ddpctl-{cluster_id}-{node}-{old_instance}"[:64]


def subnet_of(resources: list[Resource], detail: InstancesDetail, given: str) -> str:
    """The subnet the nodes were launched in: the given one, else ddpctl's in the zone of the launch."""
    if given:
        return given
    for res in resources:
        if res.kind == "subnet" and res.status == ResourcePhase.CREATED and SubnetDetail.of(res).az == detail.az:
            return SubnetDetail.of(res).aws_id
    raise DdpctlError(
        f"the cluster's state records no subnet in {detail.az}, where its nodes are: a node cannot be replaced there"
    )


def replacement_request(
    plan: AwsPlan,
    detail: InstancesDetail,
    *,
    root_device: str,
    subnet_id: str,
    group_id: str,
    placement_group: str | None,
    lost: Lost,
) -> dict[str, Any]:
    """The RunInstances of one node's replacement: ``up``'s request for one instance, in the zone and
    with the image and EFA interfaces recorded at ``up``."""
    plan = replace(plan, efa_interfaces=detail.efa_interfaces)
    return run_instances_request(
        plan,
        ami=detail.ami,
        root_device=root_device,
        subnet_id=subnet_id,
        group_id=group_id,
        key_name=plan.key_pair_name,
        az=detail.az,
        count=1,
        placement_group=placement_group,
        client_token=replacement_token(plan.cluster_id, lost.node, lost.instance_id),
    )


def unfinished(detail: InstancesDetail, asked: Iterable[str], lost: Iterable[Lost]) -> list[str]:
    """Of the ``asked`` nodes, those whose replacement was launched and recorded but not configured
    (a replacement that failed on the way): configured now, on the instance recorded as theirs."""
    launching = {each.node for each in lost}
    return [node for node in asked if node in detail.replacing and node not in launching]


def replaced(detail: InstancesDetail, lost: Lost, new_instance: str) -> InstancesDetail:
    """The record once ``new_instance`` is the node's: the old id dropped (EC2 took it back, or it is
    being terminated; ``down`` finds anything left by tag); still ``replacing`` until configured."""
    ids = tuple(i for i in detail.ids if i != lost.instance_id)
    ids += () if new_instance in ids else (new_instance,)
    return replace(detail, ids=ids, nodes={**detail.nodes, lost.node: new_instance})


def configured(detail: InstancesDetail, nodes: Iterable[str]) -> InstancesDetail:
    """The record once the replaced ``nodes`` are configured: their replacement done."""
    done = set(nodes)
    return replace(detail, replacing={k: v for k, v in detail.replacing.items() if k not in done})


def launched_nodes(state: ClusterState, private: bool, new: Mapping[str, Launched]) -> list[Launched]:
    """Every node as the SSH files list them (head first): the ``new`` ones as EC2 reported them,
    the others as recorded."""
    ids = InstancesDetail.of(next(r for r in state.resources if r.kind == "instances")).nodes
    out = []
    for node in state.nodes:
        if node.name in new:
            out.append(new[node.name])
            continue
        public = "" if private or node.ssh is None else node.ssh.address
        out.append(Launched(node.name, ids.get(node.name, ""), node.host, public, ""))
    return out


def known_host_keys(known_hosts: str, nodes: Iterable[Launched], private: bool) -> dict[str, list[str]]:
    """Each node's host keys (``TYPE BASE64``) as a known_hosts file lists them under its address."""
    keys: dict[str, list[str]] = {}
    rows = [line.split() for line in known_hosts.splitlines() if line.strip() and not line.startswith("#")]
    for node in nodes:
        found = [f"{r[1]} {r[2]}" for r in rows if len(r) >= 3 and node.address(private) in r[0].split(",")]
        if found:
            keys[node.name] = found
    return keys


def with_nodes(nodes: list[NodeInfo], new: Iterable[NodeInfo]) -> list[NodeInfo]:
    """The cluster's nodes, in their order, with ``new`` in place of the nodes of the same names."""
    by_name = {n.name: n for n in new}
    return [by_name.get(n.name, n) for n in nodes]
