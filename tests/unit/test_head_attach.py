"""Attaching to the run's supervisor on the head node (``head_attach.attach``) with a scripted connection in
place of paramiko's: lines streamed once each, a lost connection made again and the stream going on
from the line it had reached, Ctrl-C passed on as SIGINT, and the record's error in one line."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import pytest

from ddpctl.infra.launch import head_attach as head
from ddpctl.infra.model.errors import DdpctlError

RECORD = {"cluster": "", "plan": {}, "result": {"run_id": "r1", "exit_code": 0, "wall_s": 1.0}}


@dataclass
class Chan:
    """A session that plays ``script``: bytes, ``"quiet"`` (no data within the timeout) or
    ``"cut"`` (the stream breaks); when the script is done it ends as ``tail --pid`` does."""

    script: list
    command: str = ""
    status_event: threading.Event = field(default_factory=threading.Event)  # set: tail's exit status came

    def exec_command(self, command: str) -> None:
        self.command = command

    def settimeout(self, _s: float) -> None:
        pass

    def recv(self, _n: int) -> bytes:
        if not self.script:
            threading.Timer(0.01, self.status_event.set).start()  # sshd sends it after the end of output
            return b""
        step = self.script.pop(0)
        if step == "quiet":
            raise TimeoutError
        if step == "cut":  # the output ends and no exit status comes
            return b""
        return step

    def close(self) -> None:
        pass


@dataclass
class Result:
    stdout: str = ""
    ok: bool = True


@dataclass
class Conn:
    """A connection whose sessions play ``chans`` in turn; ``answers`` False: keepalives go unanswered."""

    chans: list[Chan]
    answers: bool = True
    record: dict | None = field(default_factory=lambda: dict(RECORD))
    commands: list[str] = field(default_factory=list)
    closed: bool = False

    @property
    def client(self):
        return self

    def get_transport(self):
        return self

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: float | None = None) -> Chan:
        return self.chans.pop(0)

    def global_request(self, kind: str, wait: bool = True):
        if not self.answers:
            threading.Event().wait(1.0)  # no answer: the caller stops waiting first
        return None  # OpenSSH refuses keepalive@openssh.com: the refusal is an answer

    def run(self, command: str, **_kw) -> Result:
        self.commands.append(command)
        if command.startswith("cat ") and command.endswith("run.json"):
            return Result(json.dumps(self.record), self.record is not None)
        return Result()

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(head, "LIVENESS_S", 0.05)
    monkeypatch.setattr(head, "ANSWER_S", 0.05)
    monkeypatch.setattr(head, "RECONNECT_S", 0.0)


def texts(lines) -> list[str]:
    return [line.text for line in lines]


def test_lines_are_streamed_and_the_record_read() -> None:
    conn = Conn([Chan([b"[n0 r0] one\n[n1 r1] tw", b"o\n", "quiet", b"[n0 r0] three\n"])])
    lines: list = []
    result = head.attach(conn, "/w/head-runs/r1", 42, lines.append)
    assert texts(lines) == ["one", "two", "three"] and (lines[1].node, lines[1].rank) == ("n1", 1)
    assert result.exit_code == 0 and conn.chans == []


def test_a_lost_connection_is_made_again_and_goes_on_from_the_line_reached() -> None:
    first = Conn([Chan([b"[n0 r0] one\n[n0 r0] two\n[n0 r0] par", "quiet"])], answers=False)
    chan = Chan([b"[n0 r0] three\n"])
    second = Conn([chan])
    attempts = [DdpctlError("unreachable"), DdpctlError("unreachable"), second]

    def reconnect():
        got = attempts.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    lines, said = [], []
    result = head.attach(first, "/w/r1", 42, lines.append, reconnect=reconnect, progress=said.append)
    assert texts(lines) == ["one", "two", "three"]  # the cut line once, whole, from the new stream
    assert chan.command.startswith("tail -n +3 ")
    assert result.exit_code == 0 and attempts == [] and second.closed  # made here, closed here
    assert [s.split(" (")[0].split(":")[0] for s in said] == [
        "lost the connection to the head node",
        "reconnected to the head node",
    ]


def test_the_new_stream_starts_after_the_lines_seen() -> None:
    chan = Chan([b"[n0 r0] three\n"])
    first = Conn([Chan([b"[n0 r0] one\n[n0 r0] two\n", "cut"])])
    result = head.attach(first, "/w/r1", 42, lambda line: None, reconnect=lambda: Conn([chan]))
    assert chan.command.startswith("tail -n +3 -F -s 0.2 --pid=42 /w/r1/output.log") and result.exit_code == 0


def test_without_reconnect_a_lost_connection_is_one_line() -> None:
    conn = Conn([Chan([b"[n0 r0] one\n", "cut"])])
    with pytest.raises(DdpctlError, match="lost the connection to the head node; the run goes on there"):
        head.attach(conn, "/w/r1", 42, lambda line: None)


def test_ctrl_c_asks_the_supervisor_to_stop_and_the_stream_goes_on() -> None:
    conn = Conn([Chan([b"[n0 r0] one\n[n0 r0] two\n"]), Chan([b"[n0 r0] two\n[n0 r0] stopping\n"])])
    lines: list = []

    def sink(line) -> None:
        lines.append(line)
        if line.text == "one":
            raise KeyboardInterrupt

    head.attach(conn, "/w/r1", 42, sink)
    assert conn.commands[0] == "kill -INT 42"
    assert texts(lines) == ["one", "two", "stopping"] and conn.chans == []


def test_a_record_with_an_error_is_that_error() -> None:
    conn = Conn([Chan([])])
    conn.record = {**RECORD, "error": "the rendezvous store did not start on the head node n0: port 29500 in use"}
    with pytest.raises(DdpctlError, match="^the rendezvous store did not start on the head node n0: port 29500"):
        head.attach(conn, "/w/r1", 42, lambda line: None)
