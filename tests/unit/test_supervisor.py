"""The supervisor's rules, on scripted fake agents and a fake clock: no processes, no torch, no waiting."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ddpctl.infra.launch.diagnose import Agent, never_joined, rendezvous_hint
from ddpctl.infra.launch.supervise import RANKS_ENDED, Elastic, OutputLine, RunResult, Supervisor, parse_line
from ddpctl.infra.launch.watch import Rules


class FakeClock:
    """Time that passes only while the supervisor waits with nothing to read: a 3 s grace period
    costs a few loop turns. It stands still, waiting in real time (microseconds), while a node's
    scripted lines are on their way from the supervisor's reader thread, and at ``hold`` (a time and
    a condition) until the condition holds."""

    def __init__(self) -> None:
        self.t = 0.0
        self.nodes: list[FakeNode] = []
        self.ctrl_c_in_sleep = False  # a second Ctrl-C while the supervisor waits for agents to stop
        self.hold: tuple[float, Callable[[], bool]] | None = None

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        if self.ctrl_c_in_sleep:
            self.ctrl_c_in_sleep = False
            raise KeyboardInterrupt
        self.t += seconds

    def get(self, inbox: queue.Queue, timeout: float) -> object:
        streaming = any(n.polled and not n.streamed for n in self.nodes)
        held = self.hold is not None and self.t + timeout >= self.hold[0] and not self.hold[1]()
        if streaming or held:
            return inbox.get(timeout=0.001)
        try:
            return inbox.get_nowait()
        except queue.Empty:
            self.t += timeout
            if self.t > 600:
                raise TimeoutError("the run is still going after 600 s") from None
            raise


class FakeNode:
    """A scripted agent: prints ``lines`` at once, exits with ``code`` ``at`` seconds after it started
    (never, if None); terminate makes it exit -15 unless it ignores it; kill always works (-9)."""

    def __init__(
        self,
        clock: FakeClock,
        node: str,
        lines: tuple[str, ...] = (),
        *,
        code: int = 0,
        at: float | None = 1.0,
        ignores_term: bool = False,
        holds_pipe: bool = False,
    ) -> None:
        self.clock, self.node, self.script, self.code = clock, node, lines, code
        self.exits_at = None if at is None else clock.t + at
        self.ignores_term = ignores_term
        self.holds_pipe = holds_pipe  # a stray child keeps its stdout open after it exits
        self.signals: list[tuple[str, float]] = []  # ("term" | "kill", when)
        self.polled = self.streamed = False
        self.released = threading.Event()
        clock.nodes.append(self)

    def lines(self) -> Iterator[str]:
        for line in self.script:
            yield line + "\n"
        self.streamed = True
        if self.holds_pipe:
            self.released.wait(5.0)

    def poll(self) -> int | None:
        self.polled = True
        if not self.streamed or self.exits_at is None or self.clock.t < self.exits_at:
            return None  # running, or its last lines are still in the pipe
        return self.code

    def terminate(self) -> None:
        self.signals.append(("term", self.clock.t))
        if not self.ignores_term:
            self._exit(-15)

    def kill(self) -> None:
        self.signals.append(("kill", self.clock.t))
        self._exit(-9)

    def look(self) -> list[str]:  # a node that finds no rank of the run
        return []

    def end(self) -> None:
        self.kill()

    def _exit(self, code: int) -> None:
        if self.exits_at is None or self.clock.t < self.exits_at:
            self.code, self.exits_at = code, self.clock.t


class Sink:
    """The lines the supervisor passes on; Ctrl-C when one reads ``interrupt_on``."""

    def __init__(self, interrupt_on: str | None = None) -> None:
        self.lines: list[OutputLine] = []
        self.interrupt_on = interrupt_on

    def __call__(self, line: OutputLine) -> None:
        self.lines.append(line)
        if line.text == self.interrupt_on:
            self.interrupt_on = None
            raise KeyboardInterrupt

    def texts(self, node: str) -> list[str]:
        return [line.text for line in self.lines if line.node == node]

    def notes(self) -> list[str]:
        return [line.text.removeprefix("ddpctl: ") for line in self.lines if line.text.startswith("ddpctl: ")]


def supervise(
    clock: FakeClock,
    nodes: list[FakeNode],
    sink: Sink | None = None,
    *,
    elastic: Elastic | None = None,
    cleanup: Callable[[], None] = lambda: None,
) -> RunResult:
    result = Supervisor("r1", nodes, sink or Sink(), cleanup=cleanup, grace_s=3.0, elastic=elastic, clock=clock).run()
    for node in clock.nodes:
        node.released.set()
    return result


def statuses(result: RunResult) -> dict[str, str]:
    return {n.node: n.status for n in result.nodes}


def relaunch_as(clock: FakeClock, *outcomes: dict | Exception) -> Callable[[int], FakeNode]:
    """A lost node's relaunch: each call raises the next exception or starts a node with the next kwargs."""
    pending = list(outcomes)

    def relaunch(i: int) -> FakeNode:
        outcome = pending.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return FakeNode(clock, f"node{i}", **outcome)

    return relaunch


