"""The SSH executor: the run's rendezvous store on the head node, then each node's torchrun agent,
each over an SSH session (fabric/paramiko).

The launch line is the planner's ``NodeLaunch.shell()`` (``exec`` so the session's exit status is
the agent's). Stopping uses a second session on the same connection that signals every process
carrying the run's marker (the store alone: its own ``STORE_KEY``): closing a session without a
pty would leave torchrun and its workers running, and torchrun's workers live in their own
sessions anyway.
"""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..hosts.connections import connect, remote_stop, writable_problem
from ..model.errors import UsageError
from ..model.host import Host
from ..model.state import NodeInfo
from ..tools.procs import NODE_KEY, RUN_KEY, STORE_KEY
from . import head
from .deps import DepsStep, outcome
from .diagnose import Agent
from .launcher import Supervision
from .plan import LaunchPlan, NodeLaunch
from .project import pack
from .reach_plan import REACH_LINE, raise_if_head_unreachable
from .store import RdzvStore
from .supervise import Elastic, OutputLine, RunResult, supervise
from .watch import Rules

if TYPE_CHECKING:  # pragma: no cover
    import fabric

    from .launcher import Handle
    from .plan import Renew


class SshNodeProcess:
    def __init__(self, conn: fabric.Connection, launch: NodeLaunch, run_id: str, command: str | None = None) -> None:
        self.node = launch.node
        self._conn = conn
        self._run_id = run_id
        self._chan = conn.client.get_transport().open_session()
        self._chan.set_combine_stderr(True)
        self._chan.exec_command(command or launch.shell())
        if launch.secret:  # read by the launch line: secrets never ride on a command line
            self._chan.sendall(launch.secret_input())
            self._chan.shutdown_write()

    def lines(self) -> Iterator[str]:
        pending = b""
        while True:
            data = self._chan.recv(65536)
            if not data:
                break
            pending += data
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace") + "\n"
        if pending:
            yield pending.decode(errors="replace")

    def poll(self) -> int | None:
        if self._chan.exit_status_ready():
            return self._chan.recv_exit_status()
        if self._chan.closed or not self._conn.is_connected:
            return -1  # the connection is gone: treat the node as failed
        return None

    def terminate(self) -> None:  # this node's processes only: its host may run other nodes' too
        remote_stop(self._conn, RUN_KEY, self._run_id, "term", also={NODE_KEY: self.node})

    def kill(self) -> None:
        remote_stop(self._conn, RUN_KEY, self._run_id, "kill", also={NODE_KEY: self.node})

    def look(self) -> list[str]:
        """Its ranks' states, each one's stack asked for (node_programs/stop.py's ``look``)."""
        return remote_stop(self._conn, RUN_KEY, self._run_id, "look", 0.0, also={NODE_KEY: self.node})

    def end(self) -> None:
        """Its agent and ranks killed (``kill`` reaches both on a remote node)."""
        self.kill()


def check_writable(path: str, conns: dict[str, fabric.Connection]) -> None:
    """Every node (name -> its connection) can write ``path`` or create it, as the user its agent runs
    as; one line naming the nodes that cannot, before anything of the run starts."""
    with ThreadPoolExecutor(max_workers=len(conns)) as pool:
        why = dict(zip(conns, pool.map(lambda c: writable_problem(c, path), conns.values())))
    found = [f"{node}: {reason}" for node, reason in why.items() if reason]
    if found:
        raise UsageError(
            f"--snapshot-dir {path}: {'; '.join(found)}: give a directory the job's user can write on "
            "every node (shared storage they all mount, or s3://BUCKET/PREFIX)"
        )


