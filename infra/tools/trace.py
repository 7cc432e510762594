"""A record of the round trips a command makes, for the scale benchmark (``bench/scale.py``).

With ``DDPCTL_TRACE=FILE`` set, each SSH connection ddpctl opens appends one JSON line to FILE
(``{"op": "connect", "node": ..., "t0": ..., "t1": ...}``, monotonic clock of this machine), with
an append-only write so that threads and processes can share the file. Unset (always, outside the
benchmark), nothing is written. ``sequential_steps`` reads such a record back: how many round trips
happened one after the other, the figure that must not grow with the number of nodes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENV = "DDPCTL_TRACE"


@contextmanager
def traced(op: str, node: str) -> Iterator[None]:
    """Record ``op`` on ``node`` (its start and end) where DDPCTL_TRACE names a file."""
    path = os.environ.get(ENV)
    t0 = time.monotonic()
    try:
        yield
    finally:
        if path:
            line = json.dumps({"op": op, "node": node, "t0": t0, "t1": time.monotonic()}) + "\n"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)


def sequential_steps(intervals: list[tuple[float, float]]) -> int:
    """The longest chain of round trips each starting after the previous one ended: 1 when all ran
    at once, N when N ran one after the other (greedy by end time, which is optimal)."""
    steps, last_end = 0, float("-inf")
    for t0, t1 in sorted(intervals, key=lambda iv: iv[1]):
        if t0 >= last_end:
            steps, last_end = steps + 1, t1
    return steps
