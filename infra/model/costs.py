"""What a cluster has cost so far, from its hourly price and how long it has been up (pure).

An estimate at list price, from when ddpctl recorded the cluster: what EC2 bills (per second,
after a minute) for instances that ran all along; stopped time, discounts and data transfer are
not in it.
"""

from __future__ import annotations


def so_far(per_hour_usd: float | None, since: float, now: float) -> float | None:
    """Dollars for ``per_hour_usd`` from ``since`` to ``now`` (epoch seconds); None where the price is not known."""
    if per_hour_usd is None:
        return None
    return round(per_hour_usd * max(0.0, now - since) / 3600.0, 2)


def age_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 4 h``."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
