"""SSH connections to nodes (fabric/paramiko), strict about host keys.

Fabric trusts any host key by default; ddpctl never does. What to connect to, as whom, with which
keys and known_hosts files, through which ``ProxyJump`` hops or ``ProxyCommand``, is what OpenSSH
makes of the host's options (``ssh_options``: ``ssh -G``); an unknown host key is refused
whatever the configuration says, and every jump host is connected just as strictly.
"""

from __future__ import annotations

import functools
import getpass
import shlex
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from ..model.errors import DdpctlError
from ..model.host import Host
from ..tools.trace import traced
from .inventory import parse_port
from .ssh_options import Resolved, openssh_args, resolve

if TYPE_CHECKING:  # pragma: no cover
    import fabric


def connect(host: Host, timeout: float = 10.0) -> fabric.Connection:
    """An open, strictly checked connection to ``host``, as OpenSSH would make it (``ssh_options``):
    through its ProxyJump hosts (each connected just as strictly) or its ProxyCommand."""
    with traced("connect", host.name):  # a round trip, for bench/scale.py (DDPCTL_TRACE)
        r = resolve(host)
        gateway: fabric.Connection | str | None = None
        if r.proxy_jump:
            gateway = _connect_jumps(host, r.proxy_jump, timeout)
        elif r.proxy_command:
            gateway = _expand(r.proxy_command, r)  # fabric runs it as paramiko's ProxyCommand
        return _open(host.name, r, timeout, gateway, host.made_by)


def _open(
    name: str, r: Resolved, timeout: float, gateway: fabric.Connection | str | None, made_by: str = ""
) -> fabric.Connection:
    import fabric
    import paramiko

    user = r.user or getpass.getuser()
    # The identity files OpenSSH would offer, and the agent's keys unless IdentitiesOnly (as ssh).
    # key_filename is left out when there is none, not None: fabric iterates it.
    connect_kwargs: dict = {"look_for_keys": False, "allow_agent": not (r.identities_only and r.identity_files)}
    if r.identity_files:
        connect_kwargs["key_filename"] = list(r.identity_files)
    conn = (_jumped_connection() if isinstance(gateway, fabric.Connection) else fabric.Connection)(
        r.hostname,
        user=user,
        port=r.port,
        connect_timeout=timeout,
        config=fabric.Config(overrides={"load_ssh_configs": False}),
        connect_kwargs=connect_kwargs,
        gateway=gateway,
    )
    for path in r.known_hosts:
        conn.client.load_system_host_keys(path)
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())  # ddpctl's rule, whatever the config says
    try:
        conn.open()
    except Exception as exc:
        conn.close()
        raise DdpctlError(f"{name} ({user}@{r.hostname}:{r.port}): {explain(exc, made_by)}") from None
    return conn


def _connect_jumps(host: Host, jumps: str, timeout: float) -> fabric.Connection:
    """The ProxyJump hosts in order, each reached through the one before (as ``ssh -J a,b``); each
    is looked up in the same ssh config as the host (OpenSSH passes ``-F`` on to the hops)."""
    config = _config_args(host)
    gateway: fabric.Connection | None = None
    for hop in jumps.split(","):
        user, _, rest = hop.strip().rpartition("@")
        address, _, port = rest.partition(":")
        number = parse_port(port or 22, f"{host.name}: the port of ProxyJump {hop}")
        jump = Host(name=f"{host.name}'s jump host {address}", address=address, user=user or None, port=number)
        r = resolve(replace(jump, ssh_args=tuple(config)))
        gateway = _open(jump.name, replace(r, proxy_jump=None), timeout, gateway, host.made_by)
    assert gateway is not None
    return gateway


def _config_args(host: Host) -> list[str]:
    """The ``-F FILE`` among a host's OpenSSH options (what the jump hosts are looked up in)."""
    args = list(host.ssh_args) or (["-F", host.ssh_config] if host.ssh_config else [])
    out = []
    for i, arg in enumerate(args):
        if arg == "-F" and i + 1 < len(args):
            out += ["-F", args[i + 1]]
        elif arg.startswith("-F") and len(arg) > 2:
            out += ["-F", arg[2:]]
    return out