@pytest.mark.parametrize(
    "raw,rank,text",
    [
        ("[rank3]: loss 0.25\n", 3, " loss 0.25"),
        ("[rank12]:epoch 1", 12, "epoch 1"),
        ("torch.distributed.run: starting\n", None, "torch.distributed.run: starting"),
        ("[rank]: no number", None, "[rank]: no number"),
        ("text [rank1]: not at the start", None, "text [rank1]: not at the start"),
        # a line the worker wrote in pieces, each read and prefixed by torchrun's tee on its own
        ("[rank2]:ENV[rank2]: node2 ddp0\n", 2, "ENV node2 ddp0"),
        ("[rank2]:a[rank1]: b", 2, "a[rank1]: b"),
        ("[rank1]:[rank1]: Traceback (most", 1, "[rank1]: Traceback (most"),  # torch's own prefix stays
        ("[rank1]:[rank1]: Trace[rank1]:back", 1, "[rank1]: Traceback"),
    ],
)
def test_rank_lines(raw: str, rank: int | None, text: str) -> None:
    assert parse_line("node1", raw) == OutputLine("node1", rank, text)


def test_all_nodes_ok() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", at=2.0), FakeNode(clock, "node1", at=1.0)]
    result = supervise(clock, nodes)
    assert result.ok and result.exit_code == 0 and result.run_id == "r1"
    assert statuses(result) == {"node0": "ok", "node1": "ok"}
    assert [n.exit_code for n in result.nodes] == [0, 0]
    assert result.failed_node is None and not result.interrupted
    assert 2.0 <= result.wall_s < 2.5  # until the last agent exited
    assert all(n.signals == [] for n in nodes)


def test_every_line_reaches_the_sink_with_its_node_and_rank() -> None:
    clock = FakeClock()
    nodes = [
        FakeNode(clock, "node0", ("agent up", "[rank0]: step 1", "[rank1]: step 1")),
        FakeNode(clock, "node1", ("[rank2]: step 1", "[rank3]: step 1")),
    ]
    sink = Sink()
    supervise(clock, nodes, sink)
    assert [line for line in sink.lines if line.node == "node0"] == [
        OutputLine("node0", None, "agent up"),
        OutputLine("node0", 0, " step 1"),
        OutputLine("node0", 1, " step 1"),
    ]
    assert [line.rank for line in sink.lines if line.node == "node1"] == [2, 3]


def test_a_failed_node_fails_the_run_and_is_named() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", at=None), FakeNode(clock, "node1", code=1, at=1.0)]
    result = supervise(clock, nodes)
    assert result.exit_code == 1 and not result.ok
    assert result.failed_node == "node1"
    assert statuses(result)["node1"] == "failed" and result.nodes[1].exit_code == 1


