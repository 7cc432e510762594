"""The autodown setting, pure: its duration as users write it (``parse``, ``text``), the shortest one
(``min_idle_s``), and when it would take the cluster down as this machine knows it (``fires_at``,
``status_text``). Installing the program on the head node is ``hosts/autodown.py``'s."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .errors import UsageError

if TYPE_CHECKING:
    from .state import ClusterState

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
    from .costs import age_text

    return f"{text(estimate.idle_s)} idle: " + (f"in {age_text(left)}" if left > 0 else "due now")
