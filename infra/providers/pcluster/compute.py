"""A ParallelCluster's compute nodes: waiting for them to start, and reaching them from here.

After CREATE_COMPLETE, ParallelCluster's clustermgtd launches the static compute nodes; ``up``
waits until ``pcluster describe-cluster-instances`` lists ``--nodes`` of them running in ddpctl's
queue, reporting progress, and stops with one line when ParallelCluster gives up (compute fleet
PROTECTED) or the wait runs out. The summaries and messages here are pure.

``ddpctl check`` tests the links the jobs use, between the compute nodes, not the login node. Only
the head node is reachable from here (its security group admits SSH from the user's /32; the
compute nodes admit traffic from the cluster only), so every SSH session to a compute node goes
through the head node (``ProxyJump``, a ``direct-tcpip`` channel on the head's own connection) and
is checked as strictly as the head's, against a known_hosts file written here.

How the compute nodes' host keys are trusted: ``ssh-keyscan`` runs *on the head node* against the
compute nodes' private addresses, at each ``check``. The head's own key is known strictly (from its
EC2 console output, at ``up``); the compute nodes' addresses come from ParallelCluster's API
(describe-cluster-instances); and the head reaches them over the cluster's VPC subnet, where AWS
delivers a packet for a private address only to the network interface that owns it (no ARP or IP
spoofing inside a VPC). So a key read there can only be forged by someone who controls the head
node, and whoever does already controls every job: sbatch runs go through the head node's Slurm,
which picks the compute nodes and hands them the job. Learning the keys through the head therefore
adds no trust beyond what ``run`` already places in it. Rejected: the compute nodes' EC2 console
output (it needs ``ec2:GetConsoleOutput`` at every check, lags minutes behind a boot, and
ParallelCluster replaces unhealthy compute nodes with new instances and keys at any time), and
trust on first use from here (impossible: this machine cannot reach them, which is the point). The
keys are read again at each check, since compute nodes come and go; the SSH sessions that follow
must present exactly those keys.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ...launch.supervise import OutputLine
from ...model.errors import DdpctlError
from ...model.host import Host
from ...model.state import ClusterState, NodeInfo
from ...model.store import atomic_write
from ..aws import pricing
from .cli import ClusterInstance
from .config import QUEUE
from .plan import PclusterPlan

#: The head node's alias in the compute nodes' ssh_config (their ProxyJump).
JUMP_ALIAS = "head"
KEYSCAN_TIMEOUT_S = 5
LOG_HINT = "/var/log/parallelcluster/clustermgtd and slurm_resume.log on the head node"

# ---- waiting for the compute fleet (pure) ------------------------------------------------------


def in_queue(instances: list[ClusterInstance]) -> list[ClusterInstance]:
    """ddpctl's compute nodes: those in its Slurm queue (all of them, where ParallelCluster names none)."""
    return [i for i in instances if i.node_type in ("", "ComputeNode") and i.queue in ("", QUEUE)]


def running(instances: list[ClusterInstance]) -> list[ClusterInstance]:
    """The running compute nodes of ddpctl's queue, by address (a stable order for names and checks)."""
    return sorted((i for i in in_queue(instances) if i.state == "running"), key=lambda i: _ip_key(i.private_ip))


def fleet_summary(instances: list[ClusterInstance], want: int) -> str:
    """'1 of 2 running (1 pending)'."""
    states = Counter(i.state or "unknown" for i in in_queue(instances))
    up = states.pop("running", 0)
    others = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"{up} of {want} running" + (f" ({others})" if others else "")


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.0f} min"


def not_started(plan: PclusterPlan, summary: str, waited_s: float) -> str:
    """The compute nodes did not all start in time: what to check, and how to stop paying."""
    a = plan.aws
    quota = pricing.vcpu_quota(a.instance_type, a.spot)
    capacity = f"{'Spot ' if a.spot else ''}capacity for {a.instance_type}"
    return (
        f"the compute nodes of {plan.pcluster_name} did not all start in {duration(waited_s)} ({summary}): check the "
        f"vCPU quota '{quota.name}' ({quota.code}) in {plan.region}, {capacity} in the subnet's zone, and "
        f"{LOG_HINT}; the cluster is billed until `ddpctl down --name {plan.cluster}` deletes it"
    )


def protected(plan: PclusterPlan, summary: str) -> str:
    """ParallelCluster's protected mode: it stopped launching nodes that kept failing to bootstrap."""
    return (
        f"ParallelCluster stopped launching the compute nodes of {plan.pcluster_name} (compute fleet PROTECTED: "
        f"they failed to bootstrap again and again; {summary}): see {LOG_HINT}, and a compute instance's EC2 "
        f"console output; `ddpctl down --name {plan.cluster}` deletes the cluster"
    )


def _ip_key(ip: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in ip.split("."))
    except ValueError:
        return (1 << 16,)


# ---- reaching the compute nodes through the head node (pure) ----------------------------------


def node_name(instance: ClusterInstance) -> str:
    """EC2's own host name for a private address: ``ip-10-0-1-23``."""
    return "ip-" + instance.private_ip.replace(".", "-")


