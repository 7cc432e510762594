"""The run's supervisor on the head node (``head_agent.py``), from the controller: pack it, start it
there so that it outlives this process, attach to it (its output.log streamed, Ctrl-C passed on as
SIGINT), and read a run's record there later (``infra/runs/head_runs.py``).

Its folder on the head is ``<the head's work dir>/head-runs/<run_id>`` (``folder``), 0700: ``down``
removes it with the work dir where the nodes stay (onprem). It carries the cluster's marker, so
``down`` stops it with the cluster's other processes.
"""

from __future__ import annotations

import io
import json
import shlex
import signal
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.errors import DdpctlError
from ..node_programs import source
from ..tools.procs import CLUSTER_KEY, NODE_KEY, RUN_KEY, STORE_KEY
from .head_agent import read_log_line
from .nodes import NodeResult, OutputLine, RunResult
from .plan import LaunchPlan

if TYPE_CHECKING:  # pragma: no cover
    import fabric

#: the modules the head runs, in the package ``ddpctl_head`` laid out as ``infra`` (their relative
#: imports hold): standard library only
MODULES = ("model/errors", "launch/nodes", "launch/diagnose", "launch/supervise", "launch/store", "launch/head_agent")
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
        for package in ("", "/model", "/launch"):
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
        "cluster": "",  # the controller's name for it: head_runs.py fills it in
        "cluster_id": plan.nodes[0].env.get(CLUSTER_KEY, ""),
        "ssh_config": mesh_config,
        "plan": plan.to_dict(),
        "nodes": nodes,
        "store": store,
        "min_nodes": plan.min_nodes,
        "grace_s": grace_s,
        "stop_source": source("stop"),
        "run_key": RUN_KEY,
        "node_key": NODE_KEY,
        "store_key": STORE_KEY,
    }


def run(head: fabric.Connection, doc: dict, where: str, sink: Callable[[OutputLine], None]) -> RunResult:
    """Start the run's supervisor on the head and attach to it until the run ends. Ctrl-C while it
    starts stops it as soon as it runs."""
    try:
        pid = start(head, doc, where)
    except KeyboardInterrupt:
        pid = wait_pid(head, where)
        if not pid:  # it never started: nothing runs on the head
            raise
        return attach(head, where, pid, sink, interrupt=True)
    return attach(head, where, pid, sink)


def start(head: fabric.Connection, doc: dict, where: str) -> int:
    """Start the supervisor on the head in a session of its own (nohup: a hang-up does not reach
    it), in ``where``, with the cluster's marker; its pid once it runs. A supervisor of the same run
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
        f"cd {q} && chmod 600 spec.json && (env {CLUSTER_KEY}={shlex.quote(doc['cluster_id'])} "
        "setsid nohup python3 head.pyz . > supervisor.log 2>&1 < /dev/null &)",
        hide=True,
        in_stream=False,
    )
    pid = wait_pid(head, where)
    if not pid:
        got = head.run(f"cat {q}/supervisor.log", hide=True, warn=True, in_stream=False)
        raise DdpctlError(f"the run's supervisor did not start on the head node: {got.stdout.strip()[-300:]}")
    return pid


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


def attach(
    head: fabric.Connection,
    where: str,
    pid: int,
    sink: Callable[[OutputLine], None],
    interrupt: bool = False,
    start: int = 1,
) -> RunResult:
    """Stream the head's output.log (from its line ``start``) to ``sink`` until its supervisor ends,
    then its result. Ctrl-C here (or ``interrupt``: at once), wherever it lands, asks the supervisor
    to stop the run (a second one: to kill it at once, as the supervisor here does), and the stream
    goes on until it has stopped."""
    if interrupt:
        stop(head, pid)
    stream(head, where, pid, lambda raw: sink(read_log_line(raw)), start, on_interrupt=lambda: stop(head, pid))
    doc = read_record(head, where)
    if doc is None:
        raise DdpctlError(f"the run's supervisor on the head node ended without a record: see {where} there")
    if doc.get("error"):  # it could not start the run
        raise DdpctlError(doc["error"])
    return result_of(doc)


def stream(
    head: fabric.Connection,
    where: str,
    pid: int,
    sink: Callable[[str], None],
    start: int = 1,
    on_interrupt: Callable[[], None] | None = None,
) -> None:
    """The lines of the head's output.log from its line ``start`` (1: the first) to ``sink`` as they
    come, whole (without their newline), until its supervisor (``pid``) has ended. Ctrl-C, in recv
    or in the sink: ``on_interrupt``, and the stream goes on; None: the stream ends and Ctrl-C goes up."""
    chan, pending, ended = None, b"", False
    try:
        while not ended:
            try:
                if chan is None:
                    with sigint_deferred():
                        opened = head.client.get_transport().open_session()
                        opened.exec_command(
                            f"tail -n +{start} -F --pid={pid} {shlex.quote(where)}/output.log 2>/dev/null"
                        )
                    chan = opened
                while True:
                    data = chan.recv(65536)
                    if not data:
                        ended = True
                        break
                    pending += data
                    *complete, pending = pending.split(b"\n")
                    for raw in complete:
                        sink(raw.decode(errors="replace"))
            except KeyboardInterrupt:
                if on_interrupt is None:
                    raise
                on_interrupt()
    finally:
        if chan is not None:
            chan.close()


def stop(head: fabric.Connection, pid: int) -> None:
    """Ctrl-C for the run's supervisor on the head: SIGINT (its own handler stops the run)."""
    try:
        with sigint_deferred():
            head.run(f"kill -INT {pid}", hide=True, warn=True, in_stream=False)
    except KeyboardInterrupt:  # Ctrl-C again while it was sent: once more
        with sigint_deferred():
            head.run(f"kill -INT {pid}", hide=True, warn=True, in_stream=False)


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ctrl-C held back while a request goes out on the SSH connection (a KeyboardInterrupt in the
    middle of paramiko's packet breaks the connection), and acted on once it is out. In the main
    thread only (where Python runs signal handlers)."""
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


def read_record(head: fabric.Connection, where: str) -> dict | None:
    """The run's record as the head's supervisor wrote it (None: not yet, or no such run there)."""
    got = head.run(f"cat {shlex.quote(where)}/run.json", hide=True, warn=True, in_stream=False)
    return json.loads(got.stdout) if got.ok else None


def result_of(doc: dict) -> RunResult:
    r = dict(doc["result"])
    r["nodes"] = [NodeResult(**n) for n in r.get("nodes", [])]
    return RunResult(**r)
