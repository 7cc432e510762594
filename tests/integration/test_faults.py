"""Fault tolerance on the local provider: real torchrun agents restarting real workers killed with SIGKILL."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from ddpctl.infra.tools.procs import NODE_KEY
from tests.support.cli import Output, ddpctl, start_ddpctl, start_run
from tests.support.jobs import write_rounds
from tests.support.processes import assert_nothing_left, run_processes, wait_for_worker

pytestmark = pytest.mark.slow


def test_ctrl_c_while_torchrun_restarts_stops_everything(home: Path) -> None:
    proc = start_run("restart2", "--epochs", "20", run_args=("--max-restarts", "3"))
    try:
        first = wait_for_worker("restart2", rank=1, timeout=120)
        first.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not restarted_workers("restart2") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert restarted_workers("restart2"), "torchrun did not restart the workers"
        proc.send_signal(signal.SIGINT)  # while the new round starts up
        out, _ = proc.communicate(timeout=60)  # a liveness bound (20 epochs take far longer), not a measure
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert_nothing_left("restart2", home)


def restarted_workers(run_id: str) -> list:
    found = []
    for p in run_processes(run_id):
        try:
            if p.environ().get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def test_resume_after_the_controller_crashed(home: Path) -> None:
    """`ddpctl run --resume ID` after ddpctl itself was SIGKILLed: same job and options, from the snapshot."""
    proc = start_run("crash2", "--epochs", "2", "--data-fraction", "0.5")  # 93.6 % at epoch 2
    try:
        Output(proc).until("snapshot saved")
        proc.kill()  # the controller: its agents die with it (PDEATHSIG) on the local provider
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert (home / "clusters" / "default.json").is_file()  # the run's own cluster survived the crash
    listed = json.loads(ddpctl("runs", "--json").stdout)["runs"]
    assert [(r["run_id"], r["result"]) for r in listed] == [("crash2", "unfinished")]
    assert "unfinished" in ddpctl("runs").stdout  # the table
    resumed = ddpctl("run", "--resume", "crash2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # epoch 1's snapshot: the agents died with the controller (PDEATHSIG), so epoch 2 is left to do
    assert "Resuming from snapshot at epoch 1" in resumed.stdout, resumed.stdout
    assert "epoch 1/2" not in resumed.stdout
    accuracies = [float(a) for a in re.findall(r"epoch 2/2 .* held-out accuracy ([\d.]+)%", resumed.stdout)]
    assert accuracies and accuracies[-1] >= 90.0, resumed.stdout
    assert_nothing_left("crash2", home)  # and the cluster it owned is down again
    runs = json.loads(ddpctl("runs", "--json").stdout)["runs"]
    assert [(r["run_id"], r["job"], r["result"]) for r in runs] == [("crash2", "mnist", "succeeded")]


def test_resume_errors_are_one_line(home: Path) -> None:
    missing = ddpctl("run", "--resume", "nope")
    assert missing.returncode == 2 and "no run 'nope' to resume" in missing.stderr
    both = ddpctl("run", "mnist", "--resume", "nope", "--nodes", "2")
    assert both.returncode == 2 and "leave out mnist --nodes" in both.stderr


def node_processes(run_id: str, node: str) -> list[psutil.Process]:
    """A local node's torchrun agent and its workers, by the node's marker in their environment
    (the rendezvous store has none: it is the run's, not a node's)."""
    found = []
    for p in run_processes(run_id):
        try:
            if p.environ().get(NODE_KEY) == node:
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def test_elastic_run_goes_on_without_a_lost_node_and_takes_it_back(home: Path, tmp_path: Path) -> None:
    """--nodes 2:3: the head node0's agent and worker SIGKILLed (the rendezvous store on its node,
    a process apart, lives on); nodes 1-2 go on as two; ddpctl starts node0 again 30 s later
    (Elastic.relaunch_after_s) and the job ends with all three. The job waits between collectives
    (tests/support/jobs.py), so that the 30 s cost no training. Going on from a snapshot after a
    loss: test_onprem's lost link; non-head losses: there and test_scale's node15 of 16."""
    job = write_rounds(tmp_path)
    proc = start_ddpctl(
        "run", str(job), "--nodes", "2:3", "--run-id", "elastic1", "-e", "DDPCTL_COLLECTIVE_TIMEOUT_S=15"
    )
    try:
        output = Output(proc)
        output.until("round 0: 3 ranks", timeout=120)
        victims = node_processes("elastic1", "node0")  # its agent and workers: the store's parent is ddpctl
        assert victims, "no processes of node0"
        for p in victims:
            p.kill()
        output.until(": 2 ranks", timeout=120)  # the survivors went on, without node0
        out = output.finish(timeout=300)  # node0 started again, joined, and the job ended with three
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "node0 lost (exit -9); the run goes on with 2 node(s)" in out
    assert "node0 started again" in out
    assert "done: 3 ranks" in out
    assert_nothing_left("elastic1", home)
