"""The on-prem provider on the test cluster: real sshd, real Ansible over SSH, torchrun over SSH."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpctl.infra.runs import metrics as run_metrics
from tests.support.cli import Output, assert_resumed_to_90, ddpctl, start_ddpctl, tree
from tests.support.clusters import UpCluster, onprem_up
from tests.support.scripts import SLOW
from tests.support.testbed.cluster import GROUP_VARS, Testbed, run_procs, worker_pid

pytestmark = pytest.mark.slow

VENV_PYTHON = str(Path(sys.executable))


@pytest.fixture(scope="module")
def onprem(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory):
    """`ddpctl up --provider onprem` on the 3-node test cluster, `down` at the end."""
    tmp = tmp_path_factory.mktemp("onprem")
    home = tmp / "home"
    env = {"DDPCTL_HOME": str(home), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    inventory = testbed.inventory(tmp / "hosts.ini", **GROUP_VARS)
    up = onprem_up(inventory, _env(env), "--playbook-var", "nccl_env_debug=INFO")
    yield UpCluster(env=env, up=up, tmp=tmp, inventory=inventory)
    down = ddpctl("down", env=_env(env))
    assert down.returncode == 0, down.stderr
    # the nodes are as `up` found them, apart from what the playbooks installed
    for node in json.loads(up.stdout)["cluster"]["nodes"]:
        assert not Path(node["workdir"]).exists()
        assert Path(node["env_file"]).is_file() and Path(node["bundle_dir"]).is_dir()
        assert run_procs(testbed, node["name"]) == []
    assert not (home / "clusters" / "default.json").exists()


def start_run(onprem, *args: str) -> subprocess.Popen:
    """`ddpctl run ARGS` on the on-prem cluster, in the background, output (merged) on a pipe."""
    return start_ddpctl("run", *args, env=_env(onprem.env))


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, **extra}


def test_up_records_the_configured_nodes(onprem, testbed: Testbed) -> None:
    cluster = json.loads(onprem.up.stdout)["cluster"]
    assert cluster["status"] == "up"
    assert [n["name"] for n in cluster["nodes"]] == ["node0", "node1", "node2"]
    assert [n["host"] for n in cluster["nodes"]] == ["10.77.0.10", "10.77.0.11", "10.77.0.12"]
    for node in cluster["nodes"]:
        assert Path(node["env_file"]).is_file()
        assert Path(node["bundle_dir"], "mnist.py").is_file()
    # progress was per task with each host's outcome, not Ansible's raw output
    assert re.search(r"node0 (ok|changed), node1 (ok|changed), node2 (ok|changed)", onprem.up.stderr)
    key_dir = onprem.home / "clusters" / "default" / "keys"
    assert any(p.stat().st_mode & 0o777 == 0o600 for p in key_dir.iterdir())


def test_message_passing_across_three_namespaces(onprem) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "3", env=_env(onprem.env), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (1, 2):
        assert f"[node{rank} r{rank}] rank {rank} received 42.0 from rank 0" in result.stdout
    assert result.stdout.count("all_reduce OK (6.0 == 6.0)") == 3
    logs = ddpctl("logs", "--node", "node2", env=_env(onprem.env))  # the last run, from its record
    assert logs.returncode == 0 and [line for line in logs.stdout.splitlines() if "rank 2" in line] == [
        "[node2 r2] rank 2 received 42.0 from rank 0",
        "[node2 r2] rank 2: all_reduce OK (6.0 == 6.0)",
    ], logs.stdout + logs.stderr  # (torch's own warnings may come first)
    assert all(line.startswith("[node2") for line in logs.stdout.splitlines())


def test_mnist_two_nodes_over_ssh_and_its_metrics(onprem) -> None:
    """One MNIST epoch over SSH (about 96 %; the trainer's own tests and the local run take it
    further); its metric lines come from the head node into the run's record over SSH while it runs
    (DDPCTL_METRICS_EVERY_S=1 here) and whole at its end, where `metrics --follow` and `metrics` read them."""
    env = {**_env(onprem.env), "DDPCTL_METRICS_EVERY_S": "1"}
    proc = start_ddpctl("run", "mnist", "--nodes", "2", "--run-id", "sshmet", "--", "--epochs", "1", env=env)
    follow = None
    try:
        output = Output(proc)
        output.until("step 20 |", timeout=300)  # the run's record exists
        follow = start_ddpctl("metrics", "sshmet", "--follow", "--last", "0", env=env)
        record = onprem.home / "runs" / "sshmet" / "metrics.jsonl"
        while proc.poll() is None and not (record.is_file() and '"step": 20' in record.read_text()):
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before its metric lines came over SSH into its record"
        text = output.finish(timeout=600)
        followed, _ = follow.communicate(timeout=120)
    finally:
        proc.kill()
        if follow is not None:
            follow.kill()
    assert proc.returncode == 0, text
    accuracies = [float(a) for a in re.findall(r"held-out accuracy ([\d.]+)%", text)]
    assert accuracies and accuracies[-1] >= 90.0, text
    doc = json.loads(ddpctl("metrics", "sshmet", "--json", env=env).stdout)
    assert doc["summary"]["accuracy"] == accuracies[-1] and doc["lines"][-1]["kind"] == "epoch"
    assert [d["step"] for d in doc["lines"][:2]] == [1, 20] and doc["lines"][1]["samples_per_s"] > 0
    assert follow.returncode == 0, followed
    assert followed.splitlines()[-1] == run_metrics.line_text(doc["lines"][-1])  # came after it started
    assert len([line for line in followed.splitlines() if line.startswith(("step |", "epoch |"))]) == len(doc["lines"])


def test_a_snapshot_dir_the_nodes_cannot_write_is_one_line(onprem, testbed: Testbed, tmp_path: Path) -> None:
    """Checked on every node as the job's user, before anything of the run starts (the nodes run as
    root, so the folder is made immutable: root cannot write it either)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    subprocess.run(["chattr", "+i", str(locked)], check=True)
    try:
        args = ("run", "message-passing", "--nodes", "2", "--snapshot-dir", f"{locked}/snapshots")
        result = ddpctl(*args, env=_env(onprem.env), timeout=120)
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: --snapshot-dir {locked}/snapshots: node0: {locked} is not writable by root; "
        f"node1: {locked} is not writable by root: give a directory the job's user can write on every node "
        "(shared storage they all mount, or s3://BUCKET/PREFIX)"
    )
    assert "rank" not in result.stdout  # nothing started
    for node in ("node0", "node1"):
        assert run_procs(testbed, node) == []