def test_a_failed_node_stops_the_others() -> None:
    clock = FakeClock()
    nodes = [
        FakeNode(clock, "node0", at=None),
        FakeNode(clock, "node1", code=1, at=1.0),
        FakeNode(clock, "node2", at=None),
    ]
    result = supervise(clock, nodes)
    assert statuses(result) == {"node0": "stopped", "node1": "failed", "node2": "stopped"}
    assert [kind for kind, _ in nodes[0].signals] == ["term"]  # it obeyed: no kill
    assert [kind for kind, _ in nodes[2].signals] == ["term"]
    assert nodes[1].signals == []
    assert result.nodes[0].exit_code == -15


def test_a_node_that_ignores_terminate_is_killed_after_the_grace_period() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", at=None, ignores_term=True), FakeNode(clock, "node1", code=1, at=1.0)]
    result = supervise(clock, nodes)
    (term, term_t), (kill, kill_t) = nodes[0].signals
    assert (term, kill) == ("term", "kill")
    assert kill_t - term_t == pytest.approx(3.0, abs=0.1)  # grace_s
    assert statuses(result)["node0"] == "stopped" and result.nodes[0].exit_code == -9
    assert result.failed_node == "node1"


def test_a_node_that_ends_early_with_exit_0_is_no_failure() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", at=5.0), FakeNode(clock, "node1", at=1.0)]
    result = supervise(clock, nodes)
    assert result.ok and statuses(result) == {"node0": "ok", "node1": "ok"}
    assert nodes[0].signals == []


def test_ctrl_c_stops_every_node() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", ("step 1", "step 2"), at=None), FakeNode(clock, "node1", at=None)]
    result = supervise(clock, nodes, Sink(interrupt_on="step 2"))
    assert result.exit_code == 130 and result.interrupted
    assert statuses(result) == {"node0": "stopped", "node1": "stopped"}
    assert result.failed_node is None
    assert all([kind for kind, _ in n.signals] == ["term"] for n in nodes)


def test_ctrl_c_kills_a_node_that_ignores_terminate_after_the_grace_period() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", ("step 1",), at=None, ignores_term=True)]
    result = supervise(clock, nodes, Sink(interrupt_on="step 1"))
    (_, term_t), (kill, kill_t) = nodes[0].signals
    assert kill == "kill" and kill_t - term_t == pytest.approx(3.0, abs=0.1)
    assert result.exit_code == 130 and result.nodes[0].exit_code == -9


def test_a_second_ctrl_c_kills_at_once() -> None:
    clock = FakeClock()
    clock.ctrl_c_in_sleep = True
    nodes = [FakeNode(clock, "node0", ("step 1",), at=None, ignores_term=True)]
    result = supervise(clock, nodes, Sink(interrupt_on="step 1"))
    (_, term_t), (kill, kill_t) = nodes[0].signals
    assert kill == "kill" and kill_t == term_t
    assert result.exit_code == 130 and statuses(result) == {"node0": "stopped"}


@pytest.mark.parametrize("how", ["ok", "failed", "ctrl-c"])
def test_cleanup_runs_once_at_the_end(how: str) -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", ("step 1",), code=1 if how == "failed" else 0, at=None if how == "ctrl-c" else 1)]
    seen: list[int | None] = []
    supervise(clock, nodes, Sink("step 1" if how == "ctrl-c" else None), cleanup=lambda: seen.append(nodes[0].poll()))
    assert len(seen) == 1 and seen[0] is not None  # after the agent was gone


def test_a_pipe_held_open_by_a_stray_is_not_waited_on() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", ("done",), at=1.0, holds_pipe=True)]
    sink = Sink()
    result = supervise(clock, nodes, sink)
    assert result.ok and sink.texts("node0") == ["done"]
    assert 3.0 < result.wall_s < 3.5  # 2 s after the agent exited


# -- elastic runs: --nodes MIN:MAX


