"""Configuring launched instances exactly like on-prem hosts: an inventory, then playbooks/site.yml.

``up`` writes ``inventory.ini``, ``ssh_config`` and ``known_hosts`` into the cluster dir (so
``ansible-playbook -i ~/.ddpctl/clusters/NAME/inventory.ini playbooks/site.yml`` works by hand too),
reads every node's SSH host keys from its console output (cloud-init prints them there) so that
host keys are checked strictly as everywhere else in ddpctl, waits for SSH, runs ``site.yml``
through ``infra.hosts.ansible.run_playbook`` and records the nodes as the play reported them, as the
on-prem provider does.

Nothing of the controller's AWS configuration reaches a node: no instance profile, no user data,
no environment forwarded (ansible-runner gets only PATH and ANSIBLE_* variables).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...model.errors import DdpctlError
from ...model.host import Host
from ...model.progress import Progress, step
from ...model.state import NodeInfo
from ...model.store import atomic_write

if TYPE_CHECKING:  # pragma: no cover
    from .plan import AwsPlan

HOST_KEYS_BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
HOST_KEYS_END = "-----END SSH HOST KEY KEYS-----"
HOST_KEYS_TIMEOUT_S = 600.0
SSH_TIMEOUT_S = 300.0
POLL_S = 10.0


@dataclass(frozen=True)
class Launched:
    """One instance as EC2 reported it, in node order (head first)."""

    name: str
    instance_id: str
    private_ip: str
    public_ip: str
    zone: str

    def address(self, private: bool) -> str:
        return self.private_ip if private or not self.public_ip else self.public_ip


@dataclass(frozen=True)
class SshFiles:
    ssh_config: Path
    known_hosts: Path
    inventory: Path


def host_keys_from_console(text: str) -> list[str]:
    """``TYPE BASE64`` host keys from the block cloud-init prints to the console."""
    if HOST_KEYS_BEGIN not in text:
        return []
    block = text.split(HOST_KEYS_BEGIN, 1)[1].split(HOST_KEYS_END, 1)[0]
    keys = []
    for line in block.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
            keys.append(f"{parts[0]} {parts[1]}")
    return keys


def inventory_path(cluster_dir: Path) -> Path:
    """The Ansible inventory ``up`` writes for the cluster (``ddpctl configure`` runs site.yml with it)."""
    return cluster_dir / "inventory.ini"


def write_files(
    cluster_dir: Path,
    nodes: list[Launched],
    *,
    user: str,
    key_path: str,
    private: bool,
    host_keys: dict[str, list[str]],
    head_controller: bool = False,
) -> SshFiles:
    """The cluster's ssh_config, known_hosts and Ansible inventory (all 0600, in the cluster dir);
    ``head_controller``: the head (the first node) gets ddpctl's own environment (``up
    --head-instance-profile``: the head_controller role)."""
    known_hosts = cluster_dir / "known_hosts"
    ssh_config = cluster_dir / "ssh_config"
    inventory = inventory_path(cluster_dir)
    lines = []
    for node in nodes:
        names = ",".join(sorted({node.address(private), node.private_ip}))
        lines += [f"{names} {key}" for key in host_keys.get(node.name, [])]
    atomic_write(known_hosts, "".join(line + "\n" for line in lines))
    aliases = "".join(f"Host {n.name}\n    HostName {n.address(private)}\n" for n in nodes)  # ssh -F FILE node1
    atomic_write(
        ssh_config,
        "# written by ddpctl for this cluster: strict host keys from the nodes' console output\n" + aliases + "Host *\n"
        f"    User {user}\n"
        f"    IdentityFile {key_path}\n"
        "    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {known_hosts}\n"
        "    StrictHostKeyChecking yes\n",
    )
    rows = ["[ddp_nodes]"]
    rows += [f"{n.name} ansible_host={n.address(private)} ddpctl_node_address={n.private_ip}" for n in nodes]
    if head_controller and nodes:
        rows[1] += " head_controller_enabled=true"
    rows += [
        "",
        "[ddp_nodes:vars]",
        f"ansible_user={user}",
        f"ansible_ssh_private_key_file={key_path}",
        f"ansible_ssh_common_args={shlex.quote('-F ' + str(ssh_config))}",
    ]
    atomic_write(inventory, "\n".join(rows) + "\n")
    return SshFiles(ssh_config, known_hosts, inventory)


def cluster_files(plan: AwsPlan, nodes: list[Launched], host_keys: dict[str, list[str]]) -> SshFiles:
    """``write_files`` in the cluster's folder, as ``plan`` says (its user, key, addresses, head profile)."""
    return write_files(
        Path(plan.cluster_dir),
        nodes,
        user=plan.ssh_user,
        key_path=plan.key_path,
        private=plan.private_ip,
        host_keys=host_keys,
        head_controller=bool(plan.head_instance_profile),
    )


