"""Spot instances taken back, replaced (``AwsProvider.replace_lost_nodes``; the plan is
``spot_plan.py``): an elastic run's lost node whose instance EC2 took back (or whose instance, still
running, the health query finds unhealthy: terminated first) gets a new instance in
the same subnet, zone and placement group, recorded as the node's, configured by site.yml limited
to it (then the ``ssh_mesh`` role on every node whose instance runs, so that they all trust its new host
key; a node lost at the same time is left to its own replacement), and the
run starts the node's agent there.

Crash-safe as ``up`` is: the launch's client token is recorded before RunInstances (the node stays
``replacing`` until it is configured), the new instance carries the cluster's tags (``down`` finds
it by them whatever the state says), a retried replacement of the same loss gets the same instance,
and one that failed after the launch was recorded configures the recorded instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ...hosts.ansible import Play
from ...hosts.site_play import record_nodes, run_site
from ...model.progress import Progress
from ...model.state import ClusterState, NodeInfo, ResourcePhase
from ...model.store import StateStore
from . import configure, faults, instances
from .details import InstancesDetail, SecurityGroupDetail
from .ec2 import Aws
from .plan import AwsPlan
from .spot_plan import (
    Lost,
    configured,
    known_host_keys,
    launched_nodes,
    ours,
    replaced,
    replacement_request,
    subnet_of,
    taken_back,
    unfinished,
    with_nodes,
)
from .steps import only, only_created


@dataclass(frozen=True)
class Replacements:
    """What ``replace_instances`` did in EC2: each node's new instance (``new``: node -> instance id),
    those instances as EC2 describes them now, and their host keys (from their consoles); ``gone``: the
    cluster's other nodes whose instances do not run either (lost at the same time, replaced after):
    left out of the mesh's play, which could not reach them."""

    new: dict[str, str]
    launched: dict[str, configure.Launched]
    host_keys: dict[str, list[str]]
    gone: tuple[str, ...] = ()


def replace_lost(
    state: ClusterState,
    store: StateStore,
    plan: AwsPlan,
    asked: list[str],
    progress: Progress,
    unhealthy: Callable[[str], str] | None = None,
) -> ClusterState | None:
    """Replace those of the ``asked`` nodes whose instances EC2 took back, or (``unhealthy``, asked of
    the others) that are unhealthy; None: none was."""
    done = replace_instances(Aws(plan.region), state, store, plan, asked, progress, unhealthy)
    if done is None:
        return None
    _configure(state, store, plan, done, progress)
    inst = only(state, "instances")
    configured(InstancesDetail.of(inst), done.new).put(inst)
    store.save(state)
    progress(f"{', '.join(done.new)} replaced: {', '.join(f'{n} is {i}' for n, i in done.new.items())}")
    return state


def replace_instances(
    aws: Aws,
    state: ClusterState,
    store: StateStore,
    plan: AwsPlan,
    asked: list[str],
    progress: Progress,
    unhealthy: Callable[[str], str] | None = None,
) -> Replacements | None:
    """A replacement's part in EC2, every call of it (docs/aws-head-iam-policy.json allows exactly
    these): the lost nodes found, a running one terminated, each launched again, waited for, and
    its host keys read from its console; each launch recorded in the state. None: none was lost."""
    inst = only(state, "instances")
    detail = InstancesDetail.of(inst)
    described = aws.instances_by_id(list(detail.nodes.values()))  # every node's: the others' lost too?
    states = {i["InstanceId"]: i["State"]["Name"] for i in described}
    owned = {i["InstanceId"] for i in described if ours(i, plan)}
    lost = taken_back(detail.nodes, asked, states, state.nodes[0].name, unhealthy, owned)
    pending = unfinished(detail, asked, lost)
    if not lost and not pending:
        return None
    for each in lost:
        if each.unhealthy:
            progress(f"{each.node}: {each.why}: terminating its instance {each.instance_id}, launching a new one")
        else:
            progress(f"{each.node}: EC2 took its spot instance back ({each.why}): launching a new one in its place")
    for node in pending:
        progress(f"{node}: its replacement {detail.nodes[node]} was launched but not configured: configuring it")
    stopped = [each.instance_id for each in lost if each.terminate]
    if stopped:
        instances.terminate(aws, stopped, progress)
    new = {node: detail.nodes[node] for node in pending}
    new |= {each.node: _launch(aws, state, store, plan, each) for each in lost}
    instances.wait(aws, "instance_running", list(new.values()), progress, "starting", instances.RUNNING_TIMEOUT_S)
    node_of = {iid: node for node, iid in new.items()}
    launched = {
        node_of[i["InstanceId"]]: configure.Launched(
            name=node_of[i["InstanceId"]],
            instance_id=i["InstanceId"],
            private_ip=i.get("PrivateIpAddress", ""),
            public_ip=i.get("PublicIpAddress", ""),
            zone=i.get("Placement", {}).get("AvailabilityZone", ""),
        )
        for i in aws.instances_by_id(list(new.values()))
    }
    # as ``up`` reads them: a --no-configure cluster's consoles once (``ddpctl configure`` reads them again)
    host_keys = configure.collect_host_keys(list(launched.values()), aws.console_output, progress, wait=plan.configure)
    gone = tuple(n for n, i in detail.nodes.items() if n not in new and states.get(i) not in ("pending", "running"))
    return Replacements(new, launched, host_keys, gone)


