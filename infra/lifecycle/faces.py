"""What the CLI and the Python API need of the floors below ``lifecycle/`` to parse, check and
print, named here so that they reach ``infra/`` only through ``lifecycle/`` and ``runs/``
(tests/unit/test_layers.py): the providers' names and declared options (``--provider``'s choices,
``up``'s flags, ``ddpctl.toml``'s keys), a provider's live status, and how a node is reached by
hand (``ddpctl ssh``'s command line, ``ddpctl playbooks``' folder).

Each name is imported from its module when first asked for, so that ``ddpctl --help`` imports only
the light ones (the providers' registry, not Ansible's or SSH's modules)."""

from __future__ import annotations

import importlib
from typing import Any

#: each name -> (its module, relative to infra/, and its name there)
_WHERE = {
    "ANSIBLE_CFG": ("hosts.ansible", "ANSIBLE_CFG"),
    "PLAYBOOKS": ("hosts.ansible", "PLAYBOOKS"),
    "SSH_CONNECT_TIMEOUT_S": ("hosts.connections", "SSH_CONNECT_TIMEOUT_S"),
    "ssh_argv": ("hosts.connections", "ssh_argv"),
    "PROVIDER_NAMES": ("providers.registry", "NAMES"),
    "all_options": ("providers.registry", "all_options"),
    "check_given": ("providers.registry", "check_given"),
    "LiveStatus": ("providers.base", "LiveStatus"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _WHERE[name]
    return getattr(importlib.import_module(f"{__package__.rpartition('.')[0]}.{module}"), attr)