def three_nodes(clock: FakeClock, *, others_exit: float = 60.0) -> list[FakeNode]:
    """node2's agent dies (exit -9) at 1 s while the head and node1 go on."""
    return [
        FakeNode(clock, "node0", at=others_exit),
        FakeNode(clock, "node1", at=others_exit),
        FakeNode(clock, "node2", code=-9, at=1.0),
    ]


def test_elastic_a_lost_node_lets_the_run_go_on() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock)
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2))
    assert result.ok and result.failed_node is None
    assert statuses(result) == {"node0": "ok", "node1": "ok", "node2": "lost"}
    assert sink.notes() == ["node2 lost (exit -9); the run goes on with 2 node(s)"]
    assert nodes[0].signals == nodes[1].signals == []


def test_elastic_too_few_nodes_left_fails_the_run() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock)
    nodes[1].code, nodes[1].exits_at = 1, 2.0  # after node2: only the head would remain, MIN is 2
    result = supervise(clock, nodes, elastic=Elastic(2))
    assert result.exit_code == 1 and result.failed_node == "node1"
    assert statuses(result) == {"node0": "stopped", "node1": "failed", "node2": "lost"}


def test_elastic_the_head_node_is_never_lost_where_its_agent_hosts_the_store() -> None:
    clock = FakeClock()
    nodes = [
        FakeNode(clock, "node0", code=1, at=1.0),
        FakeNode(clock, "node1", at=None),
        FakeNode(clock, "node2", at=None),
    ]
    result = supervise(clock, nodes, elastic=Elastic(1))  # no store_alive: node0's agent hosts the rendezvous
    assert result.failed_node == "node0"
    assert statuses(result) == {"node0": "failed", "node1": "stopped", "node2": "stopped"}


def test_elastic_the_head_node_is_lost_like_any_other_while_its_store_runs() -> None:
    clock = FakeClock()
    nodes = [
        FakeNode(clock, "node0", code=-9, at=1.0),
        FakeNode(clock, "node1", at=60.0),
        FakeNode(clock, "node2", at=60.0),
    ]
    relaunch = relaunch_as(clock, dict(lines=("[rank2]: back",), at=29.0))  # back at 31 s, ends with the others
    sink = Sink()
    elastic = Elastic(2, relaunch=relaunch, threaded=False, store_alive=lambda: True)
    result = supervise(clock, nodes, sink, elastic=elastic)
    assert sink.notes() == [
        "node0 lost (exit -9); the run goes on with 2 node(s); starting it again in 30 s",
        "node0 started again: it joins at the next rendezvous",
    ]
    assert result.ok and statuses(result) == {"node0": "ok", "node1": "ok", "node2": "ok"}


def test_elastic_the_store_gone_fails_the_run_as_the_head_would() -> None:
    clock = FakeClock()
    nodes = [
        FakeNode(clock, "node0", code=-1, at=5.0),
        FakeNode(clock, "node1", at=60.0),
        FakeNode(clock, "node2", at=60.0),
    ]
    store_alive = lambda: clock.now() < 5.1  # noqa: E731  (the head node's link down: agent, then store)
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2, store_alive=store_alive))
    assert sink.notes() == [
        "node0 lost (exit -1); the run goes on with 2 node(s)",
        "the rendezvous store on node0 has stopped: the run cannot go on",
    ]
    assert result.exit_code == 1 and result.failed_node == "node0"
    assert statuses(result) == {"node0": "lost", "node1": "stopped", "node2": "stopped"}


