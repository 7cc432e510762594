"""Hosts from an Ansible inventory (INI or YAML), read with Ansible's own parser.

``ansible-inventory --list`` does the parsing (so every inventory Ansible accepts works); ``hosts_from_list``
turns its JSON into typed ``Host`` values, pure and unit-tested.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..model.errors import UsageError
from ..model.host import Host

#: The group ddpctl uses when the inventory has it; otherwise every host, in inventory order.
NODES_GROUP = "ddp_nodes"


def load_inventory(path: str) -> list[Host]:
    """Parse ``path`` with ``ansible-inventory`` and return the cluster's hosts, head node first."""
    try:
        is_file = Path(path).is_file()
    except OSError as exc:  # a name too long, a loop of links...
        raise UsageError(
            f"inventory {path!r}: {exc.strerror or exc}: give an Ansible INI or YAML inventory file"
        ) from None
    if not is_file:
        raise UsageError(f"inventory {path!r} does not exist: give an Ansible INI or YAML inventory file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"inventory {path!r} cannot be read: `chmod u+r {path}`, or give an inventory you can read")
    exe = Path(sys.executable).with_name("ansible-inventory")
    cmd = [str(exe) if exe.exists() else "ansible-inventory", "-i", path, "--list"]
    env = {
        **os.environ,
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
    }
    with tempfile.TemporaryDirectory(prefix="ddpctl-inventory-") as tmp:
        # Ansible writes ~/.ansible/tmp unless told otherwise: keep the user's home untouched.
        env.setdefault("ANSIBLE_HOME", tmp)
        env.setdefault("ANSIBLE_LOCAL_TEMP", tmp)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
        except FileNotFoundError:
            raise UsageError(
                "ansible-inventory not found: install ddpctl with its dependencies (ansible-core)"
            ) from None
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise UsageError(f"cannot parse inventory {path}: {reason}")
    return hosts_from_list(json.loads(out.stdout), path)


def hosts_from_list(data: dict[str, Any], source: str = "inventory") -> list[Host]:
    hostvars = data.get("_meta", {}).get("hostvars", {})
    if NODES_GROUP in data or NODES_GROUP in _groups_in_order(data, "all"):  # listed, even with no hosts
        names = list(data.get(NODES_GROUP, {}).get("hosts", []))
        if not names:
            raise UsageError(
                f"the {NODES_GROUP} group in {source} has no hosts: add your nodes under [{NODES_GROUP}] "
                "(without that group, every host of the inventory is a node)"
            )
    else:
        names = []
        for group in _groups_in_order(data, "all"):
            for name in data.get(group, {}).get("hosts", []):
                if name not in names:
                    names.append(name)
    if not names:
        raise UsageError(f"{source} lists no hosts: add your nodes under [{NODES_GROUP}]")
    hosts = [_host(name, hostvars.get(name, {}), source) for name in names]
    seen: dict[tuple[str, int], str] = {}
    for host in hosts:
        key = (host.address, host.port)
        if key in seen:
            raise UsageError(
                f"hosts {seen[key]!r} and {host.name!r} are both {host.address}:{host.port} in {source}: list each node once"
            )
        seen[key] = host.name
    return hosts


def _groups_in_order(data: dict[str, Any], group: str) -> list[str]:
    order = [group]
    for child in data.get(group, {}).get("children", []):
        order += _groups_in_order(data, child)
    return order


def parse_port(value: Any, what: str) -> int:
    """An SSH port as an inventory or ssh config gives it (a number, or its text): 1 to 65535.

    Never passed on out of range: paramiko would take 99999 modulo 65536 and report "port 34463".
    """
    try:
        port = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        raise UsageError(f"{what} is {value!r}: give a port number from 1 to 65535")
    return port


def _host(name: str, hv: dict[str, Any], source: str = "inventory") -> Host:
    ssh_config = None
    args = shlex.split(str(hv.get("ansible_ssh_common_args", "")) + " " + str(hv.get("ansible_ssh_extra_args", "")))
    for i, arg in enumerate(args):
        if arg == "-F" and i + 1 < len(args):
            ssh_config = args[i + 1]
        elif arg.startswith("-F") and len(arg) > 2:
            ssh_config = arg[2:]
    for var in ("ansible_host", "ansible_user"):
        if var in hv and not str(hv[var] if hv[var] is not None else "").strip():
            raise UsageError(f"{var} of host {name!r} in {source} is empty: give a value, or leave it out")
    if str(hv.get("ansible_connection", "ssh")) not in ("ssh", "paramiko", "smart"):
        raise UsageError(
            f"host {name!r} in {source} has ansible_connection={hv['ansible_connection']}: ddpctl reaches its nodes "
            "over SSH; remove it (for this machine alone, use --provider local)"
        )
    return Host(
        name=name,
        address=str(hv.get("ansible_host", name)),
        user=hv.get("ansible_user"),
        port=parse_port(hv.get("ansible_port", 22), f"ansible_port of host {name!r} in {source}"),
        key_file=hv.get("ansible_ssh_private_key_file"),
        ssh_config=ssh_config,
        ssh_args=tuple(args),
        vars=dict(hv),
    )
