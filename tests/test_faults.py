"""Fault tolerance on the local provider: real torchrun agents restarting real workers killed with SIGKILL."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from conftest import assert_nothing_left, ddpctl, run_processes, start_run, wait_for_worker

pytestmark = pytest.mark.slow


def read_until(proc, needle: str, lines: list[str], timeout: float = 180) -> None:
    """Read the run's output into ``lines`` until a line contains ``needle``."""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if needle in line:
            return
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"{needle!r} never printed:\n{''.join(lines)}")


def test_max_restarts_resumes_from_the_snapshot(home: Path) -> None:
    """A worker killed mid-epoch is restarted by torchrun; the job resumes from the last snapshot."""
    proc = start_run("restart1", "--epochs", "3", run_args=("--max-restarts", "1"))
    lines: list[str] = []
    try:
        read_until(proc, "snapshot saved", lines)  # epoch 1 done and saved
        worker = wait_for_worker("restart1", rank=1, timeout=60)
        time.sleep(1)  # into epoch 2
        worker.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    out = "".join(lines) + out
    assert proc.returncode == 0, out
    assert "Resuming from snapshot at epoch 1" in out
    accuracies = [float(a) for a in re.findall(r"epoch 3/3 .* held-out accuracy ([\d.]+)%", out)]
    assert accuracies and accuracies[-1] >= 90.0, out
    assert_nothing_left("restart1", home)


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
        sent_at = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        assert time.monotonic() - sent_at < 10
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
    proc = start_run("crash2", "--epochs", "3")
    lines: list[str] = []
    try:
        read_until(proc, "snapshot saved", lines)
        proc.kill()  # the controller: its agents die with it (PDEATHSIG) on the local provider
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert (home / "clusters" / "default.json").is_file()  # the run's own cluster survived the crash
    resumed = ddpctl("run", "--resume", "crash2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert re.search(r"Resuming from snapshot at epoch [12]", resumed.stdout), resumed.stdout
    assert "epoch 1/3" not in resumed.stdout
    accuracies = [float(a) for a in re.findall(r"epoch 3/3 .* held-out accuracy ([\d.]+)%", resumed.stdout)]
    assert accuracies and accuracies[-1] >= 90.0, resumed.stdout
    assert_nothing_left("crash2", home)  # and the cluster it owned is down again


def test_resume_errors_are_one_line(home: Path) -> None:
    missing = ddpctl("run", "--resume", "nope")
    assert missing.returncode == 2 and "no run 'nope' to resume" in missing.stderr
    both = ddpctl("run", "mnist", "--resume", "nope", "--nodes", "2")
    assert both.returncode == 2 and "leave out mnist --nodes" in both.stderr