def _expand(command: str, r: Resolved) -> str:
    """ProxyCommand's tokens, as ssh expands them."""
    return (
        command.replace("%h", r.hostname)
        .replace("%p", str(r.port))
        .replace("%r", r.user or getpass.getuser())
        .replace("%%", "%")
    )


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


#: what to check where a node that a provider made cannot be reached (there is no inventory of the user's)
MADE_UNREACHABLE = (
    "check that the cluster's instances run (`ddpctl status`) and that this machine's address is still the one "
    "the cluster's --ssh-cidr lets in (it may have changed since `up`)"
)


def explain(exc: BaseException, made_by: str = "") -> str:
    """An SSH failure as something to do about it: in the user's inventory's terms for their hosts,
    in the provider's (``made_by``: ``Host.made_by``) for nodes it made."""
    import paramiko

    text = str(exc).strip() or type(exc).__name__
    if made_by and isinstance(exc, paramiko.AuthenticationException):
        return f"{text}: the cluster's own key was refused: check --ssh-user (the image's login user)"
    if made_by and isinstance(exc, (socket.timeout, TimeoutError)):
        return f"no answer (timed out): {MADE_UNREACHABLE}"
    if made_by and isinstance(exc, (paramiko.ssh_exception.NoValidConnectionsError, ConnectionError, OSError)):
        return f"{text}: {MADE_UNREACHABLE}"
    if isinstance(exc, paramiko.AuthenticationException):
        return f"{text}: check ansible_user and ansible_ssh_private_key_file"
    if isinstance(exc, paramiko.SSHException) and "No authentication methods" in text:
        return (
            "no key to offer: set ansible_ssh_private_key_file, add the key to ssh-agent, "
            "or name an IdentityFile in your ssh config"
        )
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
            return host.name, f"{host.name}: {explain(exc, host.made_by)}"
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


def remote_stop(
    conn: fabric.Connection, key: str, value: str, mode: str, grace: float = 3.0, also: dict[str, str] | None = None
) -> list[str]:
    """Signal the processes tagged ``key=value`` (and every marker in ``also``) on the node behind
    ``conn`` (see node_programs/stop.py); the lines it printed ([] if it could not be run)."""
    from ..node_programs import command

    extra = "".join(f" {k} {shlex.quote(v)}" for k, v in (also or {}).items())
    cmd = f"{command('python3', 'stop', key, value, mode, str(grace))}{extra}"
    with traced("stop", str(conn.host)):  # a round trip, for bench/scale.py (DDPCTL_TRACE)
        try:
            return conn.run(cmd, hide=True, warn=True, timeout=grace + 20, in_stream=False).stdout.splitlines()
        except Exception:
            return []


def writable_problem(conn: fabric.Connection, path: str) -> str:
    """Why the user behind ``conn`` cannot write or create the directory ``path`` there ("": it can;
    node_programs/writable.py)."""
    from ..node_programs import command

    result = conn.run(
        command("python3", "writable", path),
        hide=True,
        warn=True,
        in_stream=False,
        timeout=60,
    )
    return (result.stdout.strip() or result.stderr.strip() or f"exit {result.exited}") if result.exited else ""


#: how long `ddpctl ssh` waits for a node to answer (TCP connect and SSH banner), as ddpctl's own connections
SSH_CONNECT_TIMEOUT_S = 10


def ssh_argv(host: Host, command: tuple[str, ...] = ()) -> list[str]:
    """OpenSSH's command line for ``host`` as ddpctl connects to it (``ddpctl ssh``): the inventory's
    options as Ansible passes them (``ssh_options.openssh_args``), host keys checked strictly.
    ``command``: run it there (quoted as given) instead of a login shell."""
    # after the inventory's options, so that a ConnectTimeout given there wins (OpenSSH takes the first)
    timeout = ["-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"]
    argv = ["ssh", "-o", "StrictHostKeyChecking=yes", *openssh_args(host), *timeout, host.address]
    if command:
        argv.append(shlex.join(command))
    return argv
