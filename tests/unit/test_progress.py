"""Progress on long steps (issue 30): the Ansible task going on now and EC2 waits, shown live with
their time on a terminal, as a plain line every so often elsewhere, nothing with -q."""

from __future__ import annotations

import io
import time

from rich.console import Console

from ddpctl.infra.hosts.ansible import PlayReport, TaskLines
from ddpctl.infra.model.progress import activity, step
from ddpctl.output import ProgressLines
from tests.support.progress import Recorder
from tests.support.specs import cluster_spec


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


class StepRecorder(Recorder):
    """A callback that keeps the enclosing steps, as the CLI's does."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[str] = []


def test_a_wait_inside_a_step_shows_then_the_step_again() -> None:
    progress = StepRecorder()
    with step(progress, "taking 'c' down"):
        activity(progress, "terminating (2 instance(s))")
        activity(progress, "terminating (2 shutting-down)")
        activity(progress, None)  # the wait is over: the step goes on
    assert progress.activities == [
        "taking 'c' down",
        "terminating (2 instance(s))",
        "terminating (2 shutting-down)",
        "taking 'c' down",
        None,
    ]
    assert progress.steps == []
    plain: list[str] = []
    with step(plain.append, "a step"):  # a plain callable: nothing shown
        pass
    assert plain == []


def test_on_a_terminal_an_enclosing_step_keeps_its_clock() -> None:
    out = io.StringIO()
    progress = ProgressLines(Console(file=out, force_terminal=True, width=100), quiet=False)
    with step(progress, "taking 'c' down"):
        outer = progress._tasks["taking 'c' down"]
        activity(progress, "terminating (2 instance(s))")
        assert set(progress._tasks) == {"taking 'c' down", "terminating"}
        activity(progress, None)
        assert progress._tasks == {"taking 'c' down": outer}  # the same task: its clock went on
    assert progress._live is None
    assert "taking 'c' down" in out.getvalue() and "terminating (2 instance(s))" in out.getvalue()


def _cluster(n: int):
    from ddpctl.infra.model.state import ClusterState, NodeInfo

    nodes = [NodeInfo(f"n{i}", f"10.0.0.{i}", f"/w{i}") for i in range(n)]
    return ClusterState(spec=cluster_spec(name="c", provider="onprem", nodes=n), cluster_id="x", nodes=nodes)


def test_check_shows_each_test_as_it_runs() -> None:
    """`check`'s two launches are the activity going on while they run (a stand-in executor)."""
    from ddpctl.infra.launch.nodes import OutputLine
    from ddpctl.infra.runs.check import run_check

    progress, running = StepRecorder(), []

    class Executor:
        def __init__(self, sink) -> None:
            self.sink = sink

        def run(self, plan):
            running.append(progress.activities[-1])
            if plan.job == "check-reach":
                for a in ("10.0.0.0", "10.0.0.1"):
                    for b in ("10.0.0.0", "10.0.0.1"):
                        if a != b:
                            self.sink(OutputLine("n0", 0, f"REACH {a} {b} ok"))
            else:
                self.sink(OutputLine("n0", 0, "pair 0 1 size=8MB busbw_gbps=1.25"))
                self.sink(OutputLine("n1", 1, "ready"))
            return type("Result", (), {"ok": True})()

    report = run_check(_cluster(2), Executor, 29500, progress, size_mb=8)
    assert report.bandwidth_gbps == {("n0", "n1"): 1.25}
    assert running == ["reachability test (2 nodes)", "all-reduce bandwidth test (2 nodes, 1 round(s))"]
    assert progress.activities[-1] is None and progress.steps == []


def test_down_is_a_step_with_its_time(tmp_path) -> None:
    """`down` (here of a local cluster, through the API's code path) is the activity while it runs."""
    import ddpctl

    progress = StepRecorder()
    ddpctl.up(2, name="c", home=tmp_path, progress=progress)
    progress.activities.clear()
    assert ddpctl.down("c", home=tmp_path, progress=progress) == ["c"]
    assert progress.activities == ["taking 'c' down", None]


def test_the_aws_waits_before_configure_are_steps(monkeypatch) -> None:
    """The wait for the instances' host keys in their console output is the activity going on,
    with its line at each look that finds some missing."""
    from ddpctl.infra.providers.aws import configure

    monkeypatch.setattr(configure, "POLL_S", 0)
    answers = iter(["booting", f"{configure.HOST_KEYS_BEGIN}\nssh-ed25519 AAAAkey root@n\n{configure.HOST_KEYS_END}"])
    progress = StepRecorder()
    node = configure.Launched("node0", "i-1", "10.0.0.1", "", "us-east-1a")
    assert configure.collect_host_keys([node], lambda _: next(answers), progress) == {"node0": ["ssh-ed25519 AAAAkey"]}
    assert progress.activities == ["waiting for the host keys of 1 node(s) (console output)", None]
    assert progress.lines == ["waiting for the host keys of node0 (console output)"]
