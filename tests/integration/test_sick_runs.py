"""A run that falls sick, for real on the local provider (launch/watch.py): a rank that stops (SIGSTOP),
a rank that skips a collective (a deadlock), with and without heartbeats, each named within minutes,
not at gloo's 30-minute timeout, and the run ended with nothing left; a node slowed from outside (a
SIGSTOP/SIGCONT duty cycle) named while the run goes, and in `runs` afterwards. A short --hang-timeout
(10 s) keeps them to tens of seconds; every bound below is liveness, not a measure."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.cli import Output, ddpctl, start_ddpctl
from tests.support.local_gpus import machine
from tests.support.processes import assert_nothing_left, run_processes
from tests.support.sick import ALL_REDUCE_LINE, SKIPPED_LINE, write_sick
from tests.support.sick_gpus import THERMAL, gpu, install

pytestmark = pytest.mark.slow

BOUND_S = 240  # a hung run is named and ended well within this (gloo's own timeout: 30 minutes)


def sick_run(
    run_id: str,
    tmp_path: Path,
    *env: str,
    nproc: int = 1,
    nodes: str = "2",
    machine_env: dict | None = None,
    flags: tuple[str, ...] = (),
) -> Output:
    job = write_sick(tmp_path)
    args = ["run", str(job), "--nodes", nodes, "--nproc-per-node", str(nproc), "--run-id", run_id, *flags]
    args += ["--hang-timeout", "10", "-e", "DDPCTL_BEAT_EVERY_S=1", "-e", f"SICK_DONE={tmp_path / 'done'}"]
    for pair in env:
        args += ["-e", pair]
    return Output(start_ddpctl(*args, env=machine_env))


def finished(out: Output) -> str:
    try:
        return out.finish(timeout=BOUND_S)
    finally:
        out.proc.kill()


def result_in_runs(run_id: str) -> str:
    runs = json.loads(ddpctl("runs", "--json").stdout)["runs"]
    return next(r["result"] for r in runs if r["run_id"] == run_id)


@pytest.mark.parametrize("beats", ["1", "0"])
def test_a_stopped_rank_is_named_and_the_run_ended(home: Path, tmp_path: Path, beats: str) -> None:
    out = sick_run(f"stop{beats}", tmp_path, "SICK=stop", f"SICK_BEAT={beats}")
    text = finished(out)
    assert out.proc.returncode == 1, text
    assert "the run is hung; looking at every rank" in text, text
    assert "rank 1 on node1 is stopped (T)" in text, text  # the hint, from its process state
    assert "hung on node1" in text, text  # the summary's title
    assert "DDPCTL_BEAT" not in text  # beats are read, never shown
    if beats == "1":  # rank 0 handles SIGUSR1 (metrics.beat's faulthandler): its stack came back
        assert f'train.py", line {ALL_REDUCE_LINE}' in text, text
    assert result_in_runs(f"stop{beats}").startswith("hung: rank 1 on node1 is stopped (T) (no progress for ")
    assert_nothing_left(f"stop{beats}", home)


def test_an_elastic_run_goes_on_without_the_node_that_hung_it(home: Path, tmp_path: Path) -> None:
    """--nodes 2:3: node1's rank stops itself; named, node1's processes ended, the other two restart
    their workers and go on (node1 started again 30 s later, as any lost node); the run ends ok."""
    out = sick_run("elastic", tmp_path, "SICK=stop", f"SICK_ONCE={tmp_path / 'once'}", nodes="2:3")
    try:
        out.until("hung: rank 1 on node1 is stopped (T)", timeout=BOUND_S)
        out.until("ending node1's processes: the elastic run goes on without it", timeout=60)
        out.until("node1 lost", timeout=60)
        out.until("training", timeout=BOUND_S)  # the survivors' workers started again
    finally:
        (tmp_path / "done").touch()
    text = finished(out)
    assert out.proc.returncode == 0, text
    assert result_in_runs("elastic") == "succeeded"
    assert_nothing_left("elastic", home)


def test_a_rank_that_skips_a_collective_is_named(home: Path, tmp_path: Path) -> None:
    out = sick_run("skip", tmp_path, "SICK=skip", nproc=2)
    text = finished(out)
    assert out.proc.returncode == 1, text
    assert f"rank 1 on node0 at train.py:{SKIPPED_LINE} (<module>), 3 other rank(s) at train.py:{ALL_REDUCE_LINE}" in (
        text
    ), text
    assert result_in_runs("skip").startswith("hung: rank 1 on node0 at train.py:")
    assert_nothing_left("skip", home)


def test_a_node_slowed_from_outside_is_named_once_and_recorded(home: Path, tmp_path: Path) -> None:
    """On a machine of 4 stand-in GPUs, node1's (2 and 3) one thermally held down: node1, slowed, is named
    once; its GPUs' health is looked at then, while the run goes, and said; and at the run's end."""
    env = machine(tmp_path, 4)
    install(tmp_path / "bin", [gpu(0), gpu(1), gpu(2, reasons=THERMAL), gpu(3)], [])
    out = sick_run("slow", tmp_path, machine_env=env)
    worker = wait_for_rank("slow", 1)
    stop = threading.Event()
    cycling = threading.Thread(target=duty_cycle, args=(worker, stop), daemon=True)
    try:
        out.until("training", timeout=120)
        cycling.start()
        line = out.until("node1 is slow: its ranks compute", timeout=BOUND_S)
        assert "the other nodes' median" in line
        sick = "node1: unhealthy: GPU 2: clocks held down: HW Thermal Slowdown"
        out.until(f"health: {sick}", timeout=120)  # while the run goes
    finally:
        stop.set()
        cycling.join(timeout=10)
        (tmp_path / "done").touch()  # every rank ends at the next step
    text = finished(out)
    assert out.proc.returncode == 0, text
    assert text.count("node1 is slow") == 1, text  # named once, not a line a beat
    assert "slow: node1 (" in text  # the summary
    assert text.count(f"health: {sick}") == 2, text  # while it went, and in the summary
    assert "; slow: node1 (" in result_in_runs("slow") and result_in_runs("slow").endswith("; unhealthy: node1")
    shown = ddpctl("metrics", "slow")
    assert "run slow: slow while it ran: node1 (" in shown.stderr, shown.stderr
    assert json.loads(ddpctl("metrics", "slow", "--json").stdout)["slow"][0].startswith("node1 (")
    assert_nothing_left("slow", home)


def test_a_gpu_that_falls_sick_while_the_run_goes_is_named(home: Path, tmp_path: Path) -> None:
    """--health-every: on a machine of 2 stand-in GPUs, node1's (GPU 1) healthy when the run starts, then
    with uncorrected ECC errors: named while the run goes, once, and in the summary and `runs`."""
    env = machine(tmp_path, 2)
    install(tmp_path / "bin", [gpu(0), gpu(1)], [])
    out = sick_run("gpusick", tmp_path, machine_env=env, flags=("--health-every", "10"))
    sick = "node1: unhealthy: GPU 1: 4 uncorrected ECC error(s) since the driver loaded"
    try:
        out.until("training", timeout=120)
        install(tmp_path / "bin", [gpu(0), gpu(1, ecc=4)], [])
        out.until(f"health: {sick}", timeout=120)  # within a look or two, the run going on
    finally:
        (tmp_path / "done").touch()  # every rank ends at the next step
    text = finished(out)
    assert out.proc.returncode == 0, text
    assert text.count(f"health: {sick}") == 2, text  # once while it went (not at every look), once in the summary
    assert result_in_runs("gpusick") == "succeeded; unhealthy: node1"
    assert_nothing_left("gpusick", home)


def wait_for_rank(run_id: str, rank: int, timeout: float = 120) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in run_processes(run_id):
            try:
                if proc.environ().get("RANK") == str(rank) and "train.py" in " ".join(proc.cmdline()):
                    return proc
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} of run {run_id}")


def duty_cycle(proc: psutil.Process, stop: threading.Event) -> None:
    """Stopped 0.15 s of every 0.25 s, until ``stop``; continued at the end whatever happens."""
    try:
        while not stop.is_set():
            proc.send_signal(signal.SIGSTOP)
            time.sleep(0.15)
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.1)
    except psutil.NoSuchProcess:
        pass
    finally:
        try:
            proc.send_signal(signal.SIGCONT)
        except psutil.NoSuchProcess:
            pass
