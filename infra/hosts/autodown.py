"""Autodown: a cluster that takes itself down once no run has been active on it for a while.

ddpctl installs ``node_programs/autodown.py`` on the head node (a systemd service where systemd runs,
else a process in a session of its own) with a settings file; from then on the nodes need no
ddpctl: once idle for the time given, the program shuts every node down over the cluster's SSH
mesh, then its own (AWS: the instances terminate on it). What the nodes cannot delete (aws: the
VPC, security group, key pair, placement group) is removed by the next ``status``, ``down`` or
``up`` of that name (``clusters.clean_taken_down``).

Pure here: the duration's text (``parse``), the settings, the shell line that starts or stops the
program, when it would fire (``fires_at``); the SSH adapter is ``install``/``remove``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..model.errors import DdpctlError, UsageError

if TYPE_CHECKING:
    from ..model.state import ClusterState

#: the program's folder on the head node, in the SSH user's home
NODE_DIR = ".ddpctl"
PROGRAM = f"{NODE_DIR}/autodown.py"
SETTINGS = f"{NODE_DIR}/autodown.json"
UNIT = "ddpctl-autodown"
#: how often the program looks for activity; tests set DDPCTL_AUTODOWN_CHECK_S
DEFAULT_CHECK_S = 60
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+)([smhd])")


def parse(text: str | int, flag: str = "--autodown") -> int:
    """``30m``, ``2h``, ``1h30m``, ``600s`` -> seconds (at least 5 min: ``min_idle_s``); ``off`` -> 0. A bare number has no unit: refused."""
    if isinstance(text, int) and not isinstance(text, bool):
        raise UsageError(f"{flag} {text} has no unit: give e.g. {text}m, 2h or 1h30m (or off)")
    value = str(text).strip().lower()
    if value in ("off", "0", "none", ""):
        return 0
    if value.isdigit():
        raise UsageError(f"{flag} {value} has no unit: give e.g. {value}m, 2h or 1h30m (or off)")
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value.replace(" ", ""):
        raise UsageError(f"{flag} {text!r} is not a duration: give e.g. 30m, 2h, 1h30m or 600s (or off)")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        return 0
    if seconds < min_idle_s():
        least = min_idle_s()
        raise UsageError(
            f"{flag} {text} is under {globals()['text'](least)}: the head node looks for a run once every "
            f"{check_s()} s, so a shorter idle time could take the cluster down right after `up` or between two "
            f"runs: give {flag_text(least)} or more (or off)"
        )
    if seconds > 30 * 86400:
        raise UsageError(f"{flag} {text} is more than 30 days: give a shorter idle time, or off")
    return seconds


def text(seconds: int) -> str:
    """``30 min``, ``2 h``, ``1 h 30 min``, ``45 s``; ``off``."""
    if not seconds:
        return "off"
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{h} h" if h else "", f"{m} min" if m else "", f"{s} s" if s else ""]
    return " ".join(p for p in parts if p)


def flag_text(seconds: int) -> str:
    """What ``parse`` reads back: ``1h30m``, ``45s``; ``off``."""
    if not seconds:
        return "off"
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v)


#: the shortest idle time, in the program's looks: 5 min at one look a minute
MIN_LOOKS = 5


def min_idle_s() -> int:
    """The shortest idle time ``parse`` takes: ``MIN_LOOKS`` of the program's looks (``check_s``)."""
    return MIN_LOOKS * check_s()


def check_s() -> int:
    """How often the program looks (DDPCTL_AUTODOWN_CHECK_S, for tests; else every minute)."""
    value = os.environ.get("DDPCTL_AUTODOWN_CHECK_S", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_CHECK_S


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


@dataclass(frozen=True)
class Estimate:
    """When autodown would take the cluster down, as this machine knows it (the head node knows
    better: a run started from another machine keeps it up longer)."""

    idle_s: int
    fires_at: float | None  # epoch seconds; None: a run is going now
    since: float  # the idle time counts from here

    def to_dict(self) -> dict[str, Any]:
        from datetime import datetime, timezone

        at = None if self.fires_at is None else datetime.fromtimestamp(self.fires_at, timezone.utc).isoformat()
        return {"idle_s": self.idle_s, "idle": text(self.idle_s), "fires_at": at, "running": self.fires_at is None}


class RunTimes(Protocol):
    """What ``fires_at`` reads of a run's record (``runs/records.RunRecord``)."""

    cluster: str
    started: float
    result: str
    duration_s: float | None


def fires_at(state: ClusterState, runs: list[RunTimes]) -> Estimate | None:
    """When autodown fires if nothing runs meanwhile (pure): the idle time after whichever came last
    of setting it and the end of this cluster's last run recorded here; None where it is off."""
    idle_s = state.spec.autodown_s
    if not idle_s:
        return None
    mine = [r for r in runs if r.cluster == state.name and r.started >= state.created_at]
    if any(r.result == "running" or r.result.startswith("queued") for r in mine):
        return Estimate(idle_s, None, state.autodown_at)
    ends = [r.started + (r.duration_s or 0.0) for r in mine]
    since = max([state.autodown_at or state.created_at, *ends])
    return Estimate(idle_s, since + idle_s, since)


def status_text(estimate: Estimate | None, now: float) -> str:
    """The status table's words: ``off``, ``30 min idle: in 12 min``, ``30 min idle: a run is going``."""
    if estimate is None:
        return "off"
    if estimate.fires_at is None:
        return f"{text(estimate.idle_s)} idle: a run is going"
    left = estimate.fires_at - now
    from ..model.costs import age_text

    return f"{text(estimate.idle_s)} idle: " + (f"in {age_text(left)}" if left > 0 else "due now")


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
