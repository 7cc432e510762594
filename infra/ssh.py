"""SSH connections to nodes (fabric/paramiko), strict about host keys.

Fabric trusts any host key by default; ddpctl never does. Keys come from the inventory (or the
ssh config it names with ``-F``), host keys from the known_hosts files that config names (default
``~/.ssh/known_hosts``), and an unknown host key is refused. A ``ProxyJump`` in that config (one
hop, ``[user@]host[:port]``, looked up in the same config as OpenSSH does with ``-F``) is
connected first, just as strictly, and the connection goes through it.
"""

from __future__ import annotations

import functools
import getpass
import os
import shlex
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DdpctlError
from .inventory import Host, parse_port

if TYPE_CHECKING:  # pragma: no cover
    import fabric

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")


def connect(host: Host, timeout: float = 10.0, *, follow_jump: bool = True) -> fabric.Connection:
    """An open, strictly checked connection to ``host`` (through its ProxyJump host, if any)."""
    import fabric
    import paramiko

    hostname, user, port = host.address, host.user, host.port
    key_files = [host.key_file] if host.key_file else []
    known_hosts: list[str] = []
    jump = ""
    if host.ssh_config:
        cfg = paramiko.SSHConfig.from_path(os.path.expanduser(host.ssh_config)).lookup(host.address)
        hostname = cfg.get("hostname", hostname)
        user = user or cfg.get("user")
        if "port" in cfg and host.port == 22:
            port = parse_port(cfg["port"], f"Port for {host.address} in {host.ssh_config}")
        key_files = key_files or list(cfg.get("identityfile", []))
        known_hosts = cfg.get("userknownhostsfile", "").split()
        if follow_jump and cfg.get("proxyjump", "none").lower() != "none":
            jump = cfg["proxyjump"]
    gateway = _connect_jump(host, jump, timeout) if jump else None
    # No key file named: the agent's keys and ~/.ssh/id_* (as ssh does). key_filename is left out
    # then, not None: fabric iterates it (a TypeError for every host without ansible_ssh_private_key_file).
    connect_kwargs = {"look_for_keys": not key_files, "allow_agent": not key_files}
    if key_files:
        connect_kwargs["key_filename"] = [os.path.expanduser(k) for k in key_files]
    conn = (fabric.Connection if gateway is None else _jumped_connection())(
        hostname,
        user=user or getpass.getuser(),
        port=port,
        connect_timeout=timeout,
        config=fabric.Config(overrides={"load_ssh_configs": False}),
        connect_kwargs=connect_kwargs,
        gateway=gateway,
    )
    for path in known_hosts or DEFAULT_KNOWN_HOSTS:
        path = os.path.expanduser(path)
        if Path(path).is_file():
            conn.client.load_system_host_keys(path)
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        conn.open()
    except Exception as exc:
        conn.close()
        raise DdpctlError(f"{host.name} ({user or getpass.getuser()}@{hostname}:{port}): {explain(exc)}") from None
    return conn


def _connect_jump(host: Host, jump: str, timeout: float) -> fabric.Connection:
    """The ``ProxyJump`` host of ``host``'s ssh config, connected (strictly, as any other)."""
    if "," in jump:
        raise DdpctlError(f"{host.name}: ProxyJump {jump} has more than one hop: ddpctl follows one")
    user, _, rest = jump.rpartition("@")
    address, _, port = rest.partition(":")
    number = parse_port(port or 22, f"{host.name}: the port of ProxyJump {jump}")
    gateway = Host(
        name=f"{host.name}'s jump host {address}",
        address=address,
        user=user or None,
        port=number,
        ssh_config=host.ssh_config,
    )
    return connect(gateway, timeout, follow_jump=False)  # one hop (a `Host *` ProxyJump would match the jump host too)


@functools.cache
def _jumped_connection() -> type:
    """A fabric Connection that closes its gateway with itself (fabric's leaves it open)."""
    import fabric

    class JumpedConnection(fabric.Connection):
        def close(self) -> None:
            try:
                super().close()
            finally:
                if isinstance(self.gateway, fabric.Connection):
                    self.gateway.close()

    return JumpedConnection


def explain(exc: BaseException) -> str:
    """An SSH failure as something to do about it."""
    import paramiko

    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, paramiko.AuthenticationException):
        return f"{text}: check ansible_user and ansible_ssh_private_key_file"
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in text:
        return f"{text}: add the host's key to known_hosts (compare it with the host's own key first)"
    if isinstance(exc, paramiko.BadHostKeyException):
        return f"{text}: the host key changed; if that is expected, fix known_hosts"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "no answer (timed out): check ansible_host and that sshd runs there"
    if isinstance(exc, (paramiko.ssh_exception.NoValidConnectionsError, ConnectionError, OSError)):
        return f"{text}: check ansible_host/ansible_port and that sshd runs there"
    return text


def check_reachable(hosts: list[Host], timeout: float = 10.0) -> dict[str, int]:
    """Connect to every host at once; return each host's CPU count, or raise listing every failure."""

    def probe(host: Host) -> tuple[str, int | str]:
        try:
            conn = connect(host, timeout)
        except DdpctlError as exc:
            return host.name, str(exc)
        try:
            out = conn.run("nproc", hide=True, warn=True, timeout=timeout, in_stream=False)
            return host.name, int(out.stdout.strip() or 1) if out.ok else 1
        except Exception as exc:
            return host.name, f"{host.name}: {explain(exc)}"
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        results = dict(pool.map(probe, hosts))
    failed = [v for v in results.values() if isinstance(v, str)]
    if failed:
        raise DdpctlError(
            f"cannot reach {len(failed)} of {len(hosts)} host(s) over SSH, nothing was changed: " + "; ".join(failed)
        )
    return {k: int(v) for k, v in results.items()}


def remote_stop(conn: fabric.Connection, key: str, value: str, mode: str, grace: float = 3.0) -> None:
    """Signal the processes tagged ``key=value`` on the node behind ``conn`` (see node_programs/stop.py)."""
    from .node_programs import source

    cmd = f"python3 -c {shlex.quote(source('stop'))} {key} {shlex.quote(value)} {mode} {grace}"
    try:
        conn.run(cmd, hide=True, warn=True, timeout=grace + 20, in_stream=False)
    except Exception:
        pass


def ssh_argv(host: Host, command: tuple[str, ...] = ()) -> list[str]:
    """OpenSSH's command line for ``host`` as ddpctl connects to it (``ddpctl ssh``): the same user,
    port, key and ssh config (its ProxyJump, its known_hosts files), host keys checked strictly.
    ``command``: run it there (quoted as given) instead of a login shell."""
    argv = ["ssh", "-o", "StrictHostKeyChecking=yes"]
    if host.ssh_config:
        argv += ["-F", os.path.expanduser(host.ssh_config)]
    if host.user:
        argv += ["-l", host.user]
    if host.port != 22 or not host.ssh_config:  # 22 with a config: the config's Port, as connect() does
        argv += ["-p", str(host.port)]
    if host.key_file:
        argv += ["-i", os.path.expanduser(host.key_file), "-o", "IdentitiesOnly=yes"]
    argv.append(host.address)
    if command:
        argv.append(shlex.join(command))
    return argv