class SshExecutor:
    """Carries out a ``LaunchPlan`` on remote nodes, one SSH connection per node."""

    def __init__(
        self,
        hosts: dict[str, Host],
        sink: Callable[[OutputLine], None],
        grace_s: float = 3.0,
        head_node: NodeInfo | None = None,
    ) -> None:
        self.hosts = hosts
        self.head_node = head_node  # its work dir and SSH client config for the mesh: the supervisor there
        self.sink = sink
        self.grace_s = grace_s

    def run(
        self,
        plan: LaunchPlan,
        renew: Renew | None = None,
        progress: Callable[[str], None] | None = None,
        submitted: Callable[[Handle], None] | None = None,
    ) -> RunResult:
        """``renew``: asked, before a lost node (not the head) is started again, whether its machine
        was replaced (a spot instance taken back), and then for its new host and launch. Supervised
        where the plan says (``plan.supervision``, ``launcher.choose``): on the head node, its handle
        to ``submitted`` once it runs there."""
        with ThreadPoolExecutor(max_workers=min(16, len(plan.nodes))) as pool:
            conns = list(pool.map(lambda n: connect(self.hosts[n.node]), plan.nodes))
        try:
            archive = self._ready_nodes(plan, conns, progress)
            commands, sink, checked = self._with_precheck(plan)
            if plan.supervision == Supervision.HEAD:  # the supervisor on the head node; this process attaches to it
                on_head = renew.on_head if renew is not None else None
                result = self._run_on_head(plan, conns[0], commands, sink, progress, submitted, on_head)
            else:
                result = self._run_here(plan, conns, commands, sink, renew, archive)
            if plan.precheck is not None and not result.ok and not result.interrupted:
                # the one-line reason, if that was it
                raise_if_head_unreachable(plan.precheck, checked, plan.nodes[0].node)
            return result
        finally:
            for conn in conns:
                conn.close()

    def _ready_nodes(self, plan: LaunchPlan, conns: list, progress: Callable[[str], None] | None) -> bytes:
        """Before any agent starts, on every node at once: an earlier attempt's agents stopped, the
        snapshot folder found writable, the user's project shipped, the run's packages installed (a
        failure: nothing is started). Returns the project's archive (a replaced node gets it too)."""
        if plan.stop_first:  # an earlier attempt's agents outlive a crashed controller on remote nodes
            with ThreadPoolExecutor(max_workers=len(conns)) as pool:
                list(pool.map(lambda c: remote_stop(c, RUN_KEY, plan.run_id, "stop", self.grace_s), conns))
        if plan.writable:  # --snapshot-dir: found now, not when the first snapshot fails
            check_writable(plan.writable, {n.node: c for n, c in zip(plan.nodes, conns)})
        archive = b""
        if plan.project is not None:  # the user's project, once per content, on every node at once
            archive = pack(plan.project)
            with ThreadPoolExecutor(max_workers=len(conns)) as pool:
                list(pool.map(lambda c, n: ship_project(c, n.project_dir, archive), conns, plan.nodes))
        if plan.deps:  # the run's packages, on every node at once
            by_node = {n.node: c for n, c in zip(plan.nodes, conns)}
            with ThreadPoolExecutor(max_workers=len(plan.deps)) as pool:
                said = list(pool.map(lambda d: run_step(by_node[d.node], d), plan.deps))
            for line in outcome(plan.deps, said):
                if progress is not None:
                    progress(line)
        return archive

    def _with_precheck(self, plan: LaunchPlan) -> tuple[list[str], Callable[[OutputLine], None], list[OutputLine]]:
        """Each node's launch line, and the sink its output goes to. With a precheck (every other
        node reaches the head's port, where the store listens by then?), checked on the launch's own
        line just before torchrun starts (`check && exec torchrun`: one SSH exec per node, not two),
        its lines kept apart in the list returned."""
        commands = [launch.shell() for launch in plan.nodes]
        checked: list[OutputLine] = []
        if plan.precheck is None:
            return commands, self.sink, checked
        marked = {RUN_KEY: plan.run_id}  # stopping the run stops its check too
        checks = {check.node: replace(check, env={**check.env, **marked}) for check in plan.precheck.nodes}
        commands = [
            f"{checks[launch.node].shell(last=False)} && {command}" if launch.node in checks else command
            for launch, command in zip(plan.nodes, commands)
        ]

        def sink(line: OutputLine) -> None:
            if line.rank is None and REACH_LINE.match(line.text.strip()):
                checked.append(line)
            else:
                self.sink(line)

        return commands, sink, checked

    def _run_on_head(
        self,
        plan: LaunchPlan,
        conn,
        commands: list[str],
        sink: Callable[[OutputLine], None],
        progress: Callable[[str], None] | None,
        submitted: Callable[[Handle], None] | None,
        on_head: Callable[[Any, str], list[str]] | None = None,
    ) -> RunResult:
        """The run submitted to its supervisor on the head node (``head.py``), then attached to;
        ``on_head`` (``Renew.on_head``): what the head needs to replace a lost node itself, put there."""
        names = [self.hosts[n.node].name for n in plan.nodes]
        node = self.head_node
        assert node is not None  # the providers whose nodes it runs on (``Provider.head_supervises``) give it
        doc = head.spec(plan, commands, names, node.ssh_config, self.grace_s)
        if on_head is not None and plan.min_nodes:
            try:
                doc["replace"] = on_head(conn, f"{node.workdir or '.ddpctl'}/head-home")
            except Exception as exc:  # the run goes on; a lost node is started again where it was
                if progress is not None:
                    progress(f"warning: the head node cannot replace lost nodes in this run: {exc}")
        first = plan.nodes[0].node
        # a lost connection: made again, the run goes on there
        launcher = head.HeadLauncher(conn, reconnect=lambda: connect(self.hosts[first]))
        interrupt = False
        try:
            handle = launcher.submit(doc, head.folder(node.workdir, plan.run_id), plan.run_id)
        except head.SubmitInterrupted as started:  # Ctrl-C while it started: it stops as soon as it runs
            handle, interrupt = started.handle, True
        if submitted is not None:
            submitted(handle)
        return launcher.attach(handle, sink, seen=[], progress=progress, interrupt=interrupt)

    def _run_here(
        self,
        plan: LaunchPlan,
        conns: list,
        commands: list[str],
        sink: Callable[[OutputLine], None],
        renew: Renew | None,
        archive: bytes,
    ) -> RunResult:
        """The run supervised from this process: the store on the head, an agent per node over SSH."""
        launches = list(plan.nodes)  # a replaced node's launch is its new machine's
        store = self._start_store(plan, conns[0], sink)  # first: the agents start once it listens
        procs: list[SshNodeProcess] = []

        def cleanup() -> None:
            if store is not None:  # the agents are gone (or stopped): the store goes too
                store.stop()
            if procs and all(p.poll() == 0 for p in procs):
                return  # every agent ended cleanly, and torchrun reaped its workers: nothing to sweep
            with ThreadPoolExecutor(max_workers=len(conns)) as pool:
                list(pool.map(lambda c: remote_stop(c, RUN_KEY, plan.run_id, "stop", self.grace_s), conns))

        try:
            for conn, launch, command in zip(conns, plan.nodes, commands):
                procs.append(SshNodeProcess(conn, launch, plan.run_id, command))
            if store is not None:
                store.ready()  # it imports torch as they do: their clients wait in its backlog
        except BaseException:  # an agent that did start, and the store, do not outlive this
            procs.clear()
            cleanup()
            raise

        def relaunch(i: int) -> SshNodeProcess:
            """A lost node back: a fresh connection (the head's is kept while the store it carries
            runs), what is left of its agent stopped, a new agent; on a new machine where the
            provider replaced it (``renew``)."""
            node = launches[i].node
            renewed = renew.here(node) if renew is not None and renew.here is not None and i > 0 else None
            if renewed is not None:
                self.hosts[node], launches[i] = renewed
            if not (i == 0 and store is not None and store.alive()):
                conn = connect(self.hosts[node])
                conns[i].close()
                conns[i] = conn
            conn = conns[i]
            if renewed is not None and plan.project is not None:  # a new machine has no copy yet
                ship_project(conn, launches[i].project_dir, archive)
            if renewed is not None:  # nor the run's packages (its environment is named as before)
                steps = [d for d in plan.deps if d.node == node]
                outcome(steps, [run_step(conn, d) for d in steps])
            remote_stop(conn, RUN_KEY, plan.run_id, "kill", 0.0, also={NODE_KEY: node})
            return SshNodeProcess(conn, launches[i], plan.run_id)

        elastic = None
        if plan.min_nodes:
            elastic = Elastic(plan.min_nodes, relaunch=relaunch, store_alive=None if store is None else store.alive)
        watch = Rules(hang_timeout_s=plan.hang_timeout_s)
        result = supervise(
            plan.run_id, procs, sink, cleanup=cleanup, grace_s=self.grace_s, elastic=elastic, watch=watch
        )
        if store is None:
            return result
        return store.explain(result, [Agent(launch.node, launch.host) for launch in launches])

    def _start_store(
        self, plan: LaunchPlan, head: fabric.Connection, sink: Callable[[OutputLine], None]
    ) -> RdzvStore | None:
        """The run's rendezvous store on the head node, once it listens; stopped alone, by its own marker."""
        if plan.store is None:
            return None
        proc = SshNodeProcess(head, plan.store, plan.run_id)
        return RdzvStore.start(
            plan.store.node, proc, sink, lambda: remote_stop(head, STORE_KEY, plan.run_id, "stop", self.grace_s)
        )


