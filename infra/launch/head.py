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
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.errors import DdpctlError
from ..node_programs import command
from ..tools.procs import CLUSTER_KEY, NODE_KEY, RUN_KEY, STORE_KEY
from ..tools.trace import ENV as TRACE_ENV
from .head_attach import attach, read_record, stream
from .launcher import Described, Handle, Phase
from .nodes import OutputLine, RunResult
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
    """What the head's supervisor reads: each node's launch line and its name on the mesh (``hosts``), and
    what a node on a new machine needs before it (the project's folder, the run's packages' steps); the
    command that replaces a lost node there, ``replace``, is the executor's to add (``Renew.on_head``)."""
    deps = {d.node: d.shell() for d in plan.deps}
    nodes = [
        {
            "node": n.node,
            "host": h,
            "address": n.host,
            "command": c,
            "secret": n.secret_input().decode(),
            "project_dir": n.project_dir,
            "deps": deps.get(n.node, ""),
        }
        for n, c, h in zip(plan.nodes, commands, hosts)
    ]
    store = None
    if plan.store is not None:
        store = {"node": plan.store.node, "host": hosts[0], "command": plan.store.shell()}
    on_mesh = {n.node: h for n, h in zip(plan.nodes, hosts)}
    health = [{"node": q.node, "host": on_mesh[q.node], "command": q.shell()} for q in plan.health_query]
    return {
        "run_id": plan.run_id,
        "cluster": "",  # the controller's name for it: on_cluster.py fills it in
        "cluster_id": plan.nodes[0].env.get(CLUSTER_KEY, ""),
        "ssh_config": mesh_config,
        "plan": plan.to_dict(),
        "nodes": nodes,
        "store": store,
        "health": health,
        "health_every_s": plan.health_every_s,
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
        alive = pid_alive(self.conn, handle.folder)  # first: the supervisor writes its record, then exits
        doc = read_record(self.conn, handle.folder)
        if doc is not None:
            return Described(Phase.ENDED, doc)
        return Described(Phase.RUNNING if alive else Phase.GONE)

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
