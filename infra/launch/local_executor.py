"""The local executor: the run's rendezvous store, then each node's torchrun agent, are subprocesses of this machine."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..node_programs import argv as program_argv
from ..tools.procs import CLUSTER_KEY, NODE_KEY, RUN_KEY, stop_tagged
from ..tools.signals import sigint_deferred
from .deps import DepsStep, outcome
from .diagnose import Agent
from .plan import LaunchPlan, NodeLaunch
from .store import RdzvStore, stop_process
from .supervise import Elastic, OutputLine, RunResult, supervise
from .watch import Rules

if TYPE_CHECKING:  # pragma: no cover
    from .launcher import Handle
    from .plan import Renew

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
        """If the controller dies (even SIGKILL), the agent gets SIGTERM and stops its workers (the
        store: stops). A controller killed between the fork and the prctl sends nothing: the child
        sees it has been handed to another parent and stops itself."""
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)

    return die_with_parent


#: how long the agents of a run whose controller was killed have to stop before the sweeper kills
#: what is left (torchrun gives its workers 30 s at most; one that hangs on its way out never ends)
SWEEP_GRACE_S = 20.0


def _start_sweeper(run_id: str) -> subprocess.Popen:
    """The ``stop`` node program in its ``orphan`` mode: if this process dies (SIGKILL too), it stops
    whatever of the run is left once the agents had their grace. Without the run's markers itself."""
    env = {k: v for k, v in os.environ.items() if k not in (RUN_KEY, CLUSTER_KEY, NODE_KEY)}
    return subprocess.Popen(
        program_argv(sys.executable, "stop", RUN_KEY, run_id, "orphan", str(SWEEP_GRACE_S), str(os.getpid())),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in this terminal's process group: Ctrl-C is ours to handle
    )


class LocalNodeProcess:
    def __init__(self, launch: NodeLaunch) -> None:
        self.node = launch.node
        self._markers = (RUN_KEY, launch.env.get(RUN_KEY, ""), NODE_KEY, launch.env.get(NODE_KEY, launch.node))
        with sigint_deferred():  # a Ctrl-C inside the fork's hooks would be lost
            self._popen = self._start(launch)

    @staticmethod
    def _start(launch: NodeLaunch) -> subprocess.Popen:
        return subprocess.Popen(
            launch.argv,
            cwd=launch.cwd,
            env={**os.environ, **launch.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,  # its own process group: signals reach the agent, not us
            preexec_fn=_die_with(os.getpid()),
        )

    @property
    def pid(self) -> int:
        """The agent's pid (torchrun itself: the argv runs without a shell)."""
        return self._popen.pid

    def lines(self) -> Iterator[str]:
        assert self._popen.stdout is not None
        yield from self._popen.stdout

    def poll(self) -> int | None:
        return self._popen.poll()

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def look(self) -> list[str]:
        """Its ranks' states, each one's stack asked for (node_programs/stop.py's ``look``)."""
        return self._stop_program("look")

    def end(self) -> None:
        """SIGKILL to its agent and its ranks (they live in sessions of their own), as a remote node's kill."""
        self._signal(signal.SIGKILL)
        self._stop_program("kill")

    def _stop_program(self, mode: str) -> list[str]:
        run_key, run_id, node_key, node = self._markers
        argv = program_argv(sys.executable, "stop", run_key, run_id, mode, "0", node_key, node)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        return done.stdout.splitlines()

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self._popen.pid, sig)
        except ProcessLookupError:
            pass


def run_step(deps: DepsStep) -> tuple[bool, str]:
    """The run's packages on this machine (``node_programs/deps.py``): (ok, what it printed)."""
    done = subprocess.run(
        deps.argv, cwd=deps.cwd, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL
    )
    return done.returncode == 0, done.stdout.strip() or done.stderr  # its line, else a crash's last


class LocalExecutor:
    """Carries out a ``LaunchPlan`` whose nodes are all this machine."""

    def __init__(self, sink: Callable[[OutputLine], None], grace_s: float = 3.0) -> None:
        self.sink = sink
        self.grace_s = grace_s

    def run(
        self,
        plan: LaunchPlan,
        renew: Renew | None = None,
        progress: Callable[[str], None] | None = None,
        submitted: Callable[[Handle], None] | None = None,
    ) -> RunResult:
        """``renew`` is left unused: this machine's nodes are never taken back. No handle goes to
        ``submitted``: this machine is the cluster, and this process the run's supervisor."""
        procs = []
        if plan.stop_first:
            stop_tagged(RUN_KEY, plan.run_id, grace=self.grace_s)
        for line in outcome(plan.deps, [run_step(deps) for deps in plan.deps]):  # one: the nodes share it
            if progress is not None:
                progress(line)
        sweeper = _start_sweeper(plan.run_id)
        store = self._start_store(plan)  # first: the agents start once it listens, and join it
        try:
            for launch in plan.nodes:
                procs.append(LocalNodeProcess(launch))
            if store is not None:
                store.ready()  # it imports torch as they do: their clients wait in its backlog
        except BaseException:
            for proc in procs:
                proc.kill()
            if store is not None:
                store.stop()
            sweeper.kill()
            raise

        def cleanup() -> None:  # the agents are gone: the store goes, then anything else of the run
            if store is not None:
                store.stop()
            stop_tagged(RUN_KEY, plan.run_id, grace=self.grace_s, exclude_children=True)
            sweeper.kill()  # the run ended with this process alive: nothing for it to sweep
            sweeper.wait()

        result = supervise(
            plan.run_id,
            procs,
            self.sink,
            cleanup=cleanup,
            grace_s=self.grace_s,
            elastic=Elastic(
                plan.min_nodes,
                relaunch=lambda i: LocalNodeProcess(plan.nodes[i]),
                threaded=False,
                store_alive=None if store is None else store.alive,
            )
            if plan.min_nodes
            else None,
            watch=Rules(hang_timeout_s=plan.hang_timeout_s),
        )
        if store is None:
            return result
        # this machine's nodes share an address: the rendezvous tells their agents apart by pid
        return store.explain(result, [Agent(p.node, launch.host, p.pid) for p, launch in zip(procs, plan.nodes)])

    def _start_store(self, plan: LaunchPlan) -> RdzvStore | None:
        """The run's rendezvous store, once it listens (started in this thread, which outlives the
        run: PR_SET_PDEATHSIG fires when the thread that started a child ends)."""
        if plan.store is None:
            return None
        proc = LocalNodeProcess(plan.store)
        return RdzvStore.start(plan.store.node, proc, self.sink, lambda: stop_process(proc, self.grace_s))