def slow_job(tmp_path: Path) -> str:
    """SLOW (tests/support/scripts.py) as a user's script in a project folder of its own: ranks that
    join the group, say so and sleep, where the point is stopping them, not training (MNIST's
    torchvision import and training cost 1.5 and about 9 CPU-s a rank)."""
    script = tmp_path / "job" / "slow.py"
    script.parent.mkdir()
    script.write_text(SLOW)
    return str(script)


def all_started(output: Output, ranks: int, timeout: float = 300) -> None:
    """Wait until every rank of a SLOW job said it started (in any order): the run is under way."""
    deadline = time.monotonic() + timeout
    while not all(f"started rank {rank}" in output.text for rank in range(ranks)):
        output.until("started rank", timeout=max(1.0, deadline - time.monotonic()))


def test_killed_rank_stops_every_node(onprem, testbed: Testbed, tmp_path: Path) -> None:
    args = (slow_job(tmp_path), "--nodes", "3", "--run-id", "sshkill", "-e", "SLEEP_S=600")
    proc = start_run(onprem, *args)
    try:
        output = Output(proc)
        all_started(output, 3)
        victim = worker_pid(testbed, "node1", script="slow.py")
        subprocess.run(["kill", "-9", str(victim)], check=True)
        out = output.finish(timeout=120)  # a liveness bound (the ranks sleep 600 s), not a measure
    finally:
        proc.kill()
    assert proc.returncode == 1 and "failed on node1" in out, out
    time.sleep(0.5)
    for node in ("node0", "node1", "node2"):
        assert run_procs(testbed, node) == [], f"survivors on {node}"


