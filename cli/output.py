"""Terminal output: job lines prefixed per node and rank, progress, summaries, and --json.

With ``--json`` exactly one JSON document goes to stdout; everything else goes to stderr.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress as RichProgress
from rich.progress import SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ddpctl.infra.model.results import OutputLine, RunResult

from .failures import SecondaryTraces
from .options import QUIET_META
from .output_json import dumps, envelope
from .repeats import RepeatedAgentLines

NODE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


class ProgressLines:
    """The CLI's progress callback (``infra/model/progress.py``): a dim line on stderr per message, and
    the long step going on now (``activity``): on a terminal a live line with a spinner and the
    time it has taken; elsewhere (CI logs, a pipe) a plain line once it has taken ``every_s``, and
    again every ``every_s`` (``DDPCTL_PROGRESS_EVERY_S``, default 30). ``-q`` silences both."""

    def __init__(self, console: Console, quiet: bool, every_s: float = 30.0) -> None:
        self.console, self.quiet, self.every_s = console, quiet, every_s
        self._live: RichProgress | None = None
        self._tasks: dict[str, TaskID] = {}  # the live line's step, and the enclosing steps' (hidden)
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._step, self._text, self._started = "", "", 0.0  # the step going on: its name, its text, since
        self._since: dict[str, float] = {}  # when each step began (an enclosing one's clock goes on)
        #: the enclosing steps' texts (``infra.model.progress.step``): an activity's end shows them again
        self.steps: list[str] = []

    def __call__(self, message: str) -> None:
        if not self.quiet:
            self.console.print(Text(message, style="dim"))

    def activity(self, text: str | None) -> None:
        if self.quiet:
            return
        if self.console.is_terminal:
            self._live_line(text)
        else:
            self._plain_line(text)

    def _live_line(self, text: str | None) -> None:
        if text is None:
            if self._live is not None:
                self._live.stop()
                self._live, self._tasks = None, {}
            return
        if self._live is None:
            columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
            self._live = RichProgress(*columns, console=self.console, transient=True)
            self._live.start()
        step = text.split(" (")[0]
        enclosing = {s.split(" (")[0] for s in self.steps}
        for other, task in list(self._tasks.items()):
            if other == step:
                continue
            if other in enclosing:  # its clock goes on, out of sight
                self._live.update(task, visible=False)
            else:
                self._live.remove_task(task)
                del self._tasks[other]
        if step in self._tasks:  # the same step further on, or an enclosing one again: its clock goes on
            self._live.update(self._tasks[step], description=text, visible=True)
        else:  # a new step: a clock of its own
            self._tasks[step] = self._live.add_task(text, total=None)

    def _plain_line(self, text: str | None) -> None:
        with self._lock:
            same_step = text is not None and self._timer is not None and self._step == text.split(" (")[0]
            if same_step:
                self._text = text  # the same step, further on: its clock goes on
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if text is None:
                return
            step, enclosing = text.split(" (")[0], {s.split(" (")[0] for s in self.steps}
            self._since = {s: t for s, t in self._since.items() if s in enclosing}
            started = self._since.setdefault(step, time.monotonic())  # an enclosing step's clock goes on
            self._step, self._text, self._started = step, text, started
            self._arm()

    def _arm(self) -> None:
        self._timer = threading.Timer(self.every_s, self._still_running)
        self._timer.daemon = True
        self._timer.start()

    def _still_running(self) -> None:
        with self._lock:
            if self._timer is None:
                return
            elapsed = time.monotonic() - self._started
            self.console.print(Text(f"... {self._text}: running for {elapsed:.0f} s", style="dim"))
            self._arm()


class Output:
    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        self.err = Console(file=sys.stderr, highlight=False, soft_wrap=True)
        # Job output is the command's output, unless stdout is reserved for the JSON document.
        self.jobs = self.err if as_json else Console(file=sys.stdout, highlight=False, soft_wrap=True)
        self._colours: dict[str, str] = {}
        self.repeats: RepeatedAgentLines | None = None  # `hide_repeats`: the terminal only
        self.failures: SecondaryTraces | None = None  # `hide_repeats` too
        ctx = click.get_current_context(silent=True)
        self.quiet = bool(ctx and ctx.meta.get(QUIET_META))  # `ddpctl --quiet`
        #: what every command hands the library as its progress callback (lines, and live activity)
        every = os.environ.get("DDPCTL_PROGRESS_EVERY_S", "")
        self.progress = ProgressLines(self.err, self.quiet, float(every) if every else 30.0)

    def hide_repeats(self, run_id: str) -> None:
        """From now on, an agent line that another node already showed while the run starts is not
        printed again (``repeats.py``), nor a failure's secondary traces (``failures.py``);
        ``end_lines`` says how many were not."""
        self.repeats = RepeatedAgentLines(run_id)
        self.failures = SecondaryTraces(run_id)

    def line(self, line: OutputLine) -> None:
        """A job line as the run streams it (the sink behind ``output.log``, which keeps them all)."""
        show = self.repeats is None or self.repeats.take(line)
        self._repeats_note()
        if show:
            for each in self.failures.take(line) if self.failures is not None else [line]:
                self.log_line(each.node, each.rank, each.text)

    def end_lines(self) -> None:
        """The run's lines are over: what was not printed, said if not yet said."""
        if self.repeats is not None:
            self.repeats.end()
            self._repeats_note()
        if self.failures is not None:
            for each in self.failures.end():
                if isinstance(each, str):
                    self.jobs.print(Text(each, style="bold"))
                else:
                    self.log_line(each.node, each.rank, each.text)
            note = self.failures.note()
            if note:
                self.jobs.print(Text(note, style="dim"))

    def _repeats_note(self) -> None:
        note = self.repeats.note() if self.repeats is not None else None
        if note:
            self.jobs.print(Text(note, style="dim"))

    def log_line(self, node: str, rank: int | None, text: str) -> None:
        colour = self._colours.setdefault(node, NODE_COLOURS[len(self._colours) % len(NODE_COLOURS)])
        label = f"[{node} r{rank}]" if rank is not None else f"[{node}]"
        self.jobs.print(Text(label, style=colour), Text(text))

    def document(self, doc: dict[str, Any]) -> None:
        """The command's JSON document, in the envelope every command shares (``output_json``)."""
        doc = dict(doc)
        ok = doc.pop("ok", True)
        ctx = click.get_current_context(silent=True)
        command = ctx.info_name if ctx is not None else None
        click.echo(dumps(envelope(command, ok, **doc)))

    def table(self, table: Table) -> None:
        """A listing (status, runs, check): the command's output, on stdout (stderr under --json)."""
        self.jobs.print(table)

    def run_summary(self, result: RunResult) -> None:
        table = Table(title=f"run {result.run_id}: {_verdict(result)} in {result.wall_s:.1f} s", title_justify="left")
        for col in ("node", "exit code", "status"):
            table.add_column(col)
        for node in result.nodes:
            style = {"ok": "green", "failed": "red"}.get(node.status, "yellow")
            table.add_row(node.node, str(node.exit_code), Text(node.status, style=style))
        self.err.print(table)
        if result.hint:
            self.err.print(Text(f"hint: {result.hint}", style="bold"))
        if result.slow:
            self.err.print(Text(f"slow: {', '.join(result.slow)} (compute time over the other nodes' median)"))
        for line in result.health:  # the nodes the run named, looked at after it (`ddpctl check` looks at all)
            self.err.print(Text(f"health: {line}", style="bold"))


def _verdict(result: RunResult) -> str:
    if result.interrupted:
        return "interrupted"
    if result.failed_node:
        return f"{'hung' if result.cause == 'hung' else 'failed'} on {result.failed_node}"
    return "succeeded"