def test_elastic_a_lost_node_is_started_again_after_a_pause() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock)
    relaunch = relaunch_as(clock, dict(lines=("[rank2]: back",), at=29.0))  # ends with the others, at 60 s
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2, relaunch=relaunch, relaunch_after_s=30.0, threaded=False))
    assert result.ok and statuses(result) == {"node0": "ok", "node1": "ok", "node2": "ok"}  # the new agent's
    assert sink.notes() == [
        "node2 lost (exit -9); the run goes on with 2 node(s); starting it again in 30 s",
        "node2 started again: it joins at the next rendezvous",
    ]
    assert OutputLine("node2", 2, " back") in sink.lines
    restarted = clock.nodes[3]
    assert restarted.exits_at == pytest.approx(1.0 + 30.0 + 29.0, abs=0.2)  # lost at 1 s, back 30 s later


def test_elastic_a_node_that_does_not_answer_is_tried_again_later() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock, others_exit=90.0)
    relaunch = relaunch_as(clock, OSError("no route to host"), dict(at=29.0))  # ends with the others, at 90 s
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2, relaunch=relaunch, relaunch_after_s=30.0, threaded=False))
    assert sink.notes()[1:] == [
        "node2 does not answer (no route to host); trying again later",
        "node2 started again: it joins at the next rendezvous",
    ]
    assert clock.nodes[3].exits_at == pytest.approx(1.0 + 30.0 + 30.0 + 29.0, abs=0.2)
    assert result.ok and statuses(result)["node2"] == "ok"


def test_elastic_relaunches_are_limited_per_node() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock)
    relaunch = relaunch_as(clock, dict(code=-9, at=1.0))  # back, and lost again
    sink = Sink()
    result = supervise(
        clock, nodes, sink, elastic=Elastic(2, relaunch=relaunch, relaunch_after_s=5.0, relaunches=1, threaded=False)
    )
    assert sink.notes() == [
        "node2 lost (exit -9); the run goes on with 2 node(s); starting it again in 5 s",
        "node2 started again: it joins at the next rendezvous",
        "node2 lost (exit -9); the run goes on with 2 node(s)",
    ]
    assert result.ok and statuses(result)["node2"] == "lost"
    assert len(clock.nodes) == 4  # one relaunch only


def test_elastic_no_relaunch_once_the_job_is_done() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock)
    nodes[0].exits_at, nodes[1].exits_at = 10.0, 18.0  # node2's turn to start again comes at 16 s
    relaunch = relaunch_as(clock)  # would fail the test if called
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2, relaunch=relaunch, relaunch_after_s=15, threaded=False))
    assert result.ok and statuses(result)["node2"] == "lost"
    assert len(clock.nodes) == 3 and len(sink.notes()) == 1


def test_elastic_a_node_still_waiting_to_rejoin_a_finished_run_is_stopped() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock, others_exit=40.0)
    relaunch = relaunch_as(clock, dict(at=None))  # back at 31 s, waits for a rendezvous that never comes
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2, relaunch=relaunch, threaded=False))
    assert sink.notes()[-1] == "node2 is still waiting to rejoin a finished run: stopping it"
    (term, term_t), *_ = clock.nodes[3].signals
    assert term == "term" and term_t == pytest.approx(40.0 + 10.0, abs=0.2)  # 10 s after the head was done
    assert result.ok and statuses(result)["node2"] == "lost"


def test_elastic_a_node_back_too_late_that_finds_the_rendezvous_closed_does_not_fail_the_run() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock, others_exit=40.0)
    relaunch = relaunch_as(clock, dict(code=1, at=12.0))  # back at 31 s; at 43 s torchrun: RendezvousClosedError
    sink = Sink()
    result = supervise(clock, nodes, sink, elastic=Elastic(2, relaunch=relaunch, threaded=False))
    assert sink.notes()[-1] == "node2 came back after the run had finished (exit 1): not counted"
    assert result.ok and statuses(result) == {"node0": "ok", "node1": "ok", "node2": "lost"}


def test_elastic_a_node_of_the_first_round_that_fails_after_the_job_is_done_fails_the_run() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock, others_exit=10.0)
    nodes[2].exits_at = 20.0  # node2 was never lost: its failure is the run's
    result = supervise(clock, nodes, elastic=Elastic(2, relaunch=relaunch_as(clock), threaded=False))
    assert result.exit_code == 1 and result.failed_node == "node2"


