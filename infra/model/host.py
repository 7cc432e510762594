"""A node as ddpctl reaches it over SSH: a host of an Ansible inventory, or one a provider made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    user: str | None = None
    port: int = 22
    key_file: str | None = None
    ssh_config: str | None = None  # from ansible_ssh_common_args "-F FILE"
    #: ansible_ssh_common_args + ansible_ssh_extra_args, as OpenSSH options (infra/hosts/ssh_options.py)
    ssh_args: tuple[str, ...] = ()
    vars: dict[str, Any] = field(default_factory=dict)
    #: "" : a host of the user's inventory; else the provider that made it ("aws", "pcluster"), whose
    #: words an SSH failure's hint uses (``hosts.connections.explain``): there is no inventory to fix
    made_by: str = ""
