"""Autodown (issue 29): a cluster that takes itself down once idle, with no ddpctl running anywhere.

Fast: the idle time's text, when it would fire, the refusals, the RunInstances request, and the
node program itself (``infra/node_programs/autodown.py``) on this machine with stand-ins for
``sudo`` and ``ssh`` on its PATH: idle, it shuts the peers down, then its own node; a process with
the cluster's run marker, or a Slurm job in the queue, keeps it up.

End to end on the EC2 twin (one cluster of 2 nodes): `up --autodown` starts the program on the head
node; a detached run keeps the cluster up past the idle time; once the run ends (its ddpctl here killed), the head
node shuts the other node down over the cluster's SSH mesh, then itself (the twin's `shutdown`
stand-in), and the twin terminates both instances in moto, as EC2 does with
``InstanceInitiatedShutdownBehavior=terminate``; then `ddpctl status` deletes the rest and says so.

Its pure tests (no process beyond Python) are in tests/unit/test_autodown.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ddpctl.infra.hosts import autodown
from ddpctl.infra.node_programs import autodown as program
from tests.support.autodown import _state
from tests.support.aws_env import UP, Env
from tests.support.testbed import cluster as test_cluster
from tests.support.twin_env import TwinEnv


def test_a_head_node_that_cannot_be_reached_is_one_line() -> None:
    from dataclasses import replace

    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.model.host import Host

    state = _state(60, 1.0)
    state.nodes[0] = replace(state.nodes[0], ssh=Host("node0", "127.0.0.1", user="nobody", port=9))
    with pytest.raises(DdpctlError, match=r"^could not reach node0 over SSH for autodown: .*sshd runs there$"):
        autodown.install(state, 60)


# ---- what the nodes leave, against moto: `down` and `up` of the name delete it and say so ----------


def _taken_down(env: Env) -> None:
    """As if the nodes had taken c1 down: autodown on in its state, its instances terminated."""
    path = env.home / "clusters" / "c1.json"
    state = json.loads(path.read_text())
    state["spec"]["autodown_s"] = 60
    path.write_text(json.dumps(state))
    ids = [i for r in state["resources"] if r["kind"] == "instances" for i in r["detail"]["ids"]]
    env.moto.ec2.terminate_instances(InstanceIds=ids)


def test_down_and_up_of_the_name_delete_what_the_nodes_left(aws: Env) -> None:
    aws.ok(*UP, "--nodes", "2")
    _taken_down(aws)
    again = aws.ok(*UP, "--nodes", "1")  # the same name: the leftovers go first, said so
    assert "cluster 'c1' took itself down (autodown after 1 min idle)" in again.stderr
    assert json.loads((aws.home / "clusters" / "c1.json").read_text())["spec"]["nodes"] == 1
    _taken_down(aws)
    down = aws.ok("down", "--name", "c1")
    assert "cluster 'c1' took itself down (autodown after 1 min idle)" in down.stderr
    assert "aws cluster 'c1' is down" in down.stderr
    aws.assert_clean()


# ---- the node program, on this machine with stand-ins for sudo, ssh and squeue -------------------


@pytest.fixture
def node(tmp_path: Path) -> dict:
    """A bin folder of stand-ins that log their argv, and the program's settings file."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("sudo", "ssh"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
        (bin_dir / name).chmod(0o755)
    # an empty queue: this machine's own squeue (the test cluster's Slurm) is not this node's
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "squeue").chmod(0o755)
    settings = tmp_path / "autodown.json"
    cluster_id = f"t{os.getpid()}{time.monotonic_ns()}"
    # the program sees only the processes a test links into its own proc folder: not the torchrun
    # agents of other tests on this machine
    proc = tmp_path / "proc"
    proc.mkdir()
    doc = {"cluster_id": cluster_id, "idle_s": 1, "check_s": 0.1, "peers": ["10.0.0.2", "10.0.0.3"], "proc": str(proc)}
    settings.write_text(json.dumps(doc))
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return {"bin": bin_dir, "calls": calls, "settings": settings, "id": cluster_id, "env": env, "proc": proc}