def test_elastic_a_relaunch_that_comes_back_after_the_job_is_done_is_killed() -> None:
    clock = FakeClock()
    nodes = three_nodes(clock, others_exit=40.0)
    nodes[1].exits_at = 45.0  # still running, so the supervisor is still looking
    late: list[FakeNode] = []

    def slow_relaunch(i: int) -> FakeNode:  # in a thread of its own, as over SSH: it answers at 41 s
        while clock.t < 41.0:
            time.sleep(0.0005)
        late.append(FakeNode(clock, "node2", at=None))
        return late[0]

    clock.hold = (44.0, lambda: bool(late and (late[0].signals or late[0].polled)))  # until the supervisor saw it
    result = supervise(clock, nodes, elastic=Elastic(2, relaunch=slow_relaunch, threaded=True))
    assert [kind for kind, _ in late[0].signals] == ["kill"]
    assert result.ok and statuses(result)["node2"] == "lost" and result.nodes[2].exit_code == -9


# ---- failures explained (launch/diagnose.py): each signature through the supervisor ---------------

SIGNATURES = [
    ("[rank1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "lower the per-rank batch"),
    (
        "[rank0]:RuntimeError: [enforce fail at device.cc:84] ifa != nullptr. Unable to find address for: eth9",
        "SOCKET_IFNAME",
    ),
    ("[rank1]:RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error", "NCCL_DEBUG=INFO"),
    (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
        "--port",
    ),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "`ddpctl check`"),
    ("torch.distributed.DistNetworkError: Failed to connect to 10.0.0.5:29500 (Connection refused)", "reach the head"),
    ("  exitcode  : -9 (pid: 4242)", "OOM killer"),
    ("terminate called without an active exception", "destroy_process_group"),
]


@pytest.mark.parametrize(("line", "hint"), SIGNATURES, ids=[h for _, h in SIGNATURES])
def test_a_failure_is_explained_by_its_signature(line: str, hint: str) -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, "node0", ("starting",), at=None), FakeNode(clock, "node1", ("starting", line), code=1)]
    result = supervise(clock, nodes)
    assert result.failed_node == "node1" and hint in result.hint


def test_the_failing_nodes_own_cause_wins() -> None:
    """node1 ran out of memory; node0 then lost its peer: the hint is node1's, not node0's echo."""
    clock = FakeClock()
    nodes = [
        FakeNode(clock, "node0", ("[rank0]:RuntimeError: Connection refused by peer 10.0.0.2",), at=None),
        FakeNode(clock, "node1", ("x", "[rank1]:torch.OutOfMemoryError: CUDA out of memory."), code=1, at=2.0),
    ]
    assert "batch size" in supervise(clock, nodes).hint


def test_a_rendezvous_timeout_is_named_as_a_cause() -> None:
    clock = FakeClock()
    line = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
    assert supervise(clock, [FakeNode(clock, "node0", (line,), code=1)]).cause == "rendezvous-timeout"


REMOTE = [Agent("node0", "10.0.0.10"), Agent("node1", "10.0.0.11"), Agent("node2", "10.0.0.12")]
LOCAL = [Agent("node0", "127.0.0.1", 100), Agent("node1", "127.0.0.1", 101)]


