"""The run's supervisor on the head node (``head_agent.py``), from the controller: pack it, start it
there so that it outlives this process, attach to it (its output.log streamed, Ctrl-C passed on as
SIGINT), and read a run's record there later (``infra/runs/on_cluster.py``).

Its folder on the head is ``<the head's work dir>/head-runs/<run_id>`` (``folder``), 0700: ``down``
removes it with the work dir where the nodes stay (onprem). It carries the cluster's marker, so
``down`` stops it with the cluster's other processes.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.errors import DdpctlError
from ..node_programs import command
from ..tools.procs import CLUSTER_KEY, NODE_KEY, RUN_KEY, STORE_KEY
from ..tools.signals import sigint_deferred
from ..tools.trace import ENV as TRACE_ENV
from .head_agent import read_log_line
from .launcher import Described, Handle, Phase
from .nodes import OutputLine, RunResult, result_of
from .plan import LaunchPlan

if TYPE_CHECKING:  # pragma: no cover
    import fabric

#: the modules the head runs, in the package ``ddpctl_head`` laid out as ``infra`` (their relative
#: imports hold): standard library only
MODULES = (
    "model/errors",
    "model/words",
    "model/results",
    "tools/trace",
    "launch/nodes",
    "launch/diagnose",
    "launch/watch",
    "launch/supervise",
    "launch/store",
    "launch/head_agent",
)
MAIN = "import sys\nfrom ddpctl_head.launch.head_agent import main\nmain(sys.argv[1:])\n"
START_TIMEOUT_S = 30


def folder(workdir: str, run_id: str) -> str:
    """The run's folder on the head (``workdir``: the head node's; "": under its user's home)."""
    return f"{workdir or '.ddpctl'}/head-runs/{run_id}"


def bundle() -> bytes:
    """The zip ``python3`` runs on the head: ``__main__.py`` and the package ``ddpctl_head``."""
    infra = Path(__file__).parent.parent
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("__main__.py", MAIN)
        for package in ("", "/model", "/tools", "/launch"):
            z.writestr(f"ddpctl_head{package}/__init__.py", "")
        for name in MODULES:
            z.writestr(f"ddpctl_head/{name}.py", (infra / f"{name}.py").read_text(encoding="utf-8"))
    return out.getvalue()


def spec(plan: LaunchPlan, commands: list[str], hosts: list[str], mesh_config: str, grace_s: float) -> dict:
    """What the head's supervisor reads: each node's launch line and its name on the mesh (``hosts``)."""
    nodes = [
        {"node": n.node, "host": h, "address": n.host, "command": c, "secret": n.secret_input().decode()}
        for n, c, h in zip(plan.nodes, commands, hosts)
    ]
    store = None
    if plan.store is not None:
        store = {"node": plan.store.node, "host": hosts[0], "command": plan.store.shell()}
    return {
        "run_id": plan.run_id,
        "cluster": "",  # the controller's name for it: on_cluster.py fills it in
        "cluster_id": plan.nodes[0].env.get(CLUSTER_KEY, ""),
        "ssh_config": mesh_config,
        "plan": plan.to_dict(),
        "nodes": nodes,
        "store": store,
        "min_nodes": plan.min_nodes,
        "hang_timeout_s": plan.hang_timeout_s,
        "grace_s": grace_s,
        "stop_command": command("python3", "stop"),
        "run_key": RUN_KEY,
        "node_key": NODE_KEY,
        "store_key": STORE_KEY,
        "trace": bool(os.environ.get(TRACE_ENV)),  # its round trips too (bench/scale.py, test_scale)
    }


class SubmitInterrupted(KeyboardInterrupt):
    """Ctrl-C while the supervisor started, which runs all the same: ``handle`` stops it."""

    def __init__(self, handle: Handle) -> None:
        super().__init__()
        self.handle = handle


def start(head: fabric.Connection, doc: dict, where: str) -> int:
    """Start the supervisor on the head (``start_line``: a systemd user unit, else a session of its
    own), in ``where``, with the cluster's marker; its pid once it runs. A supervisor of the same run
    still there (a resumed run's) is stopped first."""
    q = shlex.quote(where)
    old = (
        f"p=$(cat {q}/pid 2>/dev/null) && grep -qs head.pyz /proc/$p/cmdline && kill -TERM $p 2>/dev/null && "
        f"for i in $(seq {START_TIMEOUT_S * 10}); do kill -0 $p 2>/dev/null || break; sleep 0.1; done"
    )
    head.run(
        f"umask 077 && mkdir -p {q} && ({old}; rm -f {q}/run.json {q}/pid {q}/output.log)", hide=True, in_stream=False
    )
    head.put(io.BytesIO(bundle()), f"{where}/head.pyz")
    head.put(io.BytesIO(json.dumps(doc).encode()), f"{where}/spec.json")  # umask'd folder: 0700
    head.run(
        f"cd {q} && chmod 600 spec.json && {start_line(doc['cluster_id'], doc['run_id'])}", hide=True, in_stream=False
    )
    pid = wait_pid(head, where)
    if not pid:
        got = head.run(f"cat {q}/supervisor.log", hide=True, warn=True, in_stream=False)
        raise DdpctlError(f"the run's supervisor did not start on the head node: {got.stdout.strip()[-300:]}")
    return pid


