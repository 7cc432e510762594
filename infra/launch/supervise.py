"""Run one agent per node, stream their output, fail fast, stop everything on Ctrl-C.

Over 300 lines because it is one state machine: every rule of ``Supervisor`` reads and sets the same run's state.

Executor-agnostic: it drives ``NodeProcess`` handles (a local subprocess, an SSH session...), so the
local and SSH executors share the same fail-fast and clean-up behaviour. ``supervise()`` is the
entry point; ``Supervisor`` holds one run's state, one method per rule.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

# the types live in nodes.py; callers import them from here
from .diagnose import Diagnosis
from .nodes import Elastic, NodeProcess, NodeResult, NodeStatus, OutputLine, RunResult, parse_line
from .watch import STATES, Rules, Stacks, Watcher, hang_cause, parse_beat, parse_look

NEVER = float("inf")


class Clock:
    """How the supervisor tells and spends time: real time here, a fake one in tests."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def get(self, inbox: queue.Queue, timeout: float) -> Any:
        """The next item put in ``inbox``, waiting at most ``timeout`` seconds (then ``queue.Empty``)."""
        return inbox.get(timeout=timeout)


def supervise(
    run_id: str,
    procs: list[NodeProcess],
    sink: Callable[[OutputLine], None],
    *,
    cleanup: Callable[[], None],
    grace_s: float = 3.0,
    elastic: Elastic | None = None,
    watch: Rules | None = None,
) -> RunResult:
    """Stream every node's lines to ``sink`` until all agents exit.

    When any agent exits non-zero, the others are terminated (SIGKILL after ``grace_s``), except in
    an ``elastic`` run: there a node may be lost while ``min_nodes`` remain (the head, ``procs[0]``,
    whose node hosts the rendezvous store, only while that store runs: ``Elastic.store_alive``);
    the survivors' torchrun agents re-rendezvous and go on, and the lost node's agent is started
    again after a pause (if the node answers), to join at the next rendezvous. The first agent to
    exit 0 means the job is done (torchrun's agent exits 0 only when its workers succeeded, or when
    a finished rendezvous has no room for it). On KeyboardInterrupt every agent is stopped.
    ``cleanup`` runs last, always, to stop any process of the run that outlived its agent (and the
    run's rendezvous store, which the executor started first: ``rdzv_store.py``).
    ``watch``: when the run is hung, and which node is slow (``watch.py``; its ranks' heartbeats are
    read here, not passed on); a hung run's ranks are looked at (``NodeProcess.look``), then it is stopped.
    """
    return Supervisor(run_id, procs, sink, cleanup=cleanup, grace_s=grace_s, elastic=elastic, watch=watch).run()


#: a hang's look that found no rank on any node, every node answering: the ranks ended, their agents not yet
RANKS_ENDED = (
    "no rank runs on any node: they ended and torchrun is ending the run (or starting them again); "
    "waiting for it (a hang again if it is silent that long)"
)


