"""Following the run's supervisor on the head node (``head_agent.py``) from the controller: its output.log
streamed (``attach``, ``stream``) through a lost and remade connection, Ctrl-C passed on as SIGINT
(``stop``), and its record read once it has ended (``read_record``). ``head.py`` packs and starts it.
"""

from __future__ import annotations

import json
import os
import shlex
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..model.errors import DdpctlError
from ..tools.signals import sigint_deferred
from ..tools.trace import ENV as TRACE_ENV
from .nodes import OutputLine, RunResult, read_log_line, result_of

if TYPE_CHECKING:  # pragma: no cover
    import fabric


class Lost(Exception):
    """The connection to the head node is gone (a cut route, a sleep, a new network)."""


def attach(
    head: fabric.Connection,
    where: str,
    pid: int,
    sink: Callable[[OutputLine], None],
    interrupt: bool = False,
    reconnect: Callable[[], fabric.Connection] | None = None,
    progress: Callable[[str], None] | None = None,
    start: int = 1,
) -> RunResult:
    """Stream the head's output.log (from its line ``start``) to ``sink`` until its supervisor ends,
    then its result. Ctrl-C
    here (or ``interrupt``: at once), wherever it lands, asks the supervisor to stop the run (a
    second one: to kill it at once, as the supervisor here does), and the stream goes on until it
    has stopped. A lost connection (no line within ``LIVENESS_S``, then no answer to a keepalive within ``ANSWER_S``) is made again with
    ``reconnect`` (every ``RECONNECT_S`` until the head answers; the run goes on there meanwhile)
    and the stream goes on from the line it had reached; without ``reconnect`` it is an error."""
    say = progress or (lambda text: None)
    seen, conn, made = [start - 1], head, []
    stopping = interrupt
    try:
        while True:
            try:
                if stopping:
                    try:
                        stop(conn, pid)
                    except KeyboardInterrupt:
                        raise
                    except Exception as exc:  # could not be sent: the connection is gone
                        raise Lost from exc
                    stopping = False
                _stream(conn, where, pid, seen, lambda raw: sink(read_log_line(raw)))
                break
            except KeyboardInterrupt:  # in recv or in the sink: the run on the head stops either way
                stopping = True
            except Lost:
                if reconnect is None:
                    raise DdpctlError(
                        "lost the connection to the head node; the run goes on there: `ddpctl logs --follow` "
                        "follows it, `ddpctl stop` stops it"
                    ) from None
                say("lost the connection to the head node (the run goes on there): reconnecting")
                conn = _reconnected(reconnect, stopping)
                made.append(conn)
                say("reconnected to the head node: following the run again")
        doc = read_record(conn, where)
        _bring_trace(conn, where)
    finally:
        for each in made:
            each.close()
    if doc is None:
        raise DdpctlError(f"the run's supervisor on the head node ended without a record: see {where} there")
    if doc.get("error"):  # it could not start the run
        raise DdpctlError(doc["error"])
    return result_of(doc)


#: No line for LIVENESS_S, then no answer to a keepalive within ANSWER_S: the connection is lost,
#: found within 15-45 s as with OpenSSH's ServerAliveInterval 15 and ServerAliveCountMax 3
LIVENESS_S = 15.0
ANSWER_S = 30.0
RECONNECT_S = 3.0


def stream(head: fabric.Connection, where: str, pid: int, sink: Callable[[str], None], start: int = 1) -> None:
    """The lines of the head's output.log from its line ``start`` (1: the first) to ``sink`` as they
    come, whole (without their newline), until its supervisor (``pid``) has ended (``logs --follow``).
    Ctrl-C goes up; a lost connection is an error that says how to follow again."""
    try:
        _stream(head, where, pid, [start - 1], sink)
    except Lost:
        raise DdpctlError(
            "lost the connection to the head node; the run goes on there: `ddpctl logs --follow` follows it again"
        ) from None


