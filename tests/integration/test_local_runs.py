"""Real runs on the local provider: real torchrun agents, real gloo over TCP, real processes killed."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from ddpctl.infra.tools.procs import CLUSTER_KEY, STORE_KEY, find_tagged
from tests.support.cli import Output, ddpctl, start_ddpctl, tree
from tests.support.processes import assert_nothing_left, run_processes
from tests.support.scripts import SLOW

pytestmark = pytest.mark.slow


def test_message_passing_two_nodes(home: Path) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", "--nproc-per-node", "2", "--run-id", "mp1", "--json")
    assert result.returncode == 0, result.stderr
    for rank in (1, 2, 3):
        node = rank // 2
        assert f"[node{node} r{rank}] rank {rank} received 42.0 from rank 0" in result.stderr
    assert result.stderr.count("all_reduce OK (10.0 == 10.0)") == 4
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["result"]["exit_code"] == 0
    assert [n["status"] for n in doc["result"]["nodes"]] == ["ok", "ok"]
    # the run brought its own cluster up and took it down; its record and log stay
    assert tree(home / "clusters") == []
    assert "received 42.0" in (home / "runs" / "mp1" / "output.log").read_text()
    assert run_processes("mp1") == []


def test_three_nodes_succeed_without_store_tracebacks_and_leave_no_store(home: Path) -> None:
    """The c10d store is the run's own process, up before the agents and stopped after the last has
    left: an agent that leaves after the head's agent finds it still there (no `recvVector failed`)."""
    result = ddpctl("run", "message-passing", "--nodes", "3", "--run-id", "mp3", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("all_reduce OK (6.0 == 6.0)") == 3
    for needle in ("recvVector", "TCPStore", "Traceback", "rendezvous store"):
        assert needle not in result.stderr, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert plan["store"]["node"] == "node0" and all("is_host=0" in n["argv"] for n in plan["nodes"])
    assert find_tagged(STORE_KEY, "mp3") == []
    assert_nothing_left("mp3", home)


def test_a_store_that_cannot_listen_is_one_line_and_nothing_starts(home: Path) -> None:
    """The port is free on 127.0.0.1 (the local provider's own check) but taken on 127.0.0.2: the
    store, listening on every address, cannot; the run stops there, before any agent."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.2", 0))
        taken.listen(8)
        port = taken.getsockname()[1]
        result = ddpctl("run", "message-passing", "--nodes", "2", "--port", str(port), "--run-id", "busy1")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: the rendezvous store did not start on the head node node0: cannot listen on port {port}: "
        "Address already in use; the rendezvous port is in use on the head node (another run, or a process "
        "that kept it): give another with --port, or leave --port out"
    )
    assert "[node" not in result.stdout + result.stderr  # no agent was started
    assert_nothing_left("busy1", home)


def test_sigint_while_the_store_starts_leaves_nothing(home: Path) -> None:
    proc = start_ddpctl("run", "message-passing", "--nodes", "2", "--run-id", "int0")
    try:
        deadline = time.monotonic() + 60
        while not find_tagged(STORE_KEY, "int0"):  # started, most likely still importing torch
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[0]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert_nothing_left("int0", home)


def test_mnist_reaches_90_percent_and_resumes(home: Path) -> None:
    assert ddpctl("up", "--nodes", "2").returncode == 0
    try:
        first = ddpctl("run", "mnist", "--nodes", "2", "--run-id", "rmnist0001", "--", "--epochs", "1")
        assert first.returncode == 0, first.stdout + first.stderr
        accuracies = [float(a) for a in re.findall(r"held-out accuracy ([\d.]+)%", first.stdout)]
        assert len(accuracies) == 1
        assert accuracies[-1] >= 90.0, first.stdout
        assert "using the bundled MNIST test set" in first.stdout
        snapshot = home / "clusters" / "default" / "shared" / "runs" / "rmnist0001" / "mnist_snapshot.pt"
        assert snapshot.is_file()  # the run's own folder: another run does not pick it up by accident

        # what is tested is the resume, not learning: the epoch left on a tenth of the images
        args = ("--resume-from", "rmnist0001", "--", "--epochs", "2", "--data-fraction", "0.1")
        second = ddpctl("run", "mnist", "--nodes", "2", *args)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "Resuming from snapshot at epoch 1" in second.stdout
        assert re.findall(r"epoch (\d+)/2", second.stdout) == ["2"]  # only the epoch left to do
    finally:
        assert ddpctl("down").returncode == 0
    assert tree(home / "clusters") == []


def test_mingpt_with_its_defaults_fits_a_cpu_machine_and_learns(home: Path) -> None:
    """`ddpctl run mingpt --nodes 2` as --help shows it: on CPU nodes the CPU-sized model, said so,
    not the GPU example's (about 12 GB per rank, which the OOM killer stopped on a 24 GB machine);
    its loss goes down (once a run of its own with a tinier model: one minGPT run proves both)."""
    result = ddpctl("run", "mingpt", "--nodes", "2", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no GPU: the CPU-sized model (--n-layer 2" in result.stdout
    assert re.findall(r"step (\d+) \|", result.stdout)[-1] == "150"
    assert "sample:" in result.stdout
    losses = [float(x) for x in re.findall(r"step \d+ \| loss ([\d.]+)", result.stdout)]
    assert len(losses) >= 3, result.stdout
    assert losses[-1] < losses[0] * 0.9, result.stdout


def start_slow(tmp_path: Path, run_id: str) -> tuple[subprocess.Popen, Output]:
    """SLOW (tests/support/scripts.py) on 2 local nodes, in the background, once both ranks have
    joined the group and said so: ranks that sleep, where the point is stopping them, not training
    (MNIST's torchvision import and training cost about 3 and 4 CPU-s a rank before the signal)."""
    job = tmp_path / "job" / "slow.py"
    job.parent.mkdir(parents=True)
    job.write_text(SLOW)
    proc = start_ddpctl("run", str(job), "--nodes", "2", "--run-id", run_id, "-e", "SLEEP_S=600")
    output = Output(proc)
    deadline = time.monotonic() + 120
    while not all(f"started rank {rank}" in output.text for rank in range(2)):
        output.until("started rank", timeout=max(1.0, deadline - time.monotonic()))
    return proc, output


def worker(run_id: str, rank: int) -> psutil.Process:
    """The SLOW job's worker process of global ``rank`` (not its torchrun agent)."""
    for proc in run_processes(run_id):
        try:
            if proc.environ().get("RANK") == str(rank) and "slow.py" in " ".join(proc.cmdline()):
                return proc
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no worker of rank {rank} for run {run_id}")


def test_kill_one_rank_fails_fast(home: Path, tmp_path: Path) -> None:
    proc, output = start_slow(tmp_path, "kill1")
    try:
        worker("kill1", rank=1).send_signal(signal.SIGKILL)
        out = output.finish(timeout=60)  # a liveness bound (the ranks sleep 600 s), not a measure
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    assert "failed on node" in out
    assert_nothing_left("kill1", home)


def test_sigint_stops_every_process(home: Path, tmp_path: Path) -> None:
    proc, output = start_slow(tmp_path, "int1")
    try:
        assert len(find_tagged(STORE_KEY, "int1")) == 1  # the run's rendezvous store, on its own
        proc.send_signal(signal.SIGINT)
        out = output.finish(timeout=60)  # a liveness bound, not a measure
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert "interrupted" in out
    assert find_tagged(STORE_KEY, "int1") == []
    assert_nothing_left("int1", home)


def test_controller_killed_then_down_cleans_up(home: Path, tmp_path: Path) -> None:
    """A crash of ddpctl itself (SIGKILL: no clean-up code runs) leaves state that `down` cleans."""
    proc, _ = start_slow(tmp_path, "crash1")
    try:
        cluster_id = json.loads((home / "clusters" / "default.json").read_text())["cluster_id"]
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert (home / "clusters" / "default.json").is_file()  # the state survived the crash
    down = ddpctl("down")
    assert down.returncode == 0, down.stderr
    assert find_tagged(CLUSTER_KEY, cluster_id) == []
    assert_nothing_left("crash1", home)
    assert tree(home / "clusters") == []


def test_users_own_script_and_failure_exit_code(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text(
        "import os, sys\n"
        "rank = int(os.environ['RANK'])\n"
        "print(f'hello from {rank} of {os.environ[\"WORLD_SIZE\"]}', flush=True)\n"
        "sys.exit(3 if rank == 1 else 0)\n"
    )
    result = ddpctl("run", str(script), "--nodes", "2", "--run-id", "own1")
    assert "[node0 r0] hello from 0 of 2" in result.stdout
    assert "[node1 r1] hello from 1 of 2" in result.stdout
    assert result.returncode == 1
    assert "failed on node1" in result.stderr
    assert_nothing_left("own1", home)


def test_heterogeneous_nodes_get_the_right_ranks(home: Path) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", "--nproc-per-node", "2,1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node0 r1] rank 1 received 42.0 from rank 0" in result.stdout
    assert "[node1 r2] rank 2 received 42.0 from rank 0" in result.stdout
    assert result.stdout.count("all_reduce OK (6.0 == 6.0)") == 3


def test_check_on_a_local_cluster(home: Path) -> None:
    """Nodes that share a host: one launch measures every pair, one pair at a time."""
    assert ddpctl("up", "--nodes", "3").returncode == 0
    try:
        result = ddpctl("check", "--json", "--size-mb", "4")
    finally:
        assert ddpctl("down").returncode == 0
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["reachability"] == []  # one host: nothing to check between nodes
    assert [(b["a"], b["b"]) for b in doc["bandwidth"]] == [("node0", "node1"), ("node0", "node2"), ("node1", "node2")]
    assert doc["slowest_link"]["busbw_gbps"] == min(b["busbw_gbps"] for b in doc["bandwidth"]) > 0
    assert doc["transport"] == {"node0": "gloo", "node1": "gloo", "node2": "gloo"}  # CPU nodes: no NCCL
