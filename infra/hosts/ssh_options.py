"""What OpenSSH makes of a host: the options an inventory hands it, resolved by ``ssh -G``.

ddpctl connects with paramiko, but lets OpenSSH read the configuration, so that every host that
``ansible -m ping`` reaches with an inventory, ddpctl reaches with the same one: ``ansible_host``,
``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``, any option in
``ansible_ssh_common_args``/``ansible_ssh_extra_args`` (``-o Key=Value``, ``-F``, ``-J``, ``-i``,
``-p``...), the user's ``~/.ssh/config`` (aliases, ``IdentityFile``, ``ProxyJump``,
``ProxyCommand``, ``UserKnownHostsFile``). ``ssh -G`` prints the configuration OpenSSH would use
(it connects nowhere); ``resolve`` reads it back. Where there is no ``ssh`` binary, the inventory's
own values and the ``-F`` file (read by paramiko) stand in.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from ..model.errors import DdpctlError
from ..model.host import Host


@dataclass(frozen=True)
class Resolved:
    hostname: str
    user: str | None
    port: int
    identity_files: tuple[str, ...]  # those that exist, in OpenSSH's order
    identities_only: bool
    known_hosts: tuple[str, ...]  # the user's, then the global ones, those that exist
    proxy_jump: str | None  # "[user@]host[:port][,...]"
    proxy_command: str | None


def openssh_args(host: Host) -> list[str]:
    """The options OpenSSH gets for ``host``, in Ansible's order: what the inventory's own variables
    say first (so they win, as with Ansible), then its common and extra args."""
    args: list[str] = []
    if host.port != 22:  # 22: the default, or the config's Port, as Ansible leaves it
        args += ["-o", f"Port={host.port}"]
    if host.key_file:  # as Ansible passes it: no IdentitiesOnly, so the agent's keys are offered too
        args += ["-o", f"IdentityFile={host.key_file}"]
    if host.user:
        args += ["-o", f"User={host.user}"]
    if host.ssh_args:
        args += list(host.ssh_args)
    elif host.ssh_config:  # a host recorded before ssh_args existed
        args += ["-F", host.ssh_config]
    return args


def resolve(host: Host) -> Resolved:
    """``host`` as OpenSSH would connect to it."""
    ssh = shutil.which("ssh")
    if ssh is None:
        return _without_openssh(host)
    found = subprocess.run([ssh, "-G", *openssh_args(host), host.address], capture_output=True, text=True)
    if found.returncode != 0:
        reason = (found.stderr.strip().splitlines() or ["ssh -G failed"])[-1]
        raise DdpctlError(f"{host.name}: OpenSSH cannot read its options ({reason}): check ansible_ssh_common_args")
    return parse_g(found.stdout)


def parse_g(text: str) -> Resolved:
    """``ssh -G`` output (``key value`` lines) as a ``Resolved``."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        values.setdefault(key.lower(), []).append(value.strip())

    def one(key: str) -> str | None:
        got = values.get(key)
        return got[0] if got and got[0].lower() != "none" else None

    def files(*keys: str) -> tuple[str, ...]:
        paths = [os.path.expanduser(p) for key in keys for v in values.get(key, []) for p in shlex.split(v)]
        return tuple(dict.fromkeys(p for p in paths if os.path.isfile(p)))

    return Resolved(
        hostname=one("hostname") or "",
        user=one("user"),
        port=int(one("port") or 22),
        identity_files=files("identityfile"),
        identities_only=(one("identitiesonly") or "no").lower() == "yes",
        known_hosts=files("userknownhostsfile", "globalknownhostsfile"),
        proxy_jump=one("proxyjump"),
        proxy_command=one("proxycommand"),
    )


def _without_openssh(host: Host) -> Resolved:
    import paramiko

    cfg = (
        paramiko.SSHConfig.from_path(os.path.expanduser(host.ssh_config)).lookup(host.address)
        if host.ssh_config
        else {}
    )
    keys = [host.key_file] if host.key_file else list(cfg.get("identityfile", []))
    known = cfg.get("userknownhostsfile", "~/.ssh/known_hosts").split() + ["/etc/ssh/ssh_known_hosts"]
    return Resolved(
        hostname=cfg.get("hostname", host.address),
        user=host.user or cfg.get("user"),
        port=host.port if host.port != 22 or "port" not in cfg else int(cfg["port"]),
        identity_files=tuple(k for k in map(os.path.expanduser, keys) if os.path.isfile(k)),
        identities_only=False,  # as Ansible: the agent is asked too
        known_hosts=tuple(k for k in map(os.path.expanduser, known) if os.path.isfile(k)),
        proxy_jump=cfg.get("proxyjump"),
        proxy_command=cfg.get("proxycommand"),
    )
