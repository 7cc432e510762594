"""Short failures on the terminal: a failing run shows the first failing rank's own traceback once,
not torchrun's secondary traces.

Pure: ``OutputLine``s in, what the terminal shows out. Only the terminal: the run's ``output.log``
(and so ``ddpctl logs``) and the ``--json`` document keep every line; ``run --all-lines`` shows
them all.

The rule:

- a rank's traceback (``Traceback (most recent call last):`` up to its exception line, torch's
  ``[rankN]:`` prefix aside) is held until its exception line. The first one that is not a peer's
  reaction (``REACTION``: the connection to a crashed rank closed, reset, timed out) is shown, and
  from then on every line of that rank; any other rank's traceback is left out (a chained one too:
  ``During handling ...``, indented lines), and that rank's next ordinary line is shown again. If
  every traceback was a reaction, the first of them is shown when the run's lines end. A shown
  rank that goes on printing ordinary lines did not fail (it logged an exception it caught): the
  next traceback is judged afresh;
- an agent's own traceback (torchrun's ``ChildFailedError``, an elastic error; a logged one too,
  judged without torch's logging prefix ``E1130 02:41:25.576000 32294 <file>:<line>]``) is left out,
  with the ``ChildFailedError`` block after it (up to its closing ``====`` line): its exception line is
  shown once (the same text from another node is not), unless it is ``ChildFailedError``'s, which
  says nothing by itself. Once a rank's traceback has begun, torchrun's one-line reactions
  (``failed (exitcode: 1) local_rank: ...``, ``closing signal``, its log tailer's error when it is
  stopped as it ends) are left out too, as exception lines of its tracebacks or lines of their own;
- torchelastic's root cause (the ``ChildFailedError`` block's first entry: rank, exit code, and
  the traceback from the rank's error file where the job wrote one, ``@record``) is shown when the
  run's lines end if no rank's traceback was shown: a rank killed by a signal prints none;
- when the run's lines end and lines were left out, one line says how many, and where they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpctl.infra.model.results import OutputLine

#: torch's prefix on an uncaught exception's lines in a distributed job (beside torchrun's own).
RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")
TRACEBACK = "Traceback (most recent call last):"
#: lines that continue a traceback past its exception line: a chained exception's
CHAINED = re.compile(r"^(During handling of the above exception|The above exception was the direct cause|\s|$)")
#: a rank's exception that is its reaction to another rank's failure, not a cause of its own
REACTION = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe|recv(Value|Vector)? failed"
    r"|DistNetworkError|Socket Timeout|NCCL communicator was aborted|ProcessGroupNCCL.*(Watchdog|timed out|timeout)"
    r"|Connection refused|TCPStore.*(failed|closed)",
    re.IGNORECASE,
)
#: torchrun's one-line reactions to a failed worker (and to being stopped itself, as ddpctl stops the
#: other agents: its log tailer's SignalException, logged with a traceback when the signal comes as it ends)
AGENT_REACTION = re.compile(
    r"failed \(exitcode: -?\d+\) local_rank:|closing signal SIG\w+|Received \S+ death signal"
    r"|no error file defined for parent|error in log tailer|SignalException: Process \d+ got signal"
)
#: torch's logging prefix on an agent's logged lines (level, date, time, thread, file:line), judged without it
LOG_PREFIX = re.compile(r"^[DIWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ \S+:\d+\] ")
CHILD_FAILED = "ChildFailedError:"
RULE = re.compile(r"^={20,}\s*$")
FIELD = re.compile(r"^\s{2}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<value>.*?)\s*$")


@dataclass
class _Block:
    """A traceback being printed by one node's agent or one rank."""

    lines: list[OutputLine] = field(default_factory=list)
    done: bool = False  # its exception line came

    @property
    def last(self) -> str:
        return _text(self.lines[-1]) if self.lines else ""


def _text(line: OutputLine) -> str:
    return RANK_PREFIX.sub("", line.text) if line.rank is not None else line.text


@dataclass
class RootCause:
    """The first entry of torchrun's ``Root Cause (first observed failure)``."""

    node: str
    rank: str = ""
    exitcode: str = ""
    error_file: str = ""
    traceback: list[str] = field(default_factory=list)

    def rank_of(self) -> int | None:
        head = self.rank.split(" (")[0]
        return int(head) if head.isdigit() else None

    def lines(self) -> list[str]:
        rank = self.rank.split(" (")[0]
        head = f"ddpctl: torchrun's root cause: rank {rank} on {self.node}, exit code {self.exitcode.split(' (')[0]}"
        known = [t for t in self.traceback if t.strip() and not t.startswith("To enable traceback")]
        return [head + (":" if known else "")] + [f"  {t}" for t in known]