def test_ctrl_c_stops_every_node(onprem, testbed: Testbed, tmp_path: Path) -> None:
    proc = start_run(onprem, slow_job(tmp_path), "--nodes", "2", "-e", "SLEEP_S=600")
    try:
        output = Output(proc)
        all_started(output, 2)
        assert any("slow.py" in p for p in run_procs(testbed, "node1"))
        proc.send_signal(signal.SIGINT)
        out = output.finish(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    for node in ("node0", "node1"):
        assert run_procs(testbed, node) == [], f"survivors on {node}"


def test_bad_inventories_change_nothing(testbed: Testbed, tmp_path: Path) -> None:
    env = _env({"DDPCTL_HOME": str(tmp_path / "home"), "ANSIBLE_HOME": str(tmp_path / "ah")})
    cases = []
    unreachable = testbed.inventory(tmp_path / "unreachable.ini", **GROUP_VARS)
    text = unreachable.read_text().replace("node2 ansible_host=10.77.0.12", "node2 ansible_host=10.77.0.1")
    unreachable.write_text(text)
    cases.append((["-i", str(unreachable)], 1, r"cannot reach 1 of 3 host\(s\) over SSH, nothing was changed: node2 "))
    wrong_user = testbed.inventory(tmp_path / "user.ini", **GROUP_VARS)
    wrong_user.write_text(wrong_user.read_text().replace("ansible_user=root", "ansible_user=nobody"))
    cases.append((["-i", str(wrong_user)], 1, r"cannot reach 3 of 3 .*check ansible_user"))
    dup = testbed.inventory(tmp_path / "dup.ini", **GROUP_VARS)
    dup.write_text(dup.read_text().replace("node2 ansible_host=10.77.0.12", "node2 ansible_host=10.77.0.10"))
    cases.append((["-i", str(dup)], 2, r"hosts 'node0' and 'node2' are both 10.77.0.10:22"))
    three = testbed.inventory(tmp_path / "three.ini", **GROUP_VARS)
    cases.append((["-i", str(three), "--nodes", "4"], 2, r"--nodes 4 but .* lists 3 host\(s\)"))
    cases.append((["-i", str(tmp_path / "missing.ini")], 2, r"missing.ini"))
    for args, code, pattern in cases:
        result = ddpctl("up", "--provider", "onprem", *args, env=env, timeout=120)
        assert result.returncode == code, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert re.search(pattern, lines[-1]), (args, result.stderr)
        assert lines[-1].startswith("Error: ")
        assert tree(tmp_path / "home" / "clusters") == []


def test_rendezvous_port_taken_on_the_head_is_one_line(onprem, testbed: Testbed) -> None:
    """`run` starts the rendezvous store on the head first: where it cannot listen, nothing else starts."""
    holder = subprocess.Popen(
        [
            "ssh",
            "-F",
            str(testbed.ssh_config),
            "node0",
            "exec python3 -c \"import socket,time; s=socket.socket(); s.bind(('10.77.0.10', 40123)); s.listen(); time.sleep(60)\"",
        ],
    )
    try:
        time.sleep(1.5)
        result = ddpctl("run", "message-passing", "--nodes", "2", "--port", "40123", env=_env(onprem.env), timeout=120)
    finally:
        holder.kill()
        testbed.ssh("node0", "pkill -f 40123 || true")
    assert result.returncode == 1, result.stdout + result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "Error: the rendezvous store did not start on the head node node0: cannot listen on port 40123: "
        "Address already in use; the rendezvous port is in use on the head node"
    )
    assert "rank" not in result.stdout  # nothing was launched