def _stream(conn: fabric.Connection, where: str, pid: int, seen: list[int], sink: Callable[[str], None]) -> None:
    """The lines of ``output.log`` after the first ``seen[0]`` to ``sink`` (whole, without their
    newline) until the supervisor ``pid`` has ended, counted in ``seen[0]``. ``Lost`` where the
    connection goes first."""
    transport = conn.client.get_transport()
    if transport is None or not transport.is_active():
        raise Lost
    try:
        with sigint_deferred():  # a Ctrl-C inside paramiko's packet would break the connection
            chan = transport.open_session(timeout=LIVENESS_S)
            chan.exec_command(
                f"tail -n +{seen[0] + 1} -F -s 0.2 --pid={pid} {shlex.quote(where)}/output.log 2>/dev/null"
            )
    except Exception as exc:  # paramiko's SSHException, EOFError, a socket error: the connection
        raise Lost from exc
    chan.settimeout(LIVENESS_S)
    pending = b""
    while True:
        try:
            data = chan.recv(65536)
        except TimeoutError:  # a quiet run, or a dead link: ask the head
            if not _answers(transport):
                chan.close()
                raise Lost from None
            continue
        except OSError as exc:
            raise Lost from exc
        if not data:  # tail's output ended: its exit status follows (sshd may send it a moment after)
            if not chan.status_event.wait(ANSWER_S) or not transport.is_active():
                raise Lost  # the stream broke, not ended
            return
        pending += data
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            seen[0] += 1
            sink(raw.decode(errors="replace"))


def _answers(transport) -> bool:
    """The head answers a keepalive within ``ANSWER_S`` (paramiko's own wait has no time limit)."""

    answer: list[object] = []

    def ask() -> None:
        try:
            answer.append(transport.global_request("keepalive@openssh.com", wait=True))
        except Exception:  # the transport died meanwhile
            answer.append(None)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(ANSWER_S)
    return bool(answer) and transport.is_active()


def _reconnected(reconnect: Callable[[], fabric.Connection], stopping: bool) -> fabric.Connection:
    """A new connection to the head, tried every ``RECONNECT_S`` until it is made. Ctrl-C meanwhile:
    the run cannot be told to stop from here, so say how to stop it later."""
    import time

    while True:
        try:
            return reconnect()
        except DdpctlError:
            try:
                time.sleep(RECONNECT_S)
            except KeyboardInterrupt:
                stopping = True
        except KeyboardInterrupt:
            stopping = True
        if stopping:
            raise DdpctlError(
                "the head node cannot be reached, so the run could not be stopped: it goes on there; "
                "`ddpctl stop RUN_ID` once the head node can be reached again"
            )


def _bring_trace(head: fabric.Connection, where: str) -> None:
    """The supervisor's round trips (its ``trace.jsonl``) into this machine's ``DDPCTL_TRACE`` file."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    got = head.run(f"cat {shlex.quote(where)}/trace.jsonl", hide=True, warn=True, in_stream=False)
    if got.ok and got.stdout:
        with open(path, "a") as f:
            f.write(got.stdout)


def stop(head: fabric.Connection, pid: int) -> None:
    """Ctrl-C for the run's supervisor on the head: SIGINT (its own handler stops the run)."""
    try:
        with sigint_deferred():
            head.run(f"kill -INT {pid}", hide=True, warn=True, in_stream=False)
    except KeyboardInterrupt:  # Ctrl-C again while it was sent: once more
        with sigint_deferred():
            head.run(f"kill -INT {pid}", hide=True, warn=True, in_stream=False)


def read_record(head: fabric.Connection, where: str) -> dict | None:
    """The run's record as the head's supervisor wrote it (None: not yet, or no such run there)."""
    got = head.run(f"cat {shlex.quote(where)}/run.json", hide=True, warn=True, in_stream=False)
    return json.loads(got.stdout) if got.ok else None
