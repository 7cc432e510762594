"""Progress on long steps (issue 30): the Ansible task going on now and EC2 waits, shown live with
their time on a terminal, as a plain line every so often elsewhere, nothing with -q."""

from __future__ import annotations

import io
import time

from rich.console import Console

from ddpctl.infra.ansible import PlayReport, TaskLines
from ddpctl.output import ProgressLines


class Recorder:
    """A progress callback that can show activity, as the CLI's does."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.activities: list[str | None] = []

    def __call__(self, message: str) -> None:
        self.lines.append(message)

    def activity(self, text: str | None) -> None:
        self.activities.append(text)


def event(kind: str, **data) -> dict:
    return {"event": kind, "event_data": data}


def test_the_running_task_is_shown_when_it_starts_with_hosts_done_of_hosts() -> None:
    """The task's line appears only at its end (the next task's start); the activity says at once
    what runs now, and how many hosts are done with it."""
    progress = Recorder()
    lines = TaskLines(progress, PlayReport())
    lines(event("playbook_on_task_start", task="Gathering Facts"))
    for host in ("node0", "node1", "node2"):
        lines(event("runner_on_ok", host=host, task="Gathering Facts", res={}))
    lines(event("playbook_on_task_start", task="python_env : Install PyTorch"))
    lines(event("runner_on_ok", host="node1", task="python_env : Install PyTorch", res={"changed": True}))
    lines(event("playbook_on_stats"))
    assert progress.activities == [
        "Gathering Facts",
        "Gathering Facts (1 of 1 hosts done)",
        "Gathering Facts (2 of 2 hosts done)",
        "Gathering Facts (3 of 3 hosts done)",
        "python_env : Install PyTorch (0 of 3 hosts done)",
        "python_env : Install PyTorch (1 of 3 hosts done)",
        None,
    ]
    assert progress.lines == [
        "Gathering Facts: node0 ok, node1 ok, node2 ok",
        "python_env : Install PyTorch: node1 changed",
    ]


def test_a_plain_callback_is_left_alone() -> None:
    lines: list[str] = []
    tasks = TaskLines(lines.append, PlayReport())
    tasks(event("playbook_on_task_start", task="t"))
    tasks(event("playbook_on_stats"))
    assert lines == []


def test_not_on_a_terminal_a_long_step_is_a_line_every_so_often() -> None:
    out = io.StringIO()
    progress = ProgressLines(Console(file=out, force_terminal=False), quiet=False, every_s=0.3)
    progress.activity("python_env : Install PyTorch (0 of 3 hosts done)")
    time.sleep(0.5)
    progress.activity("python_env : Install PyTorch (2 of 3 hosts done)")  # the same step: its clock goes on
    time.sleep(0.4)
    progress.activity(None)
    said = out.getvalue()
    time.sleep(0.5)
    assert out.getvalue() == said  # nothing after the step ended
    lines = said.splitlines()
    assert lines[0].startswith("... python_env : Install PyTorch (0 of 3 hosts done): running for 0 s")
    assert lines[-1].startswith("... python_env : Install PyTorch (2 of 3 hosts done): running for")
    assert len(lines) >= 2


def test_on_a_terminal_the_step_is_live_with_its_time() -> None:
    out = io.StringIO()
    progress = ProgressLines(Console(file=out, force_terminal=True, width=100), quiet=False)
    progress.activity("waiting for the instances (2 instance(s))")
    time.sleep(0.3)
    progress("created vpc vpc-0abc")  # a line printed above the live one
    progress.activity(None)
    text = out.getvalue()
    assert "waiting for the instances (2 instance(s))" in text and "0:00:0" in text
    assert "created vpc vpc-0abc" in text


def test_quiet_shows_no_progress() -> None:
    out = io.StringIO()
    progress = ProgressLines(Console(file=out, force_terminal=False), quiet=True, every_s=0.1)
    progress("a line")
    progress.activity("a step")
    time.sleep(0.3)
    progress.activity(None)
    assert out.getvalue() == ""