def run_step(conn: fabric.Connection, deps: DepsStep) -> tuple[bool, str]:
    """The run's packages on one node (``node_programs/deps.py``): (ok, what it printed)."""
    done = conn.run(deps.shell(), hide=True, warn=True, in_stream=False)
    return done.ok, done.stdout.strip() or done.stderr


def ship_project(conn: fabric.Connection, project_dir: str, archive: bytes) -> None:
    """Unpack the project into ``project_dir`` on the node unless a copy of the same content is there
    (the directory is named by the content's hash; it appears whole, by a rename). The SSH executor
    ships to each node its launch names; the Slurm executor to the login node's shared work dir."""
    if not project_dir:
        return
    where = shlex.quote(project_dir)
    if conn.run(f"test -d {where}", hide=True, warn=True, in_stream=False).ok:
        return
    tmp = f"{project_dir}.{os.getpid()}.tmp"
    conn.run(f"mkdir -p {shlex.quote(tmp)}", hide=True, in_stream=False)
    conn.put(io.BytesIO(archive), f"{tmp}.tar.gz")
    conn.run(
        f"tar -xzf {shlex.quote(tmp)}.tar.gz -C {shlex.quote(tmp)} && rm {shlex.quote(tmp)}.tar.gz && "
        f"(mv -T {shlex.quote(tmp)} {where} 2>/dev/null || rm -rf {shlex.quote(tmp)})",  # a shared fs: one wins
        hide=True,
        in_stream=False,
    )
