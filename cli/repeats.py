"""Repeated agent lines on the terminal: every node's identical start-up chatter shown once.

Pure: ``OutputLine``s in, what the terminal shows out. Only the terminal: the run's ``output.log``
(and so ``ddpctl logs``) and the ``--json`` document keep every line.

The rule:

- a rank's line (``rank`` is not None) is always shown;
- an agent's own line is hidden only while the run starts: before the first rank line, and
  before any agent line that looks like a failure (``FAILING``, less the known ``HARMLESS``
  warnings). From then on every line is
  shown, so nothing a failure prints is ever hidden;
- in that start-up window, an agent line is hidden if the same text (torch's log header, whose
  time and pid differ per node, aside) was already shown from *another* node. A line that differs
  anywhere is shown, so a warning only one node prints is never hidden;
- when the window closes (or the run ends, if it never did) and lines were hidden, one line says
  how many and from how many nodes, and where they all are.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpctl.infra.model.results import OutputLine

#: torch's log headers: Python's glog style (level, date, time, pid; then "file:line] message") and
#: its C++ one ("[W1126 11:48:38.983592255 socket.cpp:207] message", a pid in some builds).
LOG_HEADER = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ |^\[([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? ")

#: An agent line that may belong to a failure: from then on nothing is hidden. Generous on purpose
#: (a line hidden wrongly costs more than 15 lines shown needlessly).
FAILING = re.compile(
    r"^\[?[EF]\d{4} \d\d:"  # torch's error and fatal levels
    r"|^(ERROR|CRITICAL|FATAL)\b"  # Python logging's default format
    r"|traceback|\w*(error|exception)\b|exitcode|exit code|\(exit \d"
    r"|\b(fail(ed|ure|ing)?|fatal|abort(ed)?|killed|lost|timed out|refused|unreachable|denied|cannot|unable)\b"
    r"|no module named|no such file|(death|closing) signal",
    re.IGNORECASE,
)


#: Lines that FAILING's words match but that say nothing is wrong: c10d's warning where a node has
#: no reverse DNS for a peer's address (each node's agent prints it as it joins the rendezvous).
HARMLESS = re.compile(r"^\[W\S+ \S+ socket\.cpp:\d+\] \[c10d\] The hostname of the client socket cannot be retrieved")


def _key(text: str) -> str:
    """What two nodes' copies of a line share: the text, less the log header's time and pid."""
    return LOG_HEADER.sub(lambda m: f"{m.group(1)} " if m.group(1) else f"[{m.group(2)} ", text)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


class RepeatedAgentLines:
    """Decides, line by line, whether the terminal shows a job line (``take``), and says once what
    it hid (``note``)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.starting = True  # the window in which repeats are hidden
        self.hidden = 0
        self.hidden_from: set[str] = set()  # the nodes whose lines were hidden
        self._shown: dict[str, str] = {}  # key -> the node whose copy was shown
        self._noted = False

    def take(self, line: OutputLine) -> bool:
        """True: show this line."""
        if not self.starting:
            return True
        if line.rank is not None or (FAILING.search(line.text) and not HARMLESS.match(line.text)):
            self.end()
            return True
        key = _key(line.text)
        first = self._shown.setdefault(key, line.node)
        if first == line.node:
            return True
        self.hidden += 1
        self.hidden_from.add(line.node)
        return False

    def end(self) -> None:
        """The start-up window is over: nothing more is hidden."""
        self.starting = False
        self._shown.clear()

    def note(self) -> str | None:
        """Once the window is over and lines were hidden, the line that says so (once)."""
        if self.starting or self._noted or not self.hidden:
            return None
        self._noted = True
        return (
            f"ddpctl: {_n(self.hidden, 'repeated agent line')} from {_n(len(self.hidden_from), 'node')} "
            f"not shown (`ddpctl logs {self.run_id}` has them all; `run --all-lines` shows them)"
        )
