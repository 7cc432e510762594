"""Terminal output: job lines prefixed per node and rank, progress, summaries, and --json.

With ``--json`` exactly one JSON document goes to stdout; everything else goes to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ddpctl.infra.launch.supervise import OutputLine, RunResult

from .failures import SecondaryTraces
from .options import QUIET_META
from .output_json import envelope
from .repeats import RepeatedAgentLines

NODE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


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

    def progress(self, message: str) -> None:
        if not self.quiet:
            self.err.print(Text(message, style="dim"))

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
        click.echo(json.dumps(envelope(command, ok, **doc), indent=2, default=str))

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


def _verdict(result: RunResult) -> str:
    if result.interrupted:
        return "interrupted"
    if result.failed_node:
        return f"failed on {result.failed_node}"
    return "succeeded"