@pytest.mark.parametrize(
    ("agents", "joined", "missing"),
    [
        (REMOTE, ["10.0.0.10:5", "10.0.0.12:9"], ["node1"]),  # by address, whatever the remote pid
        (REMOTE, ["10.0.0.10:5"], ["node1", "node2"]),
        (REMOTE, ["10.0.0.10:5", "10.0.0.11:6", "10.0.0.12:7"], []),  # all joined: the general hint
        (REMOTE, [], ["node0", "node1", "node2"]),
        (LOCAL, ["127.0.0.1:100"], ["node1"]),  # one address: told apart by pid
        (LOCAL, ["127.0.0.1:999"], ["node0", "node1"]),  # an agent started again (another pid)
        ([Agent("node0", "127.0.0.1"), Agent("node1", "127.0.0.1")], ["127.0.0.1:5"], None),  # cannot tell
        ([Agent("a", "fe80::1"), Agent("b", "fe80::2")], ["fe80::1:5"], ["b"]),  # IPv6: the pid is after the last colon
    ],
)
def test_the_nodes_that_never_joined(agents: list[Agent], joined: list[str], missing: list[str] | None) -> None:
    assert never_joined(agents, joined) == missing


def test_the_rendezvous_hint_names_the_missing_nodes() -> None:
    assert rendezvous_hint(["node2"]).startswith("node2 never joined the rendezvous: check that it reaches")
    assert rendezvous_hint(["node1", "node2"]).startswith("node1, node2 never joined the rendezvous: check that they")
    assert rendezvous_hint([]).startswith("not every node joined the rendezvous in time")


def test_no_hint_for_an_unknown_failure_or_a_success_or_ctrl_c() -> None:
    clock = FakeClock()
    assert supervise(clock, [FakeNode(clock, "node0", ("ValueError: mine",), code=1)]).hint == ""
    clock = FakeClock()
    assert supervise(clock, [FakeNode(clock, "node0", ("exitcode  : -9",), code=0)]).hint == ""


# ---- watching the run (launch/watch.py): a hung run looked at, named and stopped; beats not shown


class LookedAt(FakeNode):
    """A fake agent whose ranks ``look`` finds in the given states."""

    def __init__(self, clock: FakeClock, node: str, lines: tuple[str, ...], looks: list[str], **kw) -> None:
        super().__init__(clock, node, lines, **kw)
        self.looks, self.looked = looks, 0

    def look(self) -> list[str]:
        self.looked += 1
        return self.looks


def watched(clock: FakeClock, nodes: list[FakeNode], rules: Rules, sink: Sink) -> RunResult:
    result = Supervisor("r1", nodes, sink, cleanup=lambda: None, grace_s=3.0, clock=clock, watch=rules).run()
    for node in clock.nodes:
        node.released.set()
    return result


def beats(rank: int) -> tuple[str, ...]:
    """Two heartbeat lines of a rank, as torchrun's tee passes them on."""
    return tuple(f'[rank{rank}]:DDPCTL_BEAT {{"step": {s}, "step_s": 0.1, "compute_s": 0.05}}' for s in (1, 50))


def test_a_hung_run_is_looked_at_named_and_stopped() -> None:
    clock = FakeClock()
    node0 = LookedAt(clock, "node0", beats(0), ["rank=0 pid=10 state=S"], at=None)
    node1 = LookedAt(clock, "node1", (*beats(1), "[rank1]:step 50"), ["rank=1 pid=11 state=T"], at=None)
    sink = Sink()
    result = watched(clock, [node0, node1], Rules(hang_timeout_s=30), sink)
    assert node0.looked == node1.looked == 1
    assert result.cause == "hung" and result.failed_node == "node1" and result.exit_code == 1
    assert result.hint.startswith("hung: rank 1 on node1 is stopped (T) (no progress for 30 s); "), result.hint
    assert {n.status for n in result.nodes} == {"stopped"}
    assert not any("DDPCTL_BEAT" in line.text for line in sink.lines)  # beats are read, not shown
    notes = sink.notes()
    assert notes[0].startswith("no beat and no output from any rank for 30 s: the run is hung; looking at")
    assert "rank 1 on node1 (pid 11): stopped (T)" in notes and "rank 0 on node0 (pid 10): waiting (S)" in notes
    assert 30 <= clock.t < 60  # named after its timeout, not a collective's 30 minutes