def start_line(cluster_id: str, run_id: str) -> str:
    """The shell line, run in the run's folder on the head, that starts its supervisor so that it
    outlives the SSH session: ``systemd-run --user`` where the account has a systemd user manager
    that lingers (the common role enables it; logind may kill a session's processes when it ends),
    else ``setsid nohup`` (a hang-up does not reach it). It carries the cluster's marker."""
    marker = f"{CLUSTER_KEY}={shlex.quote(cluster_id)}"
    log = '"$PWD"/supervisor.log'
    systemd = (
        f'systemd-run --user --quiet --collect --unit=ddpctl-{run_id} --working-directory="$PWD" --setenv={marker} '
        f"-p StandardOutput=append:{log} -p StandardError=append:{log} python3 head.pyz ."
    )
    nohup = f"(env {marker} setsid nohup python3 head.pyz . > supervisor.log 2>&1 < /dev/null &)"
    lingers = 'test "$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)" = yes'
    return f"if {lingers} && systemctl --user show-environment >/dev/null 2>&1; then {systemd}; else {nohup}; fi"


def wait_pid(head: fabric.Connection, where: str) -> int:
    """The pid of the run's supervisor once it has written it (0: not within ``START_TIMEOUT_S``)."""
    q = shlex.quote(where)
    got = head.run(
        f"for i in $(seq {START_TIMEOUT_S * 10}); do test -s {q}/pid && cat {q}/pid && exit 0; sleep 0.1; done; exit 1",
        hide=True,
        warn=True,
        in_stream=False,
    )
    return int(got.stdout.split()[0]) if got.ok and got.stdout.split() else 0


def pid_alive(head: fabric.Connection, where: str) -> int:
    """The pid of the run's supervisor on the head while it runs (0: it does not)."""
    q = shlex.quote(where)
    got = head.run(
        f"p=$(cat {q}/pid) && grep -qs head.pyz /proc/$p/cmdline && echo $p", hide=True, warn=True, in_stream=False
    )
    return int(got.stdout.split()[0]) if got.ok and got.stdout.split() else 0


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


class HeadLauncher:
    """The launcher verbs (``launcher.py``) for a run whose supervisor runs on the head node: its
    handle's ``folder`` there holds ``pid``, ``output.log`` and, once it has ended, ``run.json``."""

    def __init__(self, conn: fabric.Connection, reconnect: Callable[[], fabric.Connection] | None = None) -> None:
        self.conn, self.reconnect = conn, reconnect

    @classmethod
    def open(cls, host) -> HeadLauncher:
        from ..hosts.connections import connect

        return cls(connect(host), reconnect=lambda: connect(host))

    def close(self) -> None:
        self.conn.close()

    def submit(self, doc: dict, where: str, run_id: str) -> Handle:
        """Start the supervisor (``start``) in ``where``. Ctrl-C meanwhile: ``SubmitInterrupted``
        with the handle where it runs all the same (to be stopped), KeyboardInterrupt where not."""
        try:
            pid = start(self.conn, doc, where)
        except KeyboardInterrupt:
            pid = wait_pid(self.conn, where)
            if not pid:  # it never started: nothing runs on the head
                raise
            raise SubmitInterrupted(Handle("head", str(pid), where, run_id)) from None
        return Handle("head", str(pid), where, run_id)

    def describe(self, handle: Handle) -> Described:
        doc = read_record(self.conn, handle.folder)
        if doc is not None:
            return Described(Phase.ENDED, doc)
        return Described(Phase.RUNNING if pid_alive(self.conn, handle.folder) else Phase.GONE)

    def logs(self, handle: Handle, sink: Callable[[str], None], *, seen: list[str], follow: bool) -> None:
        pid = pid_alive(self.conn, handle.folder) if follow else 0
        if pid:
            stream(self.conn, handle.folder, pid, sink, start=len(seen) + 1)
            return
        got = self.conn.run(f"cat {shlex.quote(handle.folder)}/output.log", hide=True, warn=True, in_stream=False)
        if not got.ok:
            raise DdpctlError(f"the run's output on the head node cannot be read: {got.stderr.strip()[-200:]}")
        text = got.stdout[: got.stdout.rfind("\n") + 1]  # a partial last line: next time, whole
        for raw in text.splitlines()[len(seen) :]:
            sink(raw)

    def attach(
        self,
        handle: Handle,
        sink: Callable[[OutputLine], None],
        *,
        seen: list[str],
        progress: Callable[[str], None] | None = None,
        interrupt: bool = False,
    ) -> RunResult:
        return attach(
            self.conn,
            handle.folder,
            int(handle.ref),
            sink,
            interrupt=interrupt,
            reconnect=self.reconnect,
            progress=progress,
            start=len(seen) + 1,
        )

    def cancel(self, handle: Handle) -> None:
        pid = pid_alive(self.conn, handle.folder)
        if pid:
            attach(self.conn, handle.folder, pid, lambda line: None, interrupt=True)