def _start(node: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, program.__file__, str(node["settings"])],
        env=node["env"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _calls(node: dict) -> list[str]:
    return node["calls"].read_text().splitlines() if node["calls"].exists() else []


def _looked_past_idle(node: dict, since: float, looks: int = 3) -> dict:
    """The program's state once it has looked ``looks`` times after the idle time had passed."""
    path = Path(f"{node['settings']}.state")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("checked_at", 0) > since + 1 + looks * 0.1:
            return doc
        time.sleep(0.05)
    raise AssertionError(f"the program did not look past the idle time: {path}")


def test_idle_it_shuts_the_peers_down_then_its_node(node: dict) -> None:
    proc = _start(node)
    assert proc.wait(timeout=60) == 0
    assert _calls(node) == [
        "ssh -o BatchMode=yes -o ConnectTimeout=10 10.0.0.2 nohup sudo -n shutdown -h now >/dev/null 2>&1 &",
        "ssh -o BatchMode=yes -o ConnectTimeout=10 10.0.0.3 nohup sudo -n shutdown -h now >/dev/null 2>&1 &",
        "sudo -n shutdown -h now",
    ]


def test_a_run_keeps_it_up_and_its_end_starts_the_idle_time(node: dict) -> None:
    run = subprocess.Popen(["sleep", "300"], env={**os.environ, "DDPCTL_CLUSTER_ID": node["id"]})
    (node["proc"] / str(run.pid)).symlink_to(f"/proc/{run.pid}")
    try:
        start = time.time()
        proc = _start(node)
        doc = _looked_past_idle(node, start)
        assert doc["activity"] == f"a run of the cluster (pid {run.pid})"
        assert proc.poll() is None and _calls(node) == []
    finally:
        run.kill()
        run.wait()
    assert proc.wait(timeout=60) == 0
    assert _calls(node)[-1] == "sudo -n shutdown -h now"


def test_a_torchrun_agent_started_by_hand_keeps_it_up(node: dict) -> None:
    (node["bin"] / "torchrun").write_text("#!/bin/sh\nsleep 300\n")  # its command line names torchrun
    (node["bin"] / "torchrun").chmod(0o755)
    agent = subprocess.Popen([str(node["bin"] / "torchrun")], env=node["env"], start_new_session=True)
    (node["proc"] / str(agent.pid)).symlink_to(f"/proc/{agent.pid}")  # no marker: not ddpctl's
    try:
        start = time.time()
        proc = _start(node)
        assert _looked_past_idle(node, start)["activity"] == f"a torchrun agent (pid {agent.pid})"
        assert proc.poll() is None and _calls(node) == []
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
    assert proc.wait(timeout=60) == 0


def test_a_slurm_job_keeps_it_up_and_off_ends_it(node: dict) -> None:
    (node["bin"] / "squeue").write_text("#!/bin/sh\necho 42\n")
    (node["bin"] / "squeue").chmod(0o755)
    start = time.time()
    proc = _start(node)
    assert _looked_past_idle(node, start)["activity"] == "1 Slurm job(s) in the queue"
    node["settings"].unlink()  # `ddpctl autodown NAME off`
    assert proc.wait(timeout=60) == 0
    assert _calls(node) == []


# ---- end to end on the EC2 twin -------------------------------------------------------------------

IDLE = "5s"  # autodown.MIN_LOOKS looks of DDPCTL_AUTODOWN_CHECK_S=1


def _head_state(env: TwinEnv) -> dict:
    """What the program on the head node last saw (its state file, in the twin node's /home)."""
    head = env.state()["nodes"][0]["host"]  # 10.77.0.(100 + K): the twin's node ec2-K
    slot = int(head.rsplit(".", 1)[1]) - 100
    path = test_cluster.TESTBED_DIR / "nodes" / f"ec2-{slot}" / "home" / "ubuntu" / ".ddpctl" / "autodown.json.state"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _instance_states(env: TwinEnv) -> dict[str, str]:
    ids = [i for r in env.state()["resources"] if r["kind"] == "instances" for i in r["detail"]["ids"]]
    found = env.moto.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]}


@pytest.fixture(scope="module")
def autodown_env(twin: TwinEnv) -> TwinEnv:
    twin.env["DDPCTL_AUTODOWN_CHECK_S"] = "1"
    twin.env["COLUMNS"] = "250"  # the status table's cells uncut
    return twin


def test_up_starts_it_and_status_shows_it(autodown_env: TwinEnv) -> None:
    env = autodown_env
    result = env.ok("up", "--provider", "aws", "--yes", "--nodes", "2", "--autodown", "1h")
    assert (
        "autodown of 'default': after 1 h without a run its nodes shut down: EC2 terminates the others and stops "
        "node0, whose disk keeps the runs' outputs" in result.stderr
    )
    assert "(a process on node0)" in result.stderr  # the twin's nodes run no systemd
    doc = json.loads(env.ok("status", "--json").stdout)
    [cluster] = doc["clusters"]
    assert cluster["spec"]["autodown_s"] == 3600
    assert cluster["autodown"]["idle"] == "1 h" and cluster["autodown"]["running"] is False
    assert cluster["autodown"]["fires_at"] > cluster["created_at"]
    table = env.ok("status").stdout
    assert "autodown" in table and "1 h idle: in" in table