def test_a_run_that_never_beats_is_hung_after_its_silence() -> None:
    clock = FakeClock()
    nodes = [LookedAt(clock, f"node{i}", (f"[rank{i}]:hello",), [f"rank={i} pid={i} state=S"], at=None) for i in (0, 1)]
    result = watched(clock, nodes, Rules(hang_timeout_s=40), Sink())
    assert result.cause == "hung" and result.hint.startswith(
        "hung: every rank waits, none stopped (no progress for 40 s)"
    )
    assert 40 <= clock.t < 70


def test_ranks_that_ended_before_their_agents_are_no_hang() -> None:
    """Every rank done, torchrun still ending (its exit barrier, a loaded machine) past the hang timeout:
    the look finds no rank on any node that answered; the run is waited for, and succeeds."""
    clock, sink = FakeClock(), Sink()
    nodes = [LookedAt(clock, f"node{i}", beats(i), [], at=45.0) for i in (0, 1)]
    result = watched(clock, nodes, Rules(hang_timeout_s=30), sink)
    assert result.ok and result.cause == "" and result.hint == "", result.hint
    assert RANKS_ENDED in sink.notes()
    assert [n.looked for n in nodes] == [1, 1]


def test_agents_that_never_end_after_their_ranks_are_hung_at_the_second_look() -> None:
    clock = FakeClock()
    nodes = [LookedAt(clock, f"node{i}", beats(i), [], at=None) for i in (0, 1)]
    result = watched(clock, nodes, Rules(hang_timeout_s=30, startup_s=60), Sink())
    assert result.cause == "hung" and [n.looked for n in nodes] == [2, 2]
    assert "no rank runs on any node and torchrun has not ended" in result.hint, result.hint


def test_a_healthy_run_is_left_alone() -> None:
    clock = FakeClock()
    nodes = [FakeNode(clock, f"node{i}", beats(i), at=20.0) for i in (0, 1)]
    result = watched(clock, nodes, Rules(hang_timeout_s=30), Sink())
    assert result.ok and result.cause == "" and result.slow == []


def hung_elastic(clock: FakeClock, min_nodes: int, exit_at: float | None, sink: Sink) -> RunResult:
    """Three nodes, node2's rank stopped (T): an elastic run of MIN ``min_nodes``."""
    nodes = [
        LookedAt(clock, f"node{i}", beats(i), [f"rank={i} pid={i} state={'T' if i == 2 else 'S'}"], at=exit_at)
        for i in range(3)
    ]
    nodes[2].exits_at = None  # stopped: it never exits by itself
    elastic = Elastic(
        min_nodes, relaunch=lambda i: FakeNode(clock, f"node{i}"), threaded=False, store_alive=lambda: True
    )
    return Supervisor(
        "r1",
        nodes,
        sink,
        cleanup=lambda: None,
        grace_s=3.0,
        clock=clock,
        watch=Rules(hang_timeout_s=30),
        elastic=elastic,
    ).run()


def test_a_hung_elastic_run_goes_on_without_the_node_that_held_it_up() -> None:
    clock, sink = FakeClock(), Sink()
    result = hung_elastic(clock, 2, 60.0, sink)
    assert result.ok and result.cause == "" and result.failed_node is None
    assert [n.status for n in result.nodes] == ["ok", "ok", "lost"]  # done (at 60 s) before its relaunch (65 s)
    notes = sink.notes()
    assert any(n.startswith("hung: rank 2 on node2 is stopped (T) (no progress for 30 s)") for n in notes), notes
    assert "ending node2's processes: the elastic run goes on without it" in notes
    assert any(n.startswith("node2 lost (exit -9); the run goes on with 2 node(s)") for n in notes), notes


def test_a_hung_elastic_run_at_its_minimum_is_ended() -> None:
    result = hung_elastic(FakeClock(), 3, None, Sink())
    assert result.cause == "hung" and result.failed_node == "node2" and result.exit_code == 1
    assert {n.status for n in result.nodes} == {"stopped"}  # every node ended, none lost
