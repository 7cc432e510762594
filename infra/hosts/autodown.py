"""Autodown: a cluster that takes itself down once no run has been active on it for a while.

ddpctl installs ``node_programs/autodown.py`` on the head node (a systemd service where systemd runs,
else a process in a session of its own) with a settings file; from then on the nodes need no
ddpctl: once idle for the time given, the program shuts every node down over the cluster's SSH
mesh, then its own (AWS: the instances terminate on it). What the nodes cannot delete (aws: the
VPC, security group, key pair, placement group) is removed by the next ``status``, ``down`` or
``up`` of that name (``clusters.clean_taken_down``).

Pure here: the settings and the shell line that starts or stops the program; the SSH adapter is
``install``/``remove``. The setting itself (its duration's text, when it would fire) is
``model/autodown.py``'s, named here too.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from ..model.autodown import DEFAULT_CHECK_S as DEFAULT_CHECK_S
from ..model.autodown import MIN_LOOKS as MIN_LOOKS
from ..model.autodown import Estimate as Estimate
from ..model.autodown import check_s as check_s
from ..model.autodown import fires_at as fires_at
from ..model.autodown import flag_text as flag_text
from ..model.autodown import min_idle_s as min_idle_s
from ..model.autodown import parse as parse
from ..model.autodown import status_text as status_text
from ..model.autodown import text as text
from ..model.errors import DdpctlError, UsageError

if TYPE_CHECKING:
    from ..model.state import ClusterState

#: the program's folder on the head node, in the SSH user's home
NODE_DIR = ".ddpctl"
PROGRAM = f"{NODE_DIR}/autodown.py"
SETTINGS = f"{NODE_DIR}/autodown.json"
UNIT = "ddpctl-autodown"


def settings(state: ClusterState, idle_s: int) -> dict[str, Any]:
    """The program's settings file: the cluster's marker, the idle time, the other nodes' addresses."""
    return {
        "cluster": state.name,
        "cluster_id": state.cluster_id,
        "idle_s": idle_s,
        "check_s": check_s(),
        "peers": [n.host for n in state.nodes[1:]],
    }


def start_line() -> str:
    """The shell line on the head node that (re)starts the program with its settings, as the SSH
    user: a systemd service where systemd runs (it then survives a reboot), else a process in a
    session of its own."""
    program, conf = f"$HOME/{PROGRAM}", f"$HOME/{SETTINGS}"
    unit = (  # printf's format: the user and $HOME filled in on the node
        "[Unit]\\nDescription=ddpctl autodown: take the cluster down once it is idle\\n"
        "[Service]\\nUser=%s\\nExecStart=/usr/bin/python3 %s/" + PROGRAM + " %s/" + SETTINGS + "\\n"
        "Restart=on-failure\\n[Install]\\nWantedBy=multi-user.target\\n"
    )
    return (
        "if [ -d /run/systemd/system ] && sudo -n true 2>/dev/null; then "
        f'printf {shlex.quote(unit)} "$(id -un)" "$HOME" "$HOME" '
        f"| sudo -n tee /etc/systemd/system/{UNIT}.service >/dev/null && "
        f"sudo -n systemctl daemon-reload && sudo -n systemctl enable -q {UNIT} && "
        f"sudo -n systemctl restart {UNIT} && echo systemd; "
        f'else setsid nohup python3 "{program}" "{conf}" >>"$HOME/{NODE_DIR}/autodown.log" 2>&1 </dev/null & '
        "echo process; fi"
    )


def stop_line() -> str:
    """The shell line that turns it off: the settings go (a running program exits on its next look),
    and the service is disabled where there is one."""
    return (
        f"rm -f ~/{SETTINGS}; if [ -f /etc/systemd/system/{UNIT}.service ]; then "
        f"sudo -n systemctl disable -q --now {UNIT} 2>/dev/null; fi; true"
    )


# ---- on the head node (SSH) ------------------------------------------------------------------------


def install(state: ClusterState, idle_s: int) -> str:
    """The program and its settings on the head node, (re)started; "systemd" or "process"."""
    import io

    from ..node_programs import source

    def put(conn: Any) -> Any:
        conn.run(f"mkdir -p -m 700 ~/{NODE_DIR}", hide=True, in_stream=False, timeout=60)
        conn.put(io.StringIO(source("autodown")), PROGRAM)
        conn.put(io.StringIO(json.dumps(settings(state, idle_s), indent=1) + "\n"), SETTINGS)
        return conn.run(start_line(), hide=True, warn=True, in_stream=False, timeout=120)

    result = _on_head(state, put)
    if result.exited:
        raise DdpctlError(
            f"could not start autodown on {state.nodes[0].name}: {(result.stderr or result.stdout).strip()[-300:]}"
        )
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "process"


def remove(state: ClusterState) -> None:
    """Autodown off on the head node."""
    _on_head(state, lambda conn: conn.run(stop_line(), hide=True, warn=True, in_stream=False, timeout=60))


def _on_head(state: ClusterState, do: Any) -> Any:
    """``do(connection)`` on the head node; an SSH failure as one line."""
    from ..hosts.connections import connect, explain

    head = state.nodes[0].ssh if state.nodes else None
    if head is None:
        raise UsageError(f"cluster {state.name!r} has no node reached over SSH: autodown runs on its head node")
    try:
        conn = connect(head)
    except Exception as exc:
        raise DdpctlError(f"could not reach {state.nodes[0].name} over SSH for autodown: {explain(exc)}") from None
    try:
        return do(conn)
    except DdpctlError:
        raise
    except Exception as exc:
        raise DdpctlError(f"autodown on {state.nodes[0].name}: {explain(exc)}") from None
    finally:
        conn.close()