def _launch(aws: Aws, state: ClusterState, store: StateStore, plan: AwsPlan, lost: Lost) -> str:
    """One replacement instance, its launch recorded before it is made; its id, recorded as the node's."""
    inst = only(state, "instances")
    detail = InstancesDetail.of(inst)
    image = aws.image(detail.ami) or {}
    placement = any(r.kind == "placement-group" and r.status == ResourcePhase.CREATED for r in state.resources)
    request = replacement_request(
        plan,
        detail,
        root_device=image.get("RootDeviceName") or "/dev/sda1",
        subnet_id=subnet_of(state.resources, detail, plan.subnet_id),
        group_id=SecurityGroupDetail.of(only_created(state, "security-group")).aws_id,
        placement_group=plan.unique_name if placement else None,
        lost=lost,
    )
    replace(detail, replacing={**detail.replacing, lost.node: request["ClientToken"]}).put(inst)
    store.save(state)
    faults.point("before", "replacement")
    [made] = instances.run_instances(
        aws, request, detail.az, lambda: "no room for the node's replacement in the region's spot quota"
    )
    faults.point("after", "replacement")  # made in EC2, not yet in the state: down finds it by tag
    replaced(InstancesDetail.of(inst), lost, made["InstanceId"]).put(inst)
    store.save(state)
    return str(made["InstanceId"])


def _configure(state: ClusterState, store: StateStore, plan: AwsPlan, done: Replacements, progress: Progress) -> None:
    """The SSH files with the new instances and their host keys, site.yml limited to them, then
    ``ssh_mesh`` on every node; the nodes recorded as the play reported them."""
    new = done.new
    files, infos = _write_ssh_files(state, plan, done)
    store.save(state)
    cpus = configure.wait_for_ssh([n.ssh for n in infos if n.ssh is not None], progress)
    key_dir = Path(plan.cluster_dir) / "keys"
    report = run_site(str(files.inventory), state.nodes, key_dir, progress, state.spec.playbook_vars, limit=list(new))
    state.nodes = with_nodes(state.nodes, record_nodes(infos, report, cpus))
    store.save(state)
    reached = [n.name for n in state.nodes if n.name not in done.gone]  # a node lost meanwhile: its own turn
    mesh = Play(tags="ssh_mesh")
    run_site(str(files.inventory), state.nodes, key_dir, progress, state.spec.playbook_vars, play=mesh, limit=reached)


def _write_ssh_files(
    state: ClusterState, plan: AwsPlan, done: Replacements
) -> tuple[configure.SshFiles, list[NodeInfo]]:
    """The SSH files with the new instances and their host keys (the others' kept), and the new nodes
    in ``state`` at their new addresses, as the old ones were until site.yml reports them."""
    new = done.new
    launched = launched_nodes(state, plan.private_ip, done.launched)
    cluster_dir = Path(plan.cluster_dir)
    known = cluster_dir / "known_hosts"
    old_keys = known_host_keys(known.read_text() if known.is_file() else "", launched, plan.private_ip)
    host_keys = {k: v for k, v in old_keys.items() if k not in new} | done.host_keys
    files = configure.cluster_files(plan, launched, host_keys)
    hosts = {n.name: configure.cluster_host(plan, n, files) for n in done.launched.values()}
    old = {n.name: n for n in state.nodes}
    infos = [
        replace(old[n.name], host=n.private_ip, ssh=hosts[n.name])
        for n in launched
        if n.name in new  # the new machine, as the old one was until site.yml reports it
    ]
    state.nodes = with_nodes(state.nodes, infos)
    return files, infos


def adopt(
    state: ClusterState, store: StateStore, plan: AwsPlan, by_head: dict[str, dict[str, str]], progress: Progress
) -> None:
    """The nodes the run's supervisor on the head replaced (``runs/head_replace.py``), recorded here: each new
    instance that is the cluster's (its tags: ``ours``) and runs, as its node's, at the addresses EC2
    reports, with the host keys its console printed; the SSH files rewritten. A node whose record names
    its instance already: nothing. One that is not the cluster's: left out, said."""
    inst = only(state, "instances")
    detail = InstancesDetail.of(inst)
    wanted = {
        node: doc.get("instance", "")
        for node, doc in by_head.items()
        if node in detail.nodes and doc.get("instance") and doc.get("instance") != detail.nodes[node]
    }
    if not wanted:
        return
    aws = Aws(plan.region)
    found = {
        i["InstanceId"]: i
        for i in aws.instances_by_id(list(wanted.values()))
        if ours(i, plan) and i["State"]["Name"] in ("pending", "running")
    }
    launched: dict[str, configure.Launched] = {}
    for node, instance in wanted.items():
        if instance not in found:
            progress(f"{node}: the head node's replacement {instance} is not a running instance of the cluster")
            continue
        i = found[instance]
        zone = i.get("Placement", {}).get("AvailabilityZone", "")
        public, private = i.get("PublicIpAddress", ""), i.get("PrivateIpAddress", "")
        launched[node] = configure.Launched(node, instance, private, public, zone)
        detail = replaced(detail, Lost(node, detail.nodes[node], ""), instance)
    if not launched:
        return
    keys = configure.collect_host_keys(list(launched.values()), aws.console_output, progress, wait=False)
    done = Replacements({n: each.instance_id for n, each in launched.items()}, launched, keys)
    detail.put(inst)
    _write_ssh_files(state, plan, done)
    store.save(state)
    progress(
        f"{', '.join(done.new)} replaced by the head node: {', '.join(f'{n} is {i}' for n, i in done.new.items())}"
    )
