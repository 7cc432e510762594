"""The Slurm planner: the whole generated sbatch script against a golden copy; and the script run
by bash for real, with a fake ``srun``/``scontrol`` (tests/support/fake_slurm.py) and real torchrun
agents on this machine, for what the script itself does with the rendezvous store.
Its pure tests (no process beyond Python) are in tests/unit/test_sbatch_plan.py.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ddpctl.infra.launch.sbatch import plan_sbatch
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.runs.jobs import BUNDLE_DIR
from ddpctl.infra.tools.procs import RUN_KEY, STORE_KEY, find_tagged, stop_tagged
from tests.support.fake_slurm import start_batch
from tests.support.processes import run_processes
from tests.support.sbatch_plan import mnist_plan


def test_script_is_valid_bash_and_paths() -> None:
    plan = mnist_plan()
    subprocess.run(["bash", "-n"], input=plan.script, text=True, check=True)
    assert plan.script_path == "/shared/ddpctl/runs/ddpctl-r1.sbatch"
    assert "--output=/shared/ddpctl/runs/ddpctl-%j-%N.out" in plan.script  # one output file per node


# --- the script run by bash, with a fake Slurm on this machine and real torchrun agents -------------


def free_job_id() -> int:
    """A job id whose rendezvous port (20000 + id % 20000, as the script derives it) is free here."""
    for job_id in range(20000 + int(time.time()) % 15000, 40000):
        with socket.socket() as s:
            try:
                s.bind(("", 20000 + job_id % 20000))
            except OSError:
                continue
            return job_id
    raise AssertionError("no free port")


def batch_plan(tmp_path: Path, run_id: str, script: str = str(BUNDLE_DIR / "message_passing.py")):
    run = RunSpec(job="message-passing", nodes=2, nproc_per_node=1, run_id=run_id)
    out = tmp_path / "out"
    out.mkdir()
    return plan_sbatch(
        run,
        python=sys.executable,
        script=script,
        output_dir=str(out),
        cluster_id=f"c-{run_id}",
        workdir=str(tmp_path),
    )


def node_output(plan, job_id: int, node: str) -> Path:
    """The node's output file, as the script's `srun --output=...-%j-%N.out` names it."""
    return Path(f"{plan.output_dir}/ddpctl-{job_id}-{node}.out")


def node_outputs(plan, job_id: int) -> dict[str, str]:
    return {node: node_output(plan, job_id, node).read_text() for node in ("fa", "fb")}


def stores(run_id: str) -> list:
    return find_tagged(STORE_KEY, run_id)


@pytest.mark.slow
def test_a_job_that_succeeds_prints_no_store_traceback_and_leaves_no_store(tmp_path: Path) -> None:
    plan, job_id = batch_plan(tmp_path, "sb1"), free_job_id()
    proc = start_batch(plan.script, tmp_path / "bin", job_id, ["fa", "fb"], tmp_path)
    try:
        job_out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
        stop_tagged(RUN_KEY, "sb1")
    assert proc.returncode == 0, job_out
    outputs = node_outputs(plan, job_id)
    assert sum(text.count("all_reduce OK (3.0 == 3.0)") for text in outputs.values()) == 2, outputs
    addrs = [line.split("rendezvous ")[1] for line in job_out.splitlines() if line.startswith("ddpctl: job ")]
    for text in outputs.values():
        assert "recvVector" not in text and "TCPStore" not in text and "Traceback" not in text, text
    store_out = (tmp_path / "out" / f"ddpctl-{job_id}.store").read_text()
    assert store_out.splitlines() == [f"LISTENING {a}" for a in addrs] + [f"READY {a}" for a in addrs]
    assert stores("sb1") == [] and run_processes("sb1") == []


@pytest.mark.slow
def test_a_store_that_cannot_listen_ends_the_job_before_srun(tmp_path: Path) -> None:
    plan, job_id = batch_plan(tmp_path, "sb2"), free_job_id()
    with socket.socket() as taken:
        taken.bind(("", 20000 + job_id % 20000))
        taken.listen(8)
        proc = start_batch(plan.script, tmp_path / "bin", job_id, ["fa", "fb"], tmp_path)
        try:
            job_out, _ = proc.communicate(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 1, job_out
    # said in the head node's output file, the one ddpctl streams; no agent was started
    head = node_output(plan, job_id, "fa").read_text()
    assert head.startswith("ddpctl: the rendezvous store did not start on fa:\nERROR cannot listen on port ")
    assert "Address already in use" in head
    assert not node_output(plan, job_id, "fb").exists()
    assert run_processes("sb2") == []


@pytest.mark.slow
def test_the_trap_stops_the_store_when_the_batch_shell_is_terminated(tmp_path: Path) -> None:
    """scancel: Slurm signals the batch shell (and its steps); the trap alone stops the store here."""
    (tmp_path / "sleep.py").write_text("import time\nprint('joined', flush=True)\ntime.sleep(60)\n")
    plan, job_id = batch_plan(tmp_path, "sb3", str(tmp_path / "sleep.py")), free_job_id()  # outlives the signal
    proc = start_batch(plan.script, tmp_path / "bin", job_id, ["fa", "fb"], tmp_path)
    head_out = node_output(plan, job_id, "fa")
    try:
        deadline = time.monotonic() + 120
        while "[rank0]:joined" not in (head_out.read_text() if head_out.exists() else ""):  # past the rendezvous
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[0]
            time.sleep(0.2)
        assert stores("sb3") != []
        proc.send_signal(signal.SIGTERM)  # the batch shell only: srun and the agents go on
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while stores("sb3") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stores("sb3") == []
    finally:
        proc.kill()
        stop_tagged(RUN_KEY, "sb3")
    assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)  # bash re-raises it after the trap


# --- secrets (issue 41): from a 0600 file the batch script reads and removes ----------------------------

SECRET = "s3cr3t-" + uuid.uuid4().hex


def secret_plan(tmp_path: Path, run_id: str):
    show = tmp_path / "show.py"
    show.write_text(
        "import hashlib, os\nprint('TOKEN', hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest()[:16])\n"
    )
    run = RunSpec(
        job="show", nodes=2, nproc_per_node=1, run_id=run_id, env={"TOKEN": SECRET}, secret_env=frozenset({"TOKEN"})
    )
    out = tmp_path / "out"
    out.mkdir()
    return plan_sbatch(
        run,
        python=sys.executable,
        script=str(show),
        output_dir=str(out),
        cluster_id=f"c-{run_id}",
        workdir=str(tmp_path),
    )


@pytest.mark.slow
def test_a_secret_reaches_the_ranks_from_a_file_the_job_removes(tmp_path: Path) -> None:
    plan, job_id = secret_plan(tmp_path, "sb4"), free_job_id()
    fd = os.open(plan.secrets_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # as the executor leaves it
    os.write(fd, plan.secret_input())
    os.close(fd)
    proc = start_batch(plan.script, tmp_path / "bin", job_id, ["fa", "fb"], tmp_path)
    try:
        job_out, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
        stop_tagged(RUN_KEY, "sb4")
    assert proc.returncode == 0, job_out
    digest = hashlib.sha256(SECRET.encode()).hexdigest()[:16]
    outputs = node_outputs(plan, job_id)
    assert all(f"TOKEN {digest}" in text for text in outputs.values()), outputs
    assert not Path(plan.secrets_file).exists()
    for path in tmp_path.rglob("*"):  # the script, the job's and the store's output, the agents' logs
        assert not path.is_file() or SECRET not in path.read_text(errors="replace"), path


def test_a_job_whose_secrets_file_is_gone_ends_saying_so(tmp_path: Path) -> None:
    """A job Slurm starts again (requeued) finds the file read and removed by its first start."""
    plan, job_id = secret_plan(tmp_path, "sb5"), free_job_id()
    proc = start_batch(plan.script, tmp_path / "bin", job_id, ["fa", "fb"], tmp_path)
    try:
        job_out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 1, job_out
    head = node_output(plan, job_id, "fa").read_text()
    assert head == (
        f"ddpctl: the run's secrets file {plan.secrets_file} is not on fa (an earlier start of this job read it, "
        "or the folder is not on a filesystem the nodes share with the login node): run it again with ddpctl\n"
    )
    assert not (tmp_path / "out" / f"ddpctl-{job_id}.store").exists()  # ended before anything started
