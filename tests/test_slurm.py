"""sbatch launch on a real Slurm cluster (slurmctld + slurmd + munge on the namespace nodes)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import Testbed, ddpctl
from test_onprem import GROUP_VARS, run_procs

pytestmark = pytest.mark.slow


def squeue(testbed: Testbed) -> str:
    env = {**os.environ, "SLURM_CONF": str(testbed.root / "slurm" / "slurm.conf")}
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def slurm_cluster(slurm_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "DDPCTL_HOME": str(tmp / "home"), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    inventory = slurm_testbed.inventory(tmp / "hosts.ini", n=2, **GROUP_VARS)
    up = ddpctl("up", "--provider", "onprem", "-i", str(inventory), "--json", env=env, timeout=600)
    assert up.returncode == 0, up.stderr
    yield {"env": env, "up": up}
    assert ddpctl("down", env=env).returncode == 0


def test_slurm_is_detected(slurm_cluster) -> None:
    assert json.loads(slurm_cluster["up"].stdout)["cluster"]["launcher"] == "sbatch"
    assert "jobs go through sbatch" in slurm_cluster["up"].stderr


def test_dry_run_prints_the_script(slurm_cluster) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", "--dry-run", env=slurm_cluster["env"])
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2" in result.stdout and "srun --kill-on-bad-exit=1" in result.stdout


def test_message_passing_through_sbatch(slurm_cluster, slurm_testbed: Testbed) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", env=slurm_cluster["env"], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout
    assert result.stdout.count("all_reduce OK (3.0 == 3.0)") == 2
    assert "through sbatch" in result.stderr
    assert squeue(slurm_testbed) == ""


def test_mnist_through_sbatch(slurm_cluster) -> None:
    result = ddpctl("run", "mnist", "--nodes", "2", "--", "--epochs", "2", env=slurm_cluster["env"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    accuracies = [float(a) for a in re.findall(r"held-out accuracy ([\d.]+)%", result.stdout)]
    assert accuracies and accuracies[-1] >= 90.0, result.stdout


def start(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ddpctl", "run", "mnist", "--nodes", "2", "--", "--epochs", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip


def wait_for_worker(testbed: Testbed, node: str) -> int:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for entry in run_procs(testbed, node):
            if "mnist.py" in entry and "torch.distributed.run" not in entry:
                time.sleep(4)
                return int(entry.split(":")[0])
        time.sleep(0.5)
    raise AssertionError(f"no mnist worker on {node}")


def test_failing_rank_cancels_the_job(slurm_cluster, slurm_testbed: Testbed) -> None:
    proc = start(slurm_cluster["env"])
    try:
        os.kill(wait_for_worker(slurm_testbed, "node1"), signal.SIGKILL)
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    time.sleep(1)
    assert squeue(slurm_testbed) == ""
    for node in ("node0", "node1"):
        assert run_procs(slurm_testbed, node) == [], f"survivors on {node}"


def test_ctrl_c_cancels_the_job(slurm_cluster, slurm_testbed: Testbed) -> None:
    proc = start(slurm_cluster["env"])
    try:
        wait_for_worker(slurm_testbed, "node0")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    deadline = time.monotonic() + 15  # scancel, then slurmd's KillWait
    while (squeue(slurm_testbed) or any(run_procs(slurm_testbed, n) for n in ("node0", "node1"))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert squeue(slurm_testbed) == ""
    for node in ("node0", "node1"):
        assert run_procs(slurm_testbed, node) == [], f"survivors on {node}"


def test_unschedulable_job_is_one_line(slurm_cluster, slurm_testbed: Testbed) -> None:
    """More nodes than Slurm has: one line, right away, and nothing queued."""
    result = ddpctl("run", "message-passing", "--nodes", "3", env=slurm_cluster["env"], timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error == "Error: --nodes 3 but Slurm on 10.77.0.10 has 2 node(s): use --nodes 2 or fewer"
    assert squeue(slurm_testbed) == ""