class SecondaryTraces:
    """Decides, line by line, which job lines the terminal shows (``take``), releases what it held
    when the run's lines end (``end``), and says once how many it left out (``note``)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.root: tuple[str, int] | None = None  # the rank whose traceback is shown
        self.failing = False  # a rank's traceback has begun
        self.hidden = 0
        self._blocks: dict[tuple[str, int | None], _Block] = {}
        self._after: set[tuple[str, int | None]] = set()  # left out a traceback: its chain goes on?
        self._held: list[_Block] = []  # reactions, shown at the end if no cause is
        self._child: dict[str, list[str] | None] = {}  # node -> its ChildFailedError block's lines
        self._said: set[str] = set()  # agents' exception lines shown
        self._causes: list[RootCause] = []  # each agent's root cause, as its blocks came
        self._ended = False
        self._noted = False

    def take(self, line: OutputLine) -> list[OutputLine]:
        """The lines to show now, in order (this one, one held before, or none)."""
        key = (line.node, line.rank)
        if line.rank is None:
            return self._agent(line)
        text = _text(line)
        if self.root == key:
            if not (CHAINED.match(text) or text.startswith(TRACEBACK)):
                self.root = None  # it goes on: that traceback was logged, not its end
                self.failing = False
            return [line]
        block = self._blocks.get(key)
        if block is None and key in self._after and CHAINED.match(text):
            self.hidden += 1  # a left-out traceback's chain goes on
            return []
        self._after.discard(key)
        if block is None:
            if not text.startswith(TRACEBACK):
                return [line]
            self.failing = True
            block = self._blocks[key] = _Block()
        block.lines.append(line)
        if text.startswith((" ", TRACEBACK)) or not text:
            return []  # the traceback goes on
        del self._blocks[key]  # its exception line: the block is whole
        return self._decide(key, block)

    def _decide(self, key: tuple[str, int | None], block: _Block) -> list[OutputLine]:
        if self.root is None and not REACTION.search(block.last):
            self.root = (key[0], key[1] or 0)
            self.hidden += sum(len(b.lines) for b in self._held)
            self._held.clear()
            return block.lines
        if self.root is None and not self._held:
            self._held.append(block)  # a reaction: shown at the end if nothing better comes
        else:
            self.hidden += len(block.lines)
        self._after.add(key)
        return []

    def _agent(self, line: OutputLine) -> list[OutputLine]:
        text, node = LOG_PREFIX.sub("", line.text), line.node
        child = self._child.get(node)
        if child is not None:  # inside a ChildFailedError block: left out, read for the root cause
            self.hidden += 1
            child.append(text)
            if RULE.match(text) and sum(1 for t in child if RULE.match(t)) >= 2:
                self._child[node] = None
                self._root_cause(node, child)
            return []
        block = self._blocks.get((node, None))
        if block is None and text.startswith(TRACEBACK):
            block = self._blocks[(node, None)] = _Block()
        if block is not None:
            block.lines.append(line)
            self.hidden += 1
            if text.startswith((" ", TRACEBACK)) or not text:
                return []
            del self._blocks[(node, None)]
            if CHILD_FAILED in text:
                self._child[node] = []
                return []
            if text in self._said or (self.failing and AGENT_REACTION.search(text)):
                return []
            self._said.add(text)
            self.hidden -= 1
            return [line]  # the agent's error, once
        if self.failing and AGENT_REACTION.search(text):
            self.hidden += 1
            return []
        return [line]

    def _root_cause(self, node: str, block: list[str]) -> None:
        """The block's first root cause entry (torchrun's: its own node's workers only)."""
        at = next((i for i, t in enumerate(block) if t.startswith("Root Cause")), None)
        if at is None:
            return
        cause, key = RootCause(node), ""
        for text in block[at + 1 :]:
            m = FIELD.match(text)
            if m:
                key = m["key"]
                if key == "traceback":
                    cause.traceback.append(m["value"])
                elif key in ("rank", "exitcode", "error_file"):
                    setattr(cause, key, m["value"])
            elif key == "traceback" and not RULE.match(text) and not text.startswith("["):
                cause.traceback.append(text.strip() if not text.startswith("    ") else text[2:])
            elif (RULE.match(text) or text.startswith("[")) and cause.rank:
                break
        if cause.rank:
            self._causes.append(cause)

    def _cause(self) -> RootCause | None:
        """The run's root cause among the agents': one that is no reaction to another rank's
        failure (a signal, the job's own error), else the first."""
        own = [c for c in self._causes if not any(REACTION.search(t) for t in c.traceback)]
        return (own or self._causes or [None])[0]

    def end(self) -> list[OutputLine | str]:
        """The run's lines are over: what was held and is still to show (a reaction's traceback, or
        torchrun's root cause as ``ddpctl:`` lines, where no rank's own traceback was shown)."""
        if self._ended:
            return []
        self._ended = True
        shown: list[OutputLine | str] = []
        for key, block in list(self._blocks.items()):  # a traceback cut off (its process killed)
            del self._blocks[key]
            if key[1] is None:
                continue  # counted already
            shown += self._decide(key, block)
        cause = self._cause()
        held = self._held[0] if self._held else None
        if self.root is None and held is not None and (cause is None or cause.rank_of() == held.lines[0].rank):
            self._held.pop(0)  # the reaction is all there is (or it is torchrun's root cause too)
            self.root = (held.lines[0].node, held.lines[0].rank or 0)
            shown += held.lines
        if self.root is None and cause is not None:
            shown += cause.lines()
        self.hidden += sum(len(b.lines) for b in self._held)
        self._held.clear()
        return shown

    def note(self) -> str | None:
        """Once the run's lines are over and lines were left out, the line that says so (once)."""
        if not self._ended or self._noted or not self.hidden:
            return None
        self._noted = True
        lines = f"{self.hidden} line{'' if self.hidden == 1 else 's'}"
        return (
            f"ddpctl: {lines} of other ranks' and torchrun's traces left out "
            f"(`ddpctl logs {self.run_id}` has them all; `run --all-lines` shows them)"
        )