def test_check_names_the_slowest_link(onprem) -> None:
    """A slow link (issue 38): node2's sends held to 40 Mbit/s by a token bucket on its interface (`tc
    tbf`; this kernel has no netem for added delay). `check` measures every pair and names a pair of
    node2's as the slowest link, clearly below the pair without node2; then, unshaped, its table."""
    shape = ["tc", "-n", "node2", "qdisc"]
    subprocess.run(
        [*shape, "add", "dev", "ddp0", "root", "tbf", "rate", "40mbit", "burst", "64kb", "latency", "400ms"], check=True
    )
    try:
        result = ddpctl("check", "--json", "--size-mb", "4", env=_env(onprem.env), timeout=300)
    finally:
        subprocess.run([*shape, "del", "dev", "ddp0", "root"], check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] is True
    pairs = {(r["from"], r["to"]) for r in doc["reachability"] if r["result"] == "ok"}
    assert pairs == {(a, b) for a in ("node0", "node1", "node2") for b in ("node0", "node1", "node2") if a != b}
    assert len(doc["bandwidth"]) == 3 and all(b["busbw_gbps"] > 0 for b in doc["bandwidth"])
    slowest = doc["slowest_link"]
    assert slowest["busbw_gbps"] == min(b["busbw_gbps"] for b in doc["bandwidth"])
    assert "node2" in (slowest["a"], slowest["b"]), doc["bandwidth"]
    fast = [b["busbw_gbps"] for b in doc["bandwidth"] if "node2" not in (b["a"], b["b"])]
    assert fast and slowest["busbw_gbps"] < min(fast) / 2, doc["bandwidth"]  # clearly apart, not by noise
    assert doc["transport"] == {"node0": "gloo", "node1": "gloo", "node2": "gloo"}  # CPU nodes: no NCCL
    text = ddpctl("check", "--no-bandwidth", env=_env(onprem.env), timeout=120)
    assert text.returncode == 0 and "node0 <-> node1" in text.stdout  # the table


def test_elastic_run_survives_a_lost_link(onprem, testbed: Testbed) -> None:
    """--nodes 2:3 over SSH: node2's link goes down inside its namespace; nodes 0-1 go on from the
    snapshot once their collectives time out; when the link is back, node2 joins at the next rendezvous."""
    proc = start_run(
        onprem,
        "mnist",
        "--nodes",
        "2:3",
        "--run-id",
        "sshelastic",
        "-e",
        "DDPCTL_COLLECTIVE_TIMEOUT_S=15",
        "--",
        "--epochs",
        "50",
        "--data-fraction",
        "0.2",  # the first snapshot after a fifth of the images (one whole epoch took 27 CPU-s)
        "--snapshot-path",
        "sshelastic.pt",
    )
    link = ["ip", "-n", "node2", "link", "set", "ddp0"]
    try:
        output = Output(proc)
        output.until("snapshot saved", timeout=300)
        subprocess.run([*link, "down"], check=True)
        try:
            output.until("(2 ranks)", timeout=120)  # the survivors go on without node2
        finally:
            subprocess.run([*link, "up"], check=True)
        output.until("(3 ranks)", timeout=180)  # node2 is back: the three resume together (finishing is tested locally)
        proc.send_signal(signal.SIGINT)
        out = output.finish(timeout=60)
    finally:
        subprocess.run([*link, "up"], check=False)
        proc.kill()
    assert proc.returncode == 130, out
    time.sleep(0.5)
    for node in ("node0", "node1", "node2"):
        assert run_procs(testbed, node) == [], f"survivors on {node}"