def cluster_host(plan: AwsPlan, node: Launched, files: SshFiles) -> Host:
    """``ssh_host`` as ``plan`` says."""
    return ssh_host(node, files, user=plan.ssh_user, key_path=plan.key_path, private=plan.private_ip)


def ssh_host(node: Launched, files: SshFiles, *, user: str, key_path: str, private: bool) -> Host:
    return Host(
        name=node.name,
        address=node.address(private),
        user=user,
        key_file=key_path,
        ssh_config=str(files.ssh_config),
        made_by="aws",  # an EC2 instance ddpctl launched (pcluster's head node too)
    )


def node_infos(nodes: list[Launched], hosts: list[Host], *, cpus: int, gpus: int) -> list[NodeInfo]:
    """Nodes before configuration: reachable at their private address by the other nodes."""
    return [
        NodeInfo(name=n.name, host=n.private_ip, workdir="", cpus=cpus, gpus=gpus, ssh=h) for n, h in zip(nodes, hosts)
    ]


def collect_host_keys(
    nodes: list[Launched],
    console: Callable[[str], str],
    progress: Progress,
    timeout: float = HOST_KEYS_TIMEOUT_S,
    *,
    wait: bool = True,
) -> dict[str, list[str]]:
    """Poll each node's console output until cloud-init has printed its host keys (``wait=False``:
    one look, and what the consoles hold now)."""
    with step(progress, f"waiting for the host keys of {len(nodes)} node(s) (console output)"):
        return _collect_host_keys(nodes, console, progress, timeout, wait)


def _collect_host_keys(
    nodes: list[Launched], console: Callable[[str], str], progress: Progress, timeout: float, wait: bool
) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    deadline = time.monotonic() + timeout
    while True:
        for node in nodes:
            if node.name not in keys:
                found = host_keys_from_console(console(node.instance_id))
                if found:
                    keys[node.name] = found
        missing = [n.name for n in nodes if n.name not in keys]
        if not missing or not wait:
            return keys
        if time.monotonic() > deadline:
            raise DdpctlError(
                f"no SSH host keys in the console output of {', '.join(missing)} after {timeout:.0f} s: "
                "the instances may not have booted; `ddpctl down` deletes the cluster"
            )
        progress(f"waiting for the host keys of {', '.join(missing)} (console output)")
        time.sleep(POLL_S)


def without_host_keys(known_hosts: Path, nodes: list[Launched], private: bool) -> list[Launched]:
    """The nodes that ``known_hosts`` has no key for."""
    known = set()
    if known_hosts.is_file():
        for line in known_hosts.read_text().splitlines():
            known.update(line.split(" ", 1)[0].split(","))
    return [n for n in nodes if n.address(private) not in known]


def wait_for_ssh(hosts: list[Host], progress: Progress, timeout: float = SSH_TIMEOUT_S) -> dict[str, int]:
    """Until every host answers SSH (a line per failed look), the wait the activity going on."""
    with step(progress, f"waiting for SSH on {len(hosts)} node(s)"):
        return _wait_for_ssh(hosts, progress, timeout)


def _wait_for_ssh(hosts: list[Host], progress: Progress, timeout: float) -> dict[str, int]:
    from ...hosts.connections import check_reachable

    deadline = time.monotonic() + timeout
    while True:
        try:
            return check_reachable(hosts)
        except DdpctlError as exc:
            if time.monotonic() > deadline:
                raise
            progress(f"waiting for SSH: {str(exc)[:160]}")
            time.sleep(POLL_S)