def test_a_run_going_keeps_it_up(autodown_env: TwinEnv, tmp_path: Path) -> None:
    env = autodown_env
    script = tmp_path / "wait.py"
    script.write_text(  # rank 0 leaves a snapshot, as a trainer would, then the run goes on
        "import os, pathlib, time\n"
        "if os.environ['RANK'] == '0':\n"
        "    d = pathlib.Path(os.environ['DDPCTL_SNAPSHOT_DIR']); d.mkdir(parents=True, exist_ok=True)\n"
        "    (d / 'snap.txt').write_text('weights')\n"
        "go, since = pathlib.Path(os.environ['GO_FILE']), time.monotonic()\n"
        "while not go.exists() and time.monotonic() < since + 900:\n"
        "    time.sleep(0.2)\n"
        "print('bye rank', os.environ['RANK'])\n"
    )
    # the run ends by itself once a file exists, in a folder the nodes' user (not root) can read
    go = Path(tempfile.mkdtemp(prefix="ddpctl-go-")) / "go"
    go.parent.chmod(0o755)
    started = env.ok(
        "run", str(script), "--nodes", "2", "--detach", "--run-id", "rautodown1", "-e", f"GO_FILE={go}", "--json"
    )
    (env.tmp / "rautodown1.pid").write_text(str(json.loads(started.stdout)["pid"]))  # its detached ddpctl
    (env.tmp / "rautodown1.go").write_text(str(go))
    deadline = time.monotonic() + 300
    while not _head_state(env).get("activity") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _head_state(env)["activity"].startswith("a run of the cluster")
    set_at = time.time()
    env.ok("autodown", "default", IDLE)
    while _head_state(env).get("checked_at", 0) < set_at + 5 + 3 and time.monotonic() < deadline + 120:
        time.sleep(0.5)
    seen = _head_state(env)
    assert seen["checked_at"] >= set_at + 5 + 3, seen  # it looked three times past the idle time
    assert seen["activity"].startswith("a run of the cluster")
    assert set(_instance_states(env).values()) == {"running"}
    assert "a run is going" in env.ok("status").stdout


def test_idle_it_takes_itself_down_and_down_still_keeps_the_runs_outputs(autodown_env: TwinEnv) -> None:
    """Issue 37: autodown deleted the runs' outputs with the nodes' disks. The head now stops (its
    disk kept, the others terminated); `status` says so and deletes nothing; `down` starts the head,
    brings the record and log of the run that ended there with no ddpctl here, copies the run's
    snapshot into its record, then deletes everything."""
    env = autodown_env
    # the run ends by itself on the head, its ddpctl here gone (killed: a laptop's battery): only
    # the head has its record and the end of its log, as autodown stops it
    os.kill(int((env.tmp / "rautodown1.pid").read_text()), signal.SIGKILL)
    go = Path((env.tmp / "rautodown1.go").read_text())
    go.touch()
    head = env.state()["resources"]
    ids = [i for r in head if r["kind"] == "instances" for i in r["detail"]["ids"]]
    want = {ids[0]: "stopped", **{i: "terminated" for i in ids[1:]}}
    deadline = time.monotonic() + 300
    while _instance_states(env) != want and time.monotonic() < deadline:
        time.sleep(1)
    assert _instance_states(env) == want  # by the nodes alone
    assert env.state()["status"] == "up"  # no ddpctl has looked yet
    status = env.ok("status")
    assert "stopped by autodown: node0's disk keeps the runs' outputs" in status.stdout, status.stdout
    assert "took itself down" not in status.stderr  # nothing deleted: the outputs are there
    [listed] = json.loads(env.ok("status", "--json").stdout)["clusters"]
    assert listed["status"] == "stopped" and listed["live"]["kept_head"] == ids[0], listed
    run = env.ddpctl("run", "message-passing", "--nodes", "2")  # not taken for nodes that do not answer
    assert run.returncode == 1 and run.stderr.strip().splitlines()[-1] == (
        "Error: cluster 'default' took itself down (autodown after 5 s idle); node0 is stopped with the runs' "
        "outputs on its disk: `ddpctl down --name default` copies them here and deletes what is left; then "
        "`ddpctl up` a new one"
    ), run.stderr
    assert _instance_states(env) == want
    assert not (env.home / "runs" / "rautodown1" / "run.json").exists()  # nothing here knows it ended
    down = env.ok("down", "--yes", timeout=600)
    assert "node0 was stopped with the runs' outputs on its disk: copying them here" in down.stderr, down.stderr
    assert "aws cluster 'default' is down" in down.stderr
    kept = env.home / "runs" / "rautodown1" / "outputs" / "snap.txt"
    assert kept.read_text() == "weights"
    env.assert_nothing_left("default")
    assert json.loads(env.ok("status", "--json").stdout)["clusters"] == []
    # its record and whole log came here before the head went (issue 37's audit, G1)
    assert "bye rank 1" in env.ok("logs", "rautodown1").stdout
    [ended] = [r for r in json.loads(env.ok("runs", "--json").stdout)["runs"] if r["run_id"] == "rautodown1"]
    assert ended["state"] == "succeeded", ended
    shutil.rmtree(go.parent)
    env.ok("download", "rautodown1", "--to", str(env.home.parent / "got"))  # from the record, the cluster gone
    assert (env.home.parent / "got" / "rautodown1" / "snap.txt").read_text() == "weights"
