"""What the supervisor drives: a node's agent, its output lines parsed, elastic rules (the line and result
types are model/results.py's, named here too for launch/'s modules)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..model.results import NodeResult as NodeResult
from ..model.results import NodeStatus as NodeStatus
from ..model.results import OutputLine
from ..model.results import RunResult as RunResult
from ..model.results import result_of as result_of

#: a line of ``output.log``, as ``runs/<id>/output.log`` has them (``runs/logs.py``)
LOG_LINE = re.compile(r"\[(?P<node>[^\] ]+)(?: r(?P<rank>\d+))?\] (?P<text>.*)")


def log_line(line: OutputLine) -> str:
    rank = "" if line.rank is None else f" r{line.rank}"
    return f"[{line.node}{rank}] {line.text}\n"


def read_log_line(raw: str) -> OutputLine:
    m = LOG_LINE.fullmatch(raw.rstrip("\n"))
    if m is None:
        return OutputLine("?", None, raw.rstrip("\n"))
    return OutputLine(m["node"], int(m["rank"]) if m["rank"] else None, m["text"])


RANK_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$", re.S)


class NodeProcess(Protocol):
    """One node's torchrun agent, however it was started."""

    node: str

    def lines(self) -> Iterator[str]: ...  # stdout and stderr, merged, until the agent exits
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...  # ask the agent (and so its workers) to stop
    def kill(self) -> None: ...
    def look(self) -> list[str]: ...  # its ranks' states, each one's stack asked for (a hung run)
    def end(self) -> None: ...  # its agent and ranks killed: the node lost (a hung elastic run goes on without it)


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
