"""SIGTERM taken as Ctrl-C while something runs that Ctrl-C stops cleanly (a play, a run): the
signal ``ddpctl stop``, ``kill`` and service managers send then leaves nothing behind either."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within it, SIGTERM raises KeyboardInterrupt; the handler that was there before is put back
    after. Only the main thread may set a handler: elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ctrl-C held back while something that must not be cut runs, and acted on once it is out: a
    request on an SSH connection (a KeyboardInterrupt in the middle of paramiko's packet breaks the
    connection), a fork (one raised in Python's after-fork hooks is ignored, so the Ctrl-C is
    lost). In the main thread only (where Python runs signal handlers)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    got: list[object] = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        previous(signal.SIGINT, got[0])