class Supervisor:
    """One run's supervision (see ``supervise``): a loop of turns, each looking at every node once."""

    tick_s = 0.05  # how long a turn waits for output
    stray_pipe_s = 2.0  # every agent gone, how long to wait for a pipe that a stray process holds open
    rejoin_wait_s = 10.0  # the job done (elastic), how long a node may still wait to rejoin (at least grace_s)
    stacks_s = 5.0  # a hung run: how long its ranks' stacks have to come back before it is stopped

    def __init__(
        self,
        run_id: str,
        procs: list[NodeProcess],
        sink: Callable[[OutputLine], None],
        *,
        cleanup: Callable[[], None],
        grace_s: float = 3.0,
        elastic: Elastic | None = None,
        clock: Clock | None = None,
        watch: Rules | None = None,
    ) -> None:
        self.run_id = run_id
        self.procs = list(procs)
        self.sink = sink
        self.cleanup = cleanup
        self.grace_s = grace_s
        self.elastic = elastic
        self.clock = clock or Clock()
        self.failed: str | None = None  # the node whose exit failed the run
        self.interrupted = False
        self.stopped: set[str] = set()  # nodes the supervisor terminated
        self.lost: dict[int, float] = {}  # node index -> when to start it again (NEVER: not, or under way)
        self.relaunched: dict[int, int] = {}  # node index -> relaunch attempts
        self.kill_at: float | None = None  # when what is still running after a terminate gets SIGKILL
        self.done_at: float | None = None  # elastic: when the first agent exited 0 (the job is done)
        self.exited_at: float | None = None  # when every agent had exited
        self._lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self._rejoins: queue.Queue[tuple[int, NodeProcess | BaseException]] = queue.Queue()
        self._open_streams = 0
        self.diagnosis = Diagnosis()
        self.watcher = Watcher(watch or Rules(), self.clock.now())
        self.stacks = Stacks()  # each rank's place, from the stacks a hung run's ranks print
        # a hung run, its ranks looked at: (when to stop it, how long it was silent, what look found, whether
        # every node answered)
        self.hang: tuple[float, float, list, bool] | None = None
        self.hang_text = ""  # its cause, in one line
        self.rankless = False  # a hang's look found no rank on any node (and no rank has printed since)

    def run(self) -> RunResult:
        start = self.clock.now()
        for i in range(len(self.procs)):
            self._pump(i)
        try:
            while not self._turn():
                pass
        except KeyboardInterrupt:
            self.interrupted = True
            self._stop_and_wait()
        except BaseException:  # any other failure here (a full disk under the sink...): no agent outlives us
            self._stop_and_wait()
            raise
        finally:
            self.cleanup()
        return self._result(self.clock.now() - start)

    def _turn(self) -> bool:
        """Look at everything once; True when the run is over."""
        self._stream_lines()
        self._take_rejoins()
        codes = [p.poll() for p in self.procs]
        if self.elastic is not None and 0 in codes and self.done_at is None:
            self.done_at = self.clock.now()  # done: a node still waiting to rejoin has nothing to join
        if self.failed is None:
            self._judge_store()
        if self.failed is None:
            self._judge_exits(codes)
            self._start_due_relaunches()
        if self.failed is None and self.done_at is None and self.kill_at is None:
            self._watch()
        self._stop_late_rejoiners()
        self._kill_after_grace()
        return self._over(codes)

    # -- output

    def _pump(self, i: int) -> None:
        self._open_streams += 1
        threading.Thread(target=_pump, args=(i, self.procs[i], self._lines), daemon=True).start()

    def _stream_lines(self) -> None:
        """Pass on every line there is, until none comes for a tick; before looking at exit codes."""
        try:
            while True:
                i, line = self.clock.get(self._lines, self.tick_s)
                if line is None:
                    self._open_streams -= 1
                else:
                    self._line(parse_line(self.procs[i].node, line))
        except queue.Empty:
            pass

    def _line(self, parsed: OutputLine) -> None:
        beat = parse_beat(parsed.text) if parsed.rank is not None else None
        self.rankless = self.rankless and parsed.rank is None
        if beat is not None:  # a rank's heartbeat: read, not shown
            self.watcher.beat(parsed.node, parsed.rank, beat, self.clock.now())
            return
        self.watcher.line(self.clock.now(), parsed.rank)
        self.stacks.feed(parsed.node, parsed.rank, parsed.text)
        self.diagnosis.feed(parsed)  # what a failure's lines say about its cause
        self.sink(parsed)

    def _note(self, i: int, text: str) -> None:
        self.sink(OutputLine(self.procs[i].node, None, f"ddpctl: {text}"))

    # -- a hung run, a slow node

    def _watch(self) -> None:
        """Say what the watcher sees; a hung run's ranks looked at, then, their stacks back, it is stopped."""
        if self.hang is not None:
            if self.clock.now() >= self.hang[0]:
                self._stop_hung(*self.hang[1:])
            return
        nodes = [proc.node for proc in self.procs]
        for alarm in self.watcher.tick(self.clock.now()):
            i = nodes.index(alarm.node) if alarm.node in nodes else 0
            if alarm.kind == "hung":
                self._note(i, f"{alarm.text}; looking at every rank (its state, its Python stack)")
                silent = self.clock.now() - self.watcher.last_progress  # before the stacks come
                looks, answered = self._look()
                if not looks and answered and not self.rankless:  # the ranks ended: torchrun is ending
                    self.rankless = True  # (or starting them again); its own timeouts bound that
                    self._note(i, RANKS_ENDED)
                    self.watcher.restart(self.clock.now())
                    return
                self.hang = (self.clock.now() + self.stacks_s, silent, looks, answered)
            else:
                self._note(i, alarm.text)

    def _look(self) -> tuple[list, bool]:
        """Every node's ranks: their process state, each one's stack asked for (it prints it on stderr);
        and whether every node answered."""
        found: dict[int, list[str]] = {}

        def look(i: int) -> None:
            try:
                found[i] = list(self.procs[i].look())
            except Exception as exc:  # a node that does not answer: said, and the run still ends
                self._note(i, f"{self.procs[i].node} could not be looked at: {exc}")

        threads = [threading.Thread(target=look, args=(i,), daemon=True) for i in range(len(self.procs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60.0)
        looks = []
        for i in sorted(found):
            for line in found[i]:
                seen = parse_look(self.procs[i].node, line)
                if seen is not None:
                    looks.append(seen)
                    state = STATES.get(seen.state, "state")
                    self._note(i, f"rank {seen.rank} on {seen.node} (pid {seen.pid}): {state} ({seen.state})")
        return looks, len(found) == len(self.procs)

    def _stop_hung(self, waited: float, looks: list, answered: bool) -> None:
        """The run ended as hung; an elastic one goes on without the node that held it up, if it may."""
        self.hang = None
        node, text = hang_cause(looks, self.stacks.places, waited, self.run_id, answered=answered)
        nodes = [p.node for p in self.procs]
        if node in nodes and self._may_lose(nodes.index(node)):
            i = nodes.index(node)
            self._note(i, text.split("; each rank's stack")[0])
            self._note(i, f"ending {node}'s processes: the elastic run goes on without it")
            self.procs[i].end()  # its agent and ranks: lost, as a node is
            self.watcher.restart(self.clock.now())
            self.stacks = Stacks()  # the ranks' places were the old ones'
            return
        self.hang_text = text
        self.failed = node if node in nodes else self.procs[0].node
        self._note(self.procs.index(next(p for p in self.procs if p.node == self.failed)), self.hang_text)
        self._stop_all()

    # -- fail fast, or lose a node

    def _judge_exits(self, codes: list[int | None]) -> None:
        """A node that exited non-zero fails the run and the others are stopped, unless it may be lost."""
        for i, code in enumerate(codes):
            if code in (None, 0) or i in self.lost:
                continue
            if self._may_lose(i):
                self._lose(i, code)
                continue
            if self._came_back_too_late(i):
                self.lost[i] = NEVER
                self._note(i, f"{self.procs[i].node} came back after the run had finished (exit {code}): not counted")
                continue
            self.failed = self.procs[i].node
            self._stop_all()
            return

    def _may_lose(self, i: int) -> bool:
        """Elastic, the job not done: any node while MIN nodes would remain; the head only while
        the store on its node runs (the survivors rendezvous there)."""
        if self.elastic is None or self.done_at is not None:
            return False
        if i == 0 and not (self.elastic.store_alive is not None and self.elastic.store_alive()):
            return False
        return len(self.procs) - len(self.lost) - 1 >= self.elastic.min_nodes

    def _judge_store(self) -> None:
        """Elastic: the rendezvous store gone before the job is done (its node lost, or killed), no
        agent can rendezvous again: the run fails there, as if the head had."""
        elastic = self.elastic
        if elastic is None or elastic.store_alive is None or self.done_at is not None or elastic.store_alive():
            return
        self.failed = self.procs[0].node
        self._note(0, f"the rendezvous store on {self.procs[0].node} has stopped: the run cannot go on")
        self._stop_all()

    def _came_back_too_late(self, i: int) -> bool:
        """Elastic: a node started again that exits non-zero once the job is done found the rendezvous
        closed (torchrun's agent exits 1 on RendezvousClosedError): it missed the run, it did not fail it."""
        return self.done_at is not None and self.relaunched.get(i, 0) > 0

    def _lose(self, i: int, code: int) -> None:
        elastic = self.elastic
        assert elastic is not None
        can_retry = elastic.relaunch is not None and self.relaunched.get(i, 0) < elastic.relaunches
        self.lost[i] = self.clock.now() + elastic.relaunch_after_s if can_retry else NEVER
        left = len(self.procs) - len(self.lost)
        again = f"; starting it again in {elastic.relaunch_after_s:.0f} s" if can_retry else ""
        self._note(i, f"{self.procs[i].node} lost (exit {code}); the run goes on with {left} node(s){again}")

    def _stop_all(self) -> None:
        """SIGTERM to every agent still running; ``_kill_after_grace`` does the rest."""
        running = [proc for proc in self.procs if proc.poll() is None]
        self.stopped.update(proc.node for proc in running)
        _on_all(running, "terminate")
        self.kill_at = self.clock.now() + self.grace_s

    def _kill_after_grace(self) -> None:
        if self.kill_at is not None and self.clock.now() > self.kill_at:
            _on_all([proc for proc in self.procs if proc.poll() is None], "kill")
            self.kill_at = None

    # -- elastic: a lost node started again

    def _start_due_relaunches(self) -> None:
        now = self.clock.now()
        for i, when in list(self.lost.items()):
            if now >= when and self.done_at is None:
                assert self.elastic is not None
                self.lost[i] = NEVER  # until the attempt reports back
                self.relaunched[i] = self.relaunched.get(i, 0) + 1
                if self.elastic.threaded:
                    threading.Thread(target=self._relaunch, args=(i,), daemon=True).start()
                else:
                    self._relaunch(i)

    def _relaunch(self, i: int) -> None:
        assert self.elastic is not None and self.elastic.relaunch is not None
        try:
            self._rejoins.put((i, self.elastic.relaunch(i)))
        except BaseException as exc:
            self._rejoins.put((i, exc))

    def _take_rejoins(self) -> None:
        """A lost node's agent started again (it joins at the next rendezvous), or not (try later)."""
        while not self._rejoins.empty():
            i, got = self._rejoins.get()
            if isinstance(got, BaseException):
                assert self.elastic is not None
                self._note(i, f"{self.procs[i].node} does not answer ({got}); trying again later")
                self.lost[i] = self.clock.now() + self.elastic.relaunch_after_s
            elif self.failed is not None or self.done_at is not None:
                got.kill()  # too late: nothing to join
            else:
                self.procs[i] = got
                del self.lost[i]
                self._pump(i)
                self._note(i, f"{got.node} started again: it joins at the next rendezvous")

    def _stop_late_rejoiners(self) -> None:
        """The job done, a node still waiting to rejoin is stopped (and counted lost) after a while."""
        if self.done_at is None or self.kill_at is not None:
            return
        if self.clock.now() - self.done_at <= max(self.grace_s, self.rejoin_wait_s):
            return
        for i, proc in enumerate(self.procs):
            if proc.poll() is None:
                self._note(i, f"{proc.node} is still waiting to rejoin a finished run: stopping it")
                self.lost[i] = NEVER
                proc.terminate()
        self.kill_at = self.clock.now() + self.grace_s

    # -- the end

    def _over(self, codes: list[int | None]) -> bool:
        """Every agent gone and its output read (but not waiting on a pipe a stray holds open)."""
        if any(code is None for code in codes):
            return False
        if self.exited_at is None:
            self.exited_at = self.clock.now()
        return self._open_streams == 0 or self.clock.now() - self.exited_at > self.stray_pipe_s

    def _stop_and_wait(self) -> None:
        """Ctrl-C (or an error): every agent stopped, SIGKILL after the grace period or at a second Ctrl-C."""
        self._stop_all()
        try:
            while any(p.poll() is None for p in self.procs) and self.clock.now() < self.kill_at:
                self.clock.sleep(self.tick_s)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: kill at once
        _on_all([proc for proc in self.procs if proc.poll() is None], "kill")

    def _result(self, wall_s: float) -> RunResult:
        cause = self.diagnosis.cause(self.failed) if self.failed and not self.interrupted else None
        hint, cause_name = (cause.hint, cause.name) if cause else ("", "")
        if self.hang_text and not self.interrupted:
            hint, cause_name = self.hang_text, "hung"
        nodes = []
        for i, proc in enumerate(self.procs):
            code = proc.poll()
            if proc.node in self.stopped:
                status = NodeStatus.STOPPED
            elif i in self.lost:
                status = NodeStatus.LOST
            else:
                status = NodeStatus.OK if code == 0 else NodeStatus.FAILED
            nodes.append(NodeResult(proc.node, code, status))
        return RunResult(
            run_id=self.run_id,
            exit_code=130 if self.interrupted else (0 if self.failed is None else 1),
            wall_s=round(wall_s, 3),
            nodes=nodes,
            failed_node=self.failed,
            interrupted=self.interrupted,
            hint=hint,
            cause=cause_name,
            slow=self.watcher.slow_nodes(),
        )


def _pump(i: int, proc: NodeProcess, out: queue.Queue) -> None:
    try:
        for line in proc.lines():
            out.put((i, line))
    finally:
        out.put((i, None))


def _on_all(procs: list[NodeProcess], verb: str) -> None:
    """``terminate`` or ``kill`` every process at once: a remote node's is a round trip (SSH), and
    one after the other they would add up with the nodes."""
    if len(procs) <= 1:
        for proc in procs:
            getattr(proc, verb)()
        return
    threads = [threading.Thread(target=getattr(proc, verb), daemon=True) for proc in procs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