def ssh_config_text(head: Host, head_known_hosts: str, nodes: list[ClusterInstance], known_hosts: Path) -> str:
    """An ssh_config (for ddpctl and for ``ssh -F``) that reaches each compute node through the head."""
    lines = ["# written by `ddpctl check`: the compute nodes, through the head node, strict host keys"]
    for node in nodes:
        lines += [
            f"Host {node_name(node)}",
            f"    HostName {node.private_ip}",
            f"    ProxyJump {JUMP_ALIAS}",
            f"    UserKnownHostsFile {known_hosts}",
        ]
    lines += [
        f"Host {JUMP_ALIAS}",
        f"    HostName {head.address}",
        f"    Port {head.port}",
        f"    UserKnownHostsFile {head_known_hosts}",
    ]
    lines += [
        "Host *",
        *([f"    User {head.user}"] if head.user else []),
        *([f"    IdentityFile {head.key_file}", "    IdentitiesOnly yes"] if head.key_file else []),
        "    StrictHostKeyChecking yes",
        "    GlobalKnownHostsFile /dev/null",
    ]
    return "\n".join(lines) + "\n"


def keyscan_command(addresses: list[str]) -> str:
    return f"ssh-keyscan -T {KEYSCAN_TIMEOUT_S} " + " ".join(shlex.quote(a) for a in addresses)


def parse_keyscan(text: str, addresses: list[str]) -> dict[str, list[str]]:
    """``ssh-keyscan`` output -> {address: ["TYPE BASE64", ...]}, for the addresses asked about only."""
    keys: dict[str, list[str]] = {a: [] for a in addresses}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not parts[0].startswith("#") and parts[0] in keys:
            keys[parts[0]].append(f"{parts[1]} {parts[2]}")
    return keys


def compute_node_infos(head: NodeInfo, nodes: list[ClusterInstance], ssh_config: Path) -> list[NodeInfo]:
    """The compute nodes as the launcher sees them: the head node's Python, env file, bundle and work
    dir (all in the /home they share), each reached through the head node."""
    user, key = head.ssh.user, head.ssh.key_file
    return [
        replace(
            head,
            name=node_name(n),
            host=n.private_ip,
            ifname=None,
            nproc=0,
            ssh=Host(
                name=node_name(n),
                address=node_name(n),
                user=user,
                key_file=key,
                ssh_config=str(ssh_config),
                made_by="pcluster",
            ),
        )
        for n in nodes
    ]


# ---- the adapter -------------------------------------------------------------------------------


def head_known_hosts(head: Host) -> str:
    """The known_hosts file the head node's own ssh_config names (written at ``up`` from its console)."""
    import paramiko

    if head.ssh_config and Path(head.ssh_config).is_file():
        found = paramiko.SSHConfig.from_path(head.ssh_config).lookup(head.address).get("userknownhostsfile", "")
        if found:
            return found.split()[0]
    raise DdpctlError(
        f"no known_hosts recorded for the head node ({head.ssh_config or 'no ssh_config'}): run `ddpctl up` again"
    )


def learn_host_keys(head: Host, addresses: list[str]) -> dict[str, list[str]]:
    """The compute nodes' host keys, read by ssh-keyscan on the head node (see the module's docstring)."""
    from ...hosts.connections import connect, explain

    conn = connect(head)
    try:
        out = conn.run(
            keyscan_command(addresses),
            hide=True,
            warn=True,
            timeout=KEYSCAN_TIMEOUT_S * len(addresses) + 30,
            in_stream=False,
        )
    except Exception as exc:
        raise DdpctlError(f"ssh-keyscan on the head node failed: {explain(exc)}") from None
    finally:
        conn.close()
    keys = parse_keyscan(out.stdout, addresses)
    missing = [a for a, found in keys.items() if not found]
    if missing:
        said = " ".join(line.strip() for line in out.stderr.splitlines() if line.strip() and not line.startswith("#"))
        raise DdpctlError(
            f"the head node could not read the SSH host key of {', '.join(missing)} (ssh-keyscan: "
            f"{said[:200] or f'no answer in {KEYSCAN_TIMEOUT_S} s'}): are those compute nodes up, with sshd running?"
        )
    return keys


def check_view(
    state: ClusterState, instances: list[ClusterInstance], cluster_dir: Path, progress: Callable[[str], None]
) -> tuple[ClusterState, Callable[[Callable[[OutputLine], None]], object]]:
    """The cluster as ``ddpctl check`` sees it: its running compute nodes, each behind the head node,
    and the executor that reaches them (their host keys learnt on the head node first)."""
    from ...launch.ssh_executor import SshExecutor

    if not state.nodes or not state.nodes[0].ssh:
        raise DdpctlError(
            f"cluster {state.name!r} has no head node recorded ({state.status}): bring it up with `ddpctl up`"
        )
    head_info = state.nodes[0]
    head = head_info.ssh
    nodes = running(instances)
    if not nodes:
        listed = len(in_queue(instances))
        raise DdpctlError(
            f"no compute node of {state.name!r} is running (describe-cluster-instances lists {listed} in queue "
            f"{QUEUE!r}): nothing to check; see {LOG_HINT}"
        )
    addresses = [n.private_ip for n in nodes]
    if len(nodes) == 1:
        progress(f"only one compute node of {state.name!r} is running ({nodes[0].private_ip}): no link to check")
    progress(
        f"{len(nodes)} compute node(s) running ({', '.join(addresses)}): reaching them through the head node "
        f"{head.address}, host keys read there with ssh-keyscan"
    )
    keys = learn_host_keys(head, addresses)
    known_hosts, ssh_config = cluster_dir / "compute_known_hosts", cluster_dir / "compute_ssh_config"
    atomic_write(known_hosts, "".join(f"{a} {k}\n" for a in addresses for k in keys[a]))
    atomic_write(ssh_config, ssh_config_text(head, head_known_hosts(head), nodes, known_hosts))
    compute = compute_node_infos(head_info, nodes, ssh_config)
    view = replace(state, nodes=compute)
    return view, lambda sink: SshExecutor({n.name: n.ssh for n in compute}, sink)
