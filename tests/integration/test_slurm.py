"""sbatch launch on a real Slurm cluster (slurmctld + slurmd + munge on the namespace nodes)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, ended, run_results, start_ddpctl, wait_for_line
from tests.support.clusters import UpCluster, onprem_up
from tests.support.specs import cluster_spec
from tests.support.testbed.cluster import GROUP_VARS, Testbed, run_procs

pytestmark = pytest.mark.slow


def squeue(testbed: Testbed) -> str:
    env = {**os.environ, "SLURM_CONF": str(testbed.root / "slurm" / "slurm.conf")}
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def slurm_cluster(slurm_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "DDPCTL_HOME": str(tmp / "home"), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    inventory = slurm_testbed.inventory(tmp / "hosts.ini", n=2, **GROUP_VARS)
    up = onprem_up(inventory, env)
    yield UpCluster(env=env, up=up, tmp=tmp, inventory=inventory)
    assert ddpctl("down", env=env).returncode == 0


def test_slurm_is_detected(slurm_cluster) -> None:
    assert json.loads(slurm_cluster.up.stdout)["cluster"]["launcher"] == "sbatch"
    assert "jobs go through sbatch" in slurm_cluster.up.stderr


def test_dry_run_prints_the_script(slurm_cluster) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", "--dry-run", env=slurm_cluster.env)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2" in result.stdout and "srun --kill-on-bad-exit=1" in result.stdout


def test_message_passing_through_sbatch(slurm_cluster, slurm_testbed: Testbed) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", env=slurm_cluster.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout
    assert result.stdout.count("all_reduce OK (3.0 == 3.0)") == 2
    assert "through sbatch" in result.stderr
    assert squeue(slurm_testbed) == ""
    logs = json.loads(ddpctl("logs", "--rank", "1", "--json", env=slurm_cluster.env).stdout)  # the job's node files
    assert {line["node"] for line in logs["lines"]} == {"node1"}
    assert [line["text"] for line in logs["lines"] if line["text"].startswith("rank 1")] == [
        "rank 1 received 42.0 from rank 0",
        "rank 1: all_reduce OK (3.0 == 3.0)",
    ]  # (torch's own warnings may come too)


def test_mnist_through_sbatch(slurm_cluster) -> None:
    result = ddpctl(
        "run",
        "mnist",
        "--nodes",
        "2",
        "--",
        "--epochs",
        "1",
        "--data-fraction",
        "0.3",
        env=slurm_cluster.env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    accuracies = [float(a) for a in re.findall(r"held-out accuracy ([\d.]+)%", result.stdout)]
    assert accuracies and accuracies[-1] >= 70.0, result.stdout  # one epoch on 30 %: about 80 % (chance: 10 %)


#: a user's script that imports a module beside it and says where it started
USER_SCRIPT = """\
import os
import torch.distributed as dist
from helper import greeting
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {greeting()} in {os.getcwd()}", flush=True)
dist.destroy_process_group()
"""


def test_a_users_own_project_through_sbatch(slurm_cluster, slurm_testbed: Testbed, tmp_path: Path) -> None:
    """`ddpctl run ./proj/train.py --nodes 2` on a Slurm cluster (issue 37, G3): the project (the
    script and the module it imports) copied to the login node's shared work directory, the job's
    ranks started in that copy on both nodes; a script that is not there is one line, nothing queued."""
    project = tmp_path / "my project"
    project.mkdir()
    (project / "helper.py").write_text("def greeting():\n    return 'hello from helper'\n")
    (project / "train.py").write_text(USER_SCRIPT)
    args = ("run", str(project / "train.py"), "--nodes", "2", "--run-id", "rslurmproj1")
    result = ddpctl(*args, env=slurm_cluster.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "through sbatch" in result.stderr
    said = dict(re.findall(r"\[(node\d r\d)\] rank \d of 2: hello from helper in (\S+)", result.stdout))
    assert set(said) == {"node0 r0", "node1 r1"}, result.stdout
    copy = Path(said["node0 r0"])
    assert said["node1 r1"] == str(copy) and copy.parent.name == "projects"  # one copy, in the shared work dir
    assert sorted(p.name for p in copy.iterdir() if p.is_file()) == ["helper.py", "train.py"]
    assert run_results(slurm_cluster.env)["rslurmproj1"] == "succeeded"
    missing = ddpctl("run", str(project / "nope.py"), "--nodes", "2", env=slurm_cluster.env)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        f"Error: script '{project / 'nope.py'}' does not exist: give the path to a Python file"
    )
    assert squeue(slurm_testbed) == ""


def start(env: dict[str, str]) -> subprocess.Popen:
    return start_ddpctl("run", "mnist", "--nodes", "2", "--", "--epochs", "20", env=env)


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
    proc = start(slurm_cluster.env)
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
    proc = start(slurm_cluster.env)
    try:
        wait_for_worker(slurm_testbed, "node0")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    deadline = time.monotonic() + 15  # scancel, then slurmd's KillWait
    while (
        squeue(slurm_testbed) or any(run_procs(slurm_testbed, n) for n in ("node0", "node1"))
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert squeue(slurm_testbed) == ""
    for node in ("node0", "node1"):
        assert run_procs(slurm_testbed, node) == [], f"survivors on {node}"


def killed_job(slurm_cluster, run_id: str, epochs: int) -> None:
    """An sbatch MNIST run whose ddpctl here is SIGKILLed once rank 1 printed: Slurm keeps the job,
    recorded here with its handle (the job id)."""
    args = ("run", "mnist", "--nodes", "2", "--run-id", run_id, "--", "--epochs", str(epochs))
    run = start_ddpctl(*args, env=slurm_cluster.env)
    wait_for_line(run, " r1] ")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)


def test_a_job_outlives_its_ddpctl(slurm_cluster) -> None:
    """A killed ddpctl leaves the job to Slurm: `runs` says it runs (asked through Slurm), `logs`
    brings its lines here, and once it has ended `runs` (and the Python API) has its record
    (issue 28's one launcher interface: the same verbs as a run on the head node)."""
    killed_job(slurm_cluster, "rslurm0001", epochs=2)
    assert run_results(slurm_cluster.env)["rslurm0001"] == "running"
    logs = ddpctl("logs", "rslurm0001", env=slurm_cluster.env)
    assert "[node1 r1] " in logs.stdout, logs.stdout + logs.stderr
    api = (  # the Python API asks Slurm too
        "import time, ddpctl\n"
        "for _ in range(480):\n"
        "    result = {r.run_id: r.result for r in ddpctl.runs()}['rslurm0001']\n"
        "    if result != 'running': break\n"
        "    time.sleep(0.5)\n"
        "print(result)\n"
    )
    got = subprocess.run(
        [sys.executable, "-c", api], env=slurm_cluster.env, capture_output=True, text=True, timeout=400
    )
    assert got.stdout.strip() == "succeeded", got.stdout + got.stderr
    assert ended(slurm_cluster.env, "rslurm0001") == "succeeded"
    logs = ddpctl("logs", "rslurm0001", "--rank", "0", env=slurm_cluster.env).stdout
    assert logs.count("epoch 2/2 | train loss") == 1, logs


def test_stop_cancels_a_job_whose_ddpctl_was_killed(slurm_cluster, slurm_testbed: Testbed) -> None:
    killed_job(slurm_cluster, "rslurm0002", epochs=20)
    assert squeue(slurm_testbed) != ""
    stopped = ddpctl("stop", "rslurm0002", env=slurm_cluster.env, timeout=120)
    assert stopped.returncode == 0 and "run rslurm0002 stopped" in stopped.stderr, stopped.stderr
    assert run_results(slurm_cluster.env)["rslurm0002"] == "interrupted"
    resumed = ddpctl("run", "--resume", "rslurm0002", env=slurm_cluster.env)
    assert resumed.returncode == 2, resumed.stderr
    assert resumed.stderr.strip().splitlines()[-1] == (
        "Error: run rslurm0002 no longer runs on the cluster: --resume attaches again to an sbatch job while it "
        "runs; `ddpctl run mnist --resume-from rslurm0002` submits a new job that starts from its snapshot"
    )
    deadline = time.monotonic() + 15  # slurmd's KillWait
    while any(run_procs(slurm_testbed, n) for n in ("node0", "node1")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert squeue(slurm_testbed) == ""
    for node in ("node0", "node1"):
        assert run_procs(slurm_testbed, node) == [], f"survivors on {node}"


def test_resume_attaches_again_to_a_job_whose_ddpctl_was_killed(slurm_cluster) -> None:
    """`run --resume` of an sbatch run whose job still runs: attached to again (not submitted again),
    its new lines printed, its end recorded."""
    killed_job(slurm_cluster, "rslurm0003", epochs=3)
    resumed = start_ddpctl("run", "--resume", "rslurm0003", env=slurm_cluster.env)
    rest, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, rest
    assert "attached to it again" in rest and "through sbatch" not in rest, rest  # not submitted again
    assert "epoch 3/3 | train loss" in rest, rest
    assert run_results(slurm_cluster.env)["rslurm0003"] == "succeeded"
    log = (slurm_cluster.tmp / "home" / "runs" / "rslurm0003" / "output.log").read_text()
    assert log.count("epoch 3/3 | train loss") == 1 and log.count("epoch 1/3 | train loss") == 1, log


def test_unschedulable_job_is_one_line(slurm_cluster, slurm_testbed: Testbed) -> None:
    """More nodes than Slurm has: one line, right away, and nothing queued."""
    result = ddpctl("run", "message-passing", "--nodes", "3", env=slurm_cluster.env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error == "Error: --nodes 3 but Slurm on 10.77.0.10 has 2 node(s): use --nodes 2 or fewer"
    assert squeue(slurm_testbed) == ""


def test_a_snapshot_dir_the_login_node_cannot_write_is_one_line(slurm_cluster, slurm_testbed, tmp_path) -> None:
    """Checked on the login node, as the job's user, before sbatch: nothing is queued."""
    locked = tmp_path / "locked"
    locked.mkdir()
    subprocess.run(["chattr", "+i", str(locked)], check=True)
    try:
        args = ("run", "message-passing", "--nodes", "2", "--snapshot-dir", f"{locked}/snap")
        result = ddpctl(*args, env=slurm_cluster.env, timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert result.returncode == 2, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(f"Error: --snapshot-dir {locked}/snap: 10.77.0.10: {locked} is not writable by root: ")
    assert squeue(slurm_testbed) == ""


class _Console:
    """EC2's console output of the head node, as cloud-init prints it: here, the test node's host key."""

    def __init__(self, testbed: Testbed, address: str) -> None:
        rows = [
            line.split()[1:3] for line in testbed.known_hosts.read_text().splitlines() if address in line.split()[0]
        ]
        self.text = "\n".join(
            ["-----BEGIN SSH HOST KEY KEYS-----", *(" ".join(r) for r in rows), "-----END SSH HOST KEY KEYS-----"]
        )

    def console_output(self, instance_id: str) -> str:
        return self.text


def test_pcluster_head_node_configure_then_sbatch_run(slurm_testbed: Testbed, tmp_path: Path) -> None:
    """The ParallelCluster provider's last step for real: once CREATE_COMPLETE, the head node is
    recorded from describe-cluster, its host key from the console, and site.yml configures it into
    the home its compute nodes share; then `ddpctl run` submits through sbatch there. No
    CloudFormation stack can be made here (moto), so the Slurm test cluster stands in for the one
    ParallelCluster makes: node0 is the head node (slurmctld), node0 and node1 the compute nodes."""
    from ddpctl.infra.model.state import ClusterPhase
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.pcluster.cli import ClusterInfo, HeadNode
    from ddpctl.infra.providers.pcluster.provider import PclusterProvider
    from ddpctl.infra.providers.pcluster.up import Up as _Up

    home = tmp_path / "home"
    env = {**os.environ, "DDPCTL_HOME": str(home), "ANSIBLE_HOME": str(tmp_path / "ansible-home")}
    store = StateStore(home)
    shared_home = tmp_path / "home-ubuntu"  # the head node's /home/ubuntu, NFS-shared with the compute nodes
    spec = cluster_spec(
        name="pc",
        provider="pcluster",
        nodes=2,
        options={"region": "us-east-1", "ssh_user": "root"},
        playbook_vars={
            **GROUP_VARS,
            "ddpctl_node_dir": str(shared_home / "ddpctl"),
            "ansible_python_interpreter": "/usr/bin/python3",
        },
    )
    provider = PclusterProvider(caller_address=lambda: "203.0.113.9", env={})
    state = provider.plan(spec, store)
    state.nodes[0] = replace(state.nodes[0], gpus=0)  # the test nodes have no GPU for --gpus-per-node
    plan = provider.pcluster_plan(state, store)
    Path(plan.aws.cluster_dir).mkdir(parents=True, mode=0o700)
    # `up`'s key, which ParallelCluster installs on the head node: here the one the test nodes trust
    shutil.copy(slurm_testbed.key, plan.aws.key_path)
    info = ClusterInfo(
        name=plan.pcluster_name,
        status="CREATE_COMPLETE",
        stack_status="CREATE_COMPLETE",
        fleet_status="RUNNING",
        head=HeadNode("i-0123456789abcdef0", "running", "", "10.77.0.10", "t3.large"),
    )
    lines: list[str] = []
    said = _Up(
        state, store, lines.append, _Console(slurm_testbed, "10.77.0.10"), plan, None, provider, provider.env
    ).finish(info)
    assert " is up: head node 10.77.0.10" in said and state.launcher == "sbatch", lines
    state.status = ClusterPhase.UP  # what Provider.up records once the steps are done
    store.save(state)
    head = state.nodes[0]
    assert head.python == f"{GROUP_VARS['python_env_path']}/bin/python"
    assert head.bundle_dir == f"{shared_home}/ddpctl/training" and head.workdir == f"{shared_home}/ddpctl/work"
    env_file = Path(head.env_file).read_text()
    assert "NCCL_DEBUG=WARN" in env_file and "SOCKET_IFNAME" not in env_file  # one file for every compute node
    assert any("configuring 1 node(s)" in line for line in lines), lines

    result = ddpctl("run", "message-passing", "--nodes", "2", env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout
    assert "through sbatch" in result.stderr
    assert squeue(slurm_testbed) == ""
    again = ddpctl("configure", "--json", env=env, timeout=300)  # the head node's roles again: nothing to change
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] == {"head": 0}, again.stderr
    store.delete("pc")  # `down` would delete the ParallelCluster: there is none


def test_a_runs_packages_are_made_on_the_login_node_before_sbatch(slurm_cluster, slurm_testbed, tmp_path) -> None:
    """`run --requirements FILE` through sbatch (issue 37): the packages go into an environment in
    the head's shared work directory, made from the login node before the job is submitted, and
    the job's Python is that environment's; a bad requirement is one line and submits nothing."""
    from tests.support.wheels import make_wheel

    make_wheel(tmp_path / "wheels")
    good = tmp_path / "requirements.txt"
    good.write_text(f"--no-index\n--find-links {tmp_path / 'wheels'}\nddpctl-tinypkg==0.1\n")
    result = ddpctl("run", "message-passing", "--nodes", "2", "--requirements", str(good), env=slurm_cluster.env)
    assert result.returncode == 0, result.stdout + result.stderr
    said = re.search(r"node0: the run's packages \(.*requirements.txt\) installed in (\S+)", result.stderr)
    assert said is not None, result.stderr
    assert list(Path(said[1]).glob("lib/python*/site-packages/ddpctl_tinypkg/__init__.py"))
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout
    bad = tmp_path / "bad.txt"
    bad.write_text("--no-index\nddpctl-no-such-package==9\n")
    result = ddpctl("run", "message-passing", "--nodes", "2", "--requirements", str(bad), env=slurm_cluster.env)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: node0: pip: No matching distribution found for ddpctl-no-such-package==9: "
        "nothing of the run was started"
    )
    assert squeue(slurm_testbed) == ""