def test_max_restarts_over_ssh_resumes_from_the_snapshot(onprem, testbed: Testbed) -> None:
    proc = start_run(
        onprem,
        "mnist",
        "--nodes",
        "2",
        "--max-restarts",
        "1",
        "--run-id",
        "sshrestart",
        "--",
        "--epochs",
        "2",
        "--data-fraction",
        "0.5",
        "--snapshot-path",
        "sshrestart.pt",
    )
    try:
        output = Output(proc)
        output.until("snapshot saved", timeout=300)
        time.sleep(0.5)  # into epoch 2 (about 3 s on half the images)
        subprocess.run(["kill", "-9", str(worker_pid(testbed, "node1"))], check=True)
        out = output.finish(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert_resumed_to_90(out)
    for node in ("node0", "node1"):
        assert run_procs(testbed, node) == [], f"survivors on {node}"


def test_resume_after_the_controller_was_killed(onprem, testbed: Testbed) -> None:
    """ddpctl SIGKILLed mid-run, the run supervised from this machine (``DDPCTL_SUPERVISOR=here``,
    as an elastic --spot run on aws always is): the agents on the nodes may live on; `run --resume`
    stops them and resumes from the snapshot. (With the head's supervisor, the default, the run goes
    on there and `run --resume` attaches to it again: test_head_supervisor.py.)"""
    env = {**_env(onprem.env), "DDPCTL_SUPERVISOR": "here"}
    proc = start_ddpctl(
        "run",
        "mnist",
        "--nodes",
        "2",
        "--run-id",
        "sshresume",
        "--",
        "--epochs",
        "3",
        "--data-fraction",
        "0.3",
        "--snapshot-path",
        "sshresume.pt",
        env=env,
    )
    try:
        Output(proc).until("snapshot saved", timeout=300)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    resumed = ddpctl("run", "--resume", "sshresume", env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # epoch 1's snapshot (or epoch 2's, if the orphaned agents got that far before they were stopped)
    assert re.search(r"Resuming from snapshot at epoch [12]", resumed.stdout), resumed.stdout
    accuracies = [float(a) for a in re.findall(r"epoch 3/3 .* held-out accuracy ([\d.]+)%", resumed.stdout)]
    assert accuracies and accuracies[-1] >= 90.0, resumed.stdout
    time.sleep(0.5)
    for node in ("node0", "node1"):
        assert run_procs(testbed, node) == [], f"leftovers on {node}"


def test_ctrl_c_while_torchrun_restarts_stops_every_node(onprem, testbed: Testbed) -> None:
    proc = start_run(
        onprem,
        "mnist",
        "--nodes",
        "2",
        "--max-restarts",
        "3",
        "--run-id",
        "sshrestart2",
        "--",
        "--epochs",
        "20",
        "--snapshot-path",
        "sshrestart2.pt",
    )
    try:
        output = Output(proc)
        first = worker_pid(testbed, "node1")
        time.sleep(3)  # into training
        subprocess.run(["kill", "-9", str(first)], check=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not restarted(testbed, "node1"):
            time.sleep(0.05)
        assert restarted(testbed, "node1"), "torchrun did not restart node1's worker"
        proc.send_signal(signal.SIGINT)  # while the new round starts up
        out = output.finish(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    time.sleep(0.5)
    for node in ("node0", "node1"):
        assert run_procs(testbed, node) == [], f"survivors on {node}"


def restarted(testbed: Testbed, node: str) -> bool:
    """A worker of a later torchrun round (TORCHELASTIC_RESTART_COUNT > 0) runs in ``node``'s namespace."""
    for entry in run_procs(testbed, node):
        pid = int(entry.split(":")[0])
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(e.startswith(b"TORCHELASTIC_RESTART_COUNT=") and e != b"TORCHELASTIC_RESTART_COUNT=0" for e in env):
            return True
    return False


def test_configure_converges_and_records_new_variables(onprem, testbed: Testbed) -> None:
    """`ddpctl configure`: a new variable changes only what it governs, on every node, and is
    recorded with the cluster (a later configure keeps it and changes nothing). A whole no-op
    configure (changed=0 on every node) is tests/integration/test_scale.py's, on the same path at 16 nodes."""
    env = _env(onprem.env)
    trace = ddpctl(
        "configure", "--playbook-var", "nccl_env_debug=TRACE", "--tags", "nccl_env", "--json", env=env, timeout=600
    )
    assert trace.returncode == 0, trace.stderr
    doc = json.loads(trace.stdout)
    assert doc["changed"] == {"node0": 1, "node1": 1, "node2": 1}
    assert doc["cluster"]["spec"]["playbook_vars"] == {"nccl_env_debug": "TRACE"}
    for node in doc["cluster"]["nodes"]:
        assert "NCCL_DEBUG=TRACE\n" in Path(node["env_file"]).read_text()
    again = ddpctl("configure", "--tags", "nccl_env", "--json", env=env, timeout=600)  # the recorded value holds
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] == {"node0": 0, "node1": 0, "node2": 0}
    assert "cluster 'default' configured: node0 ok, node1 ok, node2 ok" in again.stderr
    assert (
        "TASK" not in again.stderr and "Write the environment file" in again.stderr
    )  # progress per task, not a wall of text
    back = ddpctl("configure", "--playbook-var", "nccl_env_debug=INFO", "--tags", "nccl_env", env=env, timeout=600)
    assert back.returncode == 0, back.stderr


#: no torch: what is tested is what reaches the ranks (the project, the secret), not a process group
#: (each rank's torch import cost 1.5 CPU-s, 9 ranks in the test)
PROJECT_TRAIN = """\
import hashlib, os, socket
from helpers import greeting  # a sibling module: the project came along
with open("data/words.txt") as f:  # relative to where the script starts: the node's copy
    words = f.read().split()
token = hashlib.sha256(os.environ["TOKEN"].encode()).hexdigest()[:12]
print(f"rank {os.environ['RANK']}: {greeting()} {len(words)} words, token {token}", flush=True)
env = [os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG", "MASTER_ADDR")]
print("ENV", socket.gethostname(), *env, flush=True)
"""


def test_a_project_and_a_secret_go_over_ssh(onprem, tmp_path: Path) -> None:
    """`run ./train.py` ships the script's project to every node (once per content) and a secret
    (`-e TOKEN`) on the SSH session's stdin: the ranks import the sibling module, read the data
    file, and see the secret, which no file under the state home holds. Each rank also shows its
    node's interface toward node0 and NCCL_DEBUG, from the node's env file."""
    import hashlib

    secret = "s3cr3t-over-ssh-0123456789"
    project = tmp_path / "proj"
    (project / "data").mkdir(parents=True)
    (project / "data" / "words.txt").write_text("one two three\n")
    (project / "helpers.py").write_text("def greeting():\n    return 'hello from helpers:'\n")
    (project / "train.py").write_text(PROJECT_TRAIN)
    env = {**_env(onprem.env), "TOKEN": secret}
    token = hashlib.sha256(secret.encode()).hexdigest()[:12]
    nodes = json.loads(onprem.up.stdout)["cluster"]["nodes"]

    def copies() -> list[set[tuple[str, float]]]:
        """Each node's project copies (earlier tests' scripts shipped theirs too)."""
        found = [Path(n["workdir"], "projects") for n in nodes]
        return [{(p.name, p.stat().st_mtime) for p in d.iterdir()} if d.is_dir() else set() for d in found]

    def run_and_copies() -> list[set[tuple[str, float]]]:
        result = ddpctl("run", str(project / "train.py"), "--nodes", "3", "-e", "TOKEN", env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        for rank in range(3):
            assert f"rank {rank}: hello from helpers: 3 words, token {token}" in result.stdout
            # NCCL_DEBUG from the node's env file, as `up --playbook-var nccl_env_debug=INFO` set it
            assert f"[node{rank} r{rank}] ENV node{rank} ddp0 ddp0 INFO 10.77.0.10" in result.stdout
        return copies()

    before = copies()
    first = run_and_copies()
    assert all(len(now - then) == 1 for now, then in zip(first, before))  # one copy of this project
    assert run_and_copies() == first  # unchanged: not copied again
    (project / "helpers.py").write_text("def greeting():\n    return 'hello from helpers:'  # changed\n")
    assert all(len(now - then) == 1 for now, then in zip(run_and_copies(), first))  # a new copy, for the new content
    for path in onprem.home.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_ddpctl_ssh_reaches_each_node(onprem) -> None:
    """`ddpctl ssh NODE -- COMMAND` with OpenSSH and the inventory's connection details."""
    for node, address in (("node0", "10.77.0.10"), ("node2", "10.77.0.12")):
        result = ddpctl("ssh", node, "--", "sh", "-c", "echo $SSH_CONNECTION", env=_env(onprem.env), timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[2] == address  # the server's end of the connection
    default = ddpctl("ssh", "--", "true", env=_env(onprem.env), timeout=60)
    assert default.returncode == 0, default.stderr  # the head node


def test_configure_check_diff_shows_and_changes_nothing(onprem) -> None:
    """`ddpctl configure --check --diff`: the play in check mode shows, per node, the env file's
    line that a new variable would change, and changes nothing: not the nodes' files, not the
    variables recorded with the cluster."""
    env = _env(onprem.env)
    before = json.loads(ddpctl("status", "--json", env=env).stdout)
    args = ("configure", "--check", "--diff", "--playbook-var", "nccl_env_debug=WARN", "--tags", "nccl_env")
    shown = ddpctl(*args, env=env, timeout=600)
    assert shown.returncode == 0, shown.stderr
    assert "checked, nothing was changed; a real run would give: node0 1 changed" in shown.stderr
    for node in ("node0", "node1", "node2"):
        assert f"--- {node}: " in shown.stdout
    assert "-NCCL_DEBUG=INFO" in shown.stdout and "+NCCL_DEBUG=WARN" in shown.stdout
    doc = json.loads(ddpctl(*args, "--json", env=env, timeout=600).stdout)
    assert doc["check"] is True and doc["changed"] == {"node0": 1, "node1": 1, "node2": 1}
    assert {d["host"] for d in doc["diff"]} == {"node0", "node1", "node2"}
    after = json.loads(ddpctl("status", "--json", env=env).stdout)
    for doc in (before, after):  # the clock moves on: the cluster's age is not a record
        for cluster in doc["clusters"]:
            cluster.pop("age_s", None)
    assert after["clusters"] == before["clusters"]  # nothing recorded (not the variable, not the nodes)
    for node in json.loads(onprem.up.stdout)["cluster"]["nodes"]:
        assert "NCCL_DEBUG=INFO\n" in Path(node["env_file"]).read_text()


STAND_IN_SMI = """#!/bin/sh
# a stand-in nvidia-smi: lists GPUs this test node does not have (the ranks run on CPU with gloo)
[ "$1" = -L ] || exit 9
for i in $(seq 0 $(({count} - 1))); do echo "GPU $i: NVIDIA A10G (UUID: GPU-{node}-$i)"; done
"""


def test_every_gpu_of_every_node_by_default(onprem, testbed: Testbed) -> None:
    """Nodes whose nvidia-smi lists 2 and 4 GPUs (a stand-in first on the node's PATH), one with none:
    `configure` records 2, 4 and 0, and a run with neither --nodes nor --nproc-per-node runs on every
    node, one process per GPU and one on the node without: world size 7. The nodes are as before after."""
    env = _env(onprem.env)
    smis = []
    for node, count in (("node0", 2), ("node1", 4)):
        smi = testbed.node_dir(node) / "bin" / "nvidia-smi"
        smi.parent.mkdir(exist_ok=True)
        smi.write_text(STAND_IN_SMI.format(count=count, node=node))
        smi.chmod(0o755)
        smis.append(smi)
    try:
        counted = ddpctl("configure", "--tags", "nvidia", "--json", env=env, timeout=600)
        assert counted.returncode == 0, counted.stderr
        assert [n["gpus"] for n in json.loads(counted.stdout)["cluster"]["nodes"]] == [2, 4, 0]
        gpu = ddpctl("run", "message-passing", "--nproc-per-node", "gpu", "--dry-run", env=env)
        assert gpu.returncode == 2 and gpu.stderr.strip().splitlines()[-1] == (
            "Error: --nproc-per-node gpu: node node2 of cluster 'default' has no GPU (none counted at up/configure): "
            "give a count (e.g. --nproc-per-node 1) or auto"
        )
        result = ddpctl("run", "message-passing", env=env, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert (
            "on all 3 node(s) of cluster 'default', 2+4+1 process(es) (one per GPU, 1 on a node without GPUs)"
            in result.stderr
        )
        assert result.stdout.count("all_reduce OK (28.0 == 28.0)") == 7  # world size 7: 1 + ... + 7
        ok = [line.split()[0] for line in result.stdout.splitlines() if "all_reduce OK" in line]
        assert [ok.count(f"[{node}") for node in ("node0", "node1", "node2")] == [2, 4, 1], result.stdout
    finally:
        for smi in smis:
            smi.unlink()
        back = ddpctl("configure", "--tags", "nvidia", "--json", env=env, timeout=600)
    assert back.returncode == 0, back.stderr
    assert [n["gpus"] for n in json.loads(back.stdout)["cluster"]["nodes"]] == [0, 0, 0]


def test_down_of_another_cluster_on_the_same_hosts_leaves_this_ones_work_folder(onprem, testbed: Testbed) -> None:
    """Issue 42: every cluster on the same hosts shared one work folder (``/opt/ddpctl/work``, or the
    inventory's), and `down` of one removed it with the other's run snapshots. Each cluster now has
    its own folder under it (``NAME-ID``); `down` of a second cluster, from another state home, on
    the same hosts leaves the first one's folder and a run's file in it."""
    first = json.loads(onprem.up.stdout)["cluster"]
    workdirs = [Path(n["workdir"]) for n in first["nodes"]]
    assert all(w.name == f"default-{first['cluster_id']}" for w in workdirs), workdirs
    decoys = []
    for w in workdirs:
        decoy = w / "runs" / "precious" / "snapshot.pt"
        decoy.parent.mkdir(parents=True, exist_ok=True)
        decoy.write_text("weights\n")
        decoys.append(decoy)
    mine = workdirs[0].parent / "not-a-cluster" / "precious.txt"  # the user's own, in the hosts' work root
    mine.parent.mkdir(exist_ok=True)
    mine.write_text("mine\n")
    decoys.append(mine)
    other = {**onprem.env, "DDPCTL_HOME": str(onprem.tmp / "other-home")}
    up = onprem_up(onprem.inventory, _env(other), "--name", "other")
    second = json.loads(up.stdout)["cluster"]
    theirs = [Path(n["workdir"]) for n in second["nodes"]]
    assert all(t.parent == w.parent and t != w for t, w in zip(theirs, workdirs)), (theirs, workdirs)
    assert all(t.is_dir() for t in theirs)
    down = ddpctl("down", "--name", "other", env=_env(other))
    assert down.returncode == 0, down.stderr
    assert not any(t.exists() for t in theirs)
    assert all(w.is_dir() for w in workdirs)
    assert [d.read_text() for d in decoys] == ["weights\n"] * len(workdirs) + ["mine\n"]
    for d in decoys[:-1]:
        shutil.rmtree(d.parent.parent, ignore_errors=True)  # nodes may share one work root
    shutil.rmtree(mine.parent)


def test_a_projects_packages_reach_every_node_over_ssh(onprem, tmp_path: Path) -> None:
    """The project's requirements.txt (offline: `--no-index`, its wheel in the project) installed on
    every node, into an environment of each node's work folder layered on its Python, before the run;
    every rank imports the package; a second run reuses every node's environment (issue 37)."""
    from tests.support.wheels import make_project

    script = make_project(tmp_path / "proj", requirements="--no-index\nddpctl-tinypkg==0.1\n")
    for said in ("installed", "reused"):
        result = ddpctl("run", str(script), "--nodes", "3", env=_env(onprem.env), timeout=300)
        assert result.returncode == 0, result.stderr
        for node in range(3):
            assert f"node{node}: the run's packages (requirements.txt) {said} in " in result.stderr
            assert f"rank {node}: tinypkg says hello" in result.stdout
