"""What the supervisor drives and reports: a node's agent, its output lines, the run's result, elastic rules."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ..model.words import Word

RANK_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$", re.S)


class NodeProcess(Protocol):
    """One node's torchrun agent, however it was started."""

    node: str

    def lines(self) -> Iterator[str]: ...  # stdout and stderr, merged, until the agent exits
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...  # ask the agent (and so its workers) to stop
    def kill(self) -> None: ...


@dataclass(frozen=True)
class OutputLine:
    node: str
    rank: int | None  # global rank, None for the agent's own lines
    text: str


class NodeStatus(Word):
    """How a node's part of a run ended: equal to, written and shown as its word."""

    OK = "ok"
    FAILED = "failed"
    STOPPED = "stopped"  # ddpctl stopped it: Ctrl-C, `ddpctl stop`, another node failed first, a cancelled job
    LOST = "lost"  # elastic: the run went on without it


@dataclass
class NodeResult:
    node: str
    exit_code: int | None
    status: NodeStatus

    def __post_init__(self) -> None:
        self.status = NodeStatus(self.status)


@dataclass
class RunResult:
    run_id: str
    exit_code: int  # 0 ok, 1 a node failed, 130 interrupted
    wall_s: float
    nodes: list[NodeResult] = field(default_factory=list)
    failed_node: str | None = None
    interrupted: bool = False
    hint: str = ""  # a failure's known cause, what it means and what to do (launch/diagnose.py)
    cause: str = ""  # that cause's name (launch/diagnose.py's CAUSES), e.g. "rendezvous-timeout"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def result_of(doc: dict) -> RunResult:
    """The result in a run's record (``run.json``)."""
    r = dict(doc["result"])
    r["nodes"] = [NodeResult(**n) for n in r.get("nodes", [])]
    return RunResult(**r)


def parse_line(node: str, raw: str) -> OutputLine:
    """torchrun's ``[rank3]:text`` (its ``--tee`` with ddpctl's prefix template) or an agent's own line."""
    text = raw.rstrip("\n")
    match = RANK_LINE.match(text)
    if match:
        # torchrun's tee prefixes each piece it reads: a line its worker wrote in pieces (print's
        # arguments under PYTHONUNBUFFERED) comes as "[rank2]:ENV[rank2]: node2 ...": one line again.
        # The text's own leading "[rank2]: " (torch's, on a rank's traceback) stays.
        text = match.group(2)
        return OutputLine(node, int(match.group(1)), text[:1] + text[1:].replace(f"[rank{match.group(1)}]:", ""))
    return OutputLine(node, None, text)


@dataclass(frozen=True)
class Elastic:
    """An elastic run's rules: which nodes may be lost, and how a lost node is brought back."""

    min_nodes: int
    #: start a lost node's agent again (it joins the survivors at their next rendezvous); raises if
    #: the node cannot be reached. None: lost nodes stay lost.
    relaunch: Callable[[int], NodeProcess] | None = None
    #: long enough for the survivors to start their smaller round first (torchrun.ELASTIC_RDZV_CONF)
    relaunch_after_s: float = 30.0
    relaunches: int = 3  # per node
    #: whether the run's rendezvous store (on the head node, a process apart from its agent) still
    #: runs. Given, the head's agent may be lost like any other while the store runs, and the run
    #: fails once the store has stopped; None: the head's agent is never lost
    store_alive: Callable[[], bool] | None = None
    #: call ``relaunch`` in a thread of its own (it may wait on a network); False for local
    #: processes, whose PR_SET_PDEATHSIG fires when the thread that started them ends
    threaded: bool = True
