"""Detached runs and `ddpctl stop` (issue 15), on the local provider with real runs: `run --detach`
returns once the run has started, the run goes on in a session of its own (no terminal reaches it),
`runs` shows it running, `logs --follow` reattaches, and `stop` stops it everywhere as Ctrl-C does.

Its pure tests (no process beyond Python) are in tests/unit/test_detach.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.cli import ddpctl, start_ddpctl, tree
from tests.support.processes import assert_nothing_left, run_processes, wait_for_worker
from tests.support.scripts import SLEEPER


@pytest.fixture
def sleeper(tmp_path: Path) -> str:
    """A run to stop or kill (tests/support/scripts.py SLEEPER: its ranks sleep, no torch, no training):
    what these tests follow is the run's processes and records, not what it computes."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    return str(script)


def worker(run_id: str, rank: int) -> psutil.Process:
    return wait_for_worker(run_id, rank, script="sleeper.py")


def run_result(run_id: str) -> str:
    """The run's ``result`` as ``runs --json`` says it; its ``state`` is that result's first word."""
    [run] = [r for r in json.loads(ddpctl("runs", "--json").stdout)["runs"] if r["run_id"] == run_id]
    assert run["state"] == run["result"].split()[0], run
    return run["result"]


def test_detached_run_goes_on_and_logs_follow_reattaches(home: Path) -> None:
    result = ddpctl(
        "run", "mnist", "--nodes", "2", "--detach", "--json", "--run-id", "rdetach001", "--", "--epochs", "1"
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["detached"] and doc["run_id"] == "rdetach001" and doc["where"] == "here"  # kept by this machine
    controller = psutil.Process(doc["pid"])
    assert os.getsid(controller.pid) == controller.pid  # a session of its own: no terminal's signals reach it
    assert run_result("rdetach001") == "running"

    follow = ddpctl("logs", "rdetach001", "--follow", "--rank", "0", timeout=300)
    assert follow.returncode == 0, follow.stderr
    controller_log = home / "runs" / "rdetach001" / "controller.log"
    assert "held-out accuracy" in follow.stdout, controller_log.read_text()  # the whole run, to its end
    controller.wait(timeout=60)
    assert run_result("rdetach001") == "succeeded"
    assert (home / "runs" / "rdetach001" / "outputs" / "mnist_snapshot.pt").is_file()
    assert_nothing_left("rdetach001", home)


def test_stop_stops_a_detached_run_everywhere(home: Path, sleeper: str) -> None:
    result = ddpctl("run", sleeper, "--nodes", "2", "--detach", "--run-id", "rdetach002", "-e", "SLEEP_S=600")
    assert result.returncode == 0, result.stderr
    assert "ddpctl stop rdetach002" in result.stderr
    worker("rdetach002", 1)  # on both nodes
    stopped = ddpctl("stop", "rdetach002", timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "run rdetach002 stopped" in stopped.stderr
    assert run_processes("rdetach002") == []
    assert run_result("rdetach002") == "interrupted"
    assert tree(home / "clusters") == []  # the run's own cluster went with it


def test_stop_a_run_in_another_terminal(home: Path, sleeper: str) -> None:
    """`ddpctl stop` works on a run that is not detached too (it holds the same lock)."""
    run = start_ddpctl("run", sleeper, "--nodes", "2", "--run-id", "rdetach003", "-e", "SLEEP_S=600")
    try:
        worker("rdetach003", 0)
        assert ddpctl("stop", "rdetach003", timeout=120).returncode == 0
        assert run.wait(timeout=60) == 130  # as Ctrl-C
        assert_nothing_left("rdetach003", home)
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGKILL)


def test_detach_refusals(home: Path) -> None:
    result = ddpctl("run", "nosuchjob", "--detach")
    assert result.returncode == 2 and "unknown job" in result.stderr  # checked before anything starts
    assert tree(home) == []
    result = ddpctl("stop", "rnotrunning")
    assert result.returncode == 2 and "run 'rnotrunning' is not running" in result.stderr


def test_a_crashed_detached_run_is_cleaned_by_down(home: Path, sleeper: str) -> None:
    """The detached controller SIGKILLed mid-run: `stop` says in one line that it is gone and what to
    do, `runs` offers the resume, and `down` stops what is left of the run and its cluster."""
    args = ("--nodes", "2", "--detach", "--json", "--run-id", "rdetach004", "-e", "SLEEP_S=600")
    result = ddpctl("run", sleeper, *args)
    assert result.returncode == 0, result.stderr
    worker("rdetach004", 1)
    controller = psutil.Process(json.loads(result.stdout)["pid"])
    controller.kill()
    controller.wait(timeout=30)
    stopped = ddpctl("stop", "rdetach004", timeout=60)
    assert stopped.returncode == 2 and len(stopped.stderr.strip().splitlines()) == 1, stopped.stderr
    assert "`ddpctl down` stops what is left of it" in stopped.stderr
    assert run_result("rdetach004").startswith("unfinished")
    down = ddpctl("down", timeout=120)
    assert down.returncode == 0, down.stderr
    assert_nothing_left("rdetach004", home)


def test_stop_acts_at_once_on_a_run_that_ignores_sigint(home: Path, sleeper: str) -> None:
    """A run started with SIGINT ignored (nohup, `&` from a script): `stop` sends it SIGTERM at
    once, which ddpctl takes as Ctrl-C, rather than waiting 60 s on a SIGINT it never sees."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "ddpctl", "run", sleeper, "--nodes", "2", "--run-id", "rnohup001"]
    proc = subprocess.Popen(
        [*argv, "-e", "SLEEP_S=600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        worker("rnohup001", 1)
        stop = ddpctl("stop", "rnohup001", "--json", timeout=45)  # SIGINT first would wait 60 s
        assert stop.returncode == 0, stop.stderr
        assert json.loads(stop.stdout)["result"] == "stopped"
        assert proc.wait(timeout=30) == 130
    finally:
        proc.kill()
    assert run_result("rnohup001") == "interrupted"
    assert_nothing_left("rnohup001", home)


def test_a_killed_controller_leaves_no_process_of_the_run(home: Path, sleeper: str) -> None:
    """`kill -9` of a detached run's controller: its agents get their parent-death signal and stop
    their workers, the store stops, with no `down` (run twice: it left an agent once in 4 trials)."""
    for trial in range(2):
        run_id = f"rkill00{trial}"
        result = ddpctl("run", sleeper, "--nodes", "2", "--detach", "--json", "--run-id", run_id, "-e", "SLEEP_S=600")
        assert result.returncode == 0, result.stderr
        worker(run_id, 1)
        controller = psutil.Process(json.loads(result.stdout)["pid"])
        controller.kill()
        controller.wait(timeout=30)
        deadline = time.monotonic() + 90  # a liveness bound: agents stop their workers (SIGTERM, then SIGKILL)
        while run_processes(run_id) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert run_processes(run_id) == [], f"trial {trial}: left {run_processes(run_id)}"
        assert ddpctl("down", timeout=120).returncode == 0


def test_a_run_held_here_is_described_from_its_lock_and_record(home: Path) -> None:
    """The here launcher: a run whose ddpctl on this machine holds it (its lock), its lines from
    output.log after those seen, its record once written."""
    from ddpctl.infra.launch.launcher import Handle, Phase
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.here import HereLauncher

    store = StateStore(home)
    store.make_run_dir("r1")
    (store.run_dir("r1") / "output.log").write_text("[node0 r0] a\n[node0] agent\n[node1 r1] b\n")
    here = HereLauncher(store)
    assert here.handle("r1") is None
    hold = (  # the run's ddpctl: another process holds its lock
        "import sys\nfrom pathlib import Path\nfrom ddpctl.infra.model import locks\n"
        "from ddpctl.infra.model.store import StateStore\n"
        f"with locks.run(StateStore(Path({str(home)!r})), 'r1', 'run r1 (mnist)'):\n"
        "    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        handle = here.handle("r1")
        assert handle == Handle("here", str(holder.pid), str(store.run_dir("r1")), "r1")
        assert here.describe(handle).phase is Phase.RUNNING
        got: list[str] = []
        here.logs(handle, got.append, seen=["[node0 r0] a"], follow=False)
        assert got == ["[node0] agent", "[node1 r1] b"]
    finally:
        holder.communicate("")
    assert here.describe(handle).phase is Phase.GONE  # its ddpctl went without a record: killed
    (store.run_dir("r1") / "run.json").write_text(json.dumps({"result": {"run_id": "r1", "exit_code": 0, "wall_s": 1}}))
    described = here.describe(handle)
    assert described.phase is Phase.ENDED and described.record["result"]["exit_code"] == 0
    lines: list = []
    assert here.attach(handle, lines.append, seen=[]).ok and [line.text for line in lines] == ["a", "agent", "b"]


def test_a_killed_ddpctl_left_as_a_zombie_holds_no_run(tmp_path: Path) -> None:
    """A detached ddpctl killed after its parent exited stays a zombie where PID 1 reaps no orphans
    (a container without an init; this machine): its run is not alive, so `down` and `runs` bring
    the run's record from the head (issue 37's G1 was lost behind it)."""
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.store import StateStore

    store = StateStore(tmp_path)
    holder = store.run_dir("r1").with_name(".r1.lock.{}.json")
    holder.parent.mkdir(parents=True)
    child = subprocess.Popen(["sleep", "60"])  # ours, not waited for: a zombie once killed
    try:
        holder.with_name(holder.name.format(child.pid)).write_text(
            json.dumps({"command": "run", "pid": child.pid, "since": 0.0})
        )
        assert locks.run_alive(store, "r1")
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not locks.run_alive(store, "r1")
    finally:
        child.kill()
        child.wait()
