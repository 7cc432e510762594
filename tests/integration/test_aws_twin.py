"""The whole AWS path through the `ddpctl` command, on the EC2 twin (tests/support/testbed/twin.py).

moto in server mode is the EC2 API; the twin in front of it backs every instance with a node of the
test cluster (a network namespace with its own sshd, user ``ubuntu`` with sudo, host keys in the
console output as cloud-init prints them). So `ddpctl up --provider aws` really launches, waits for
SSH, runs playbooks/site.yml over the inventory it wrote, and `run`, `check`, `configure` and `down`
really reach the instances, exactly as a user types them (the only setting: the twin's environment,
as `./dev twin up` prints it: endpoint, fake credentials, and a ddpctl.toml with ssh_cidr, since the
caller's public address cannot be looked up offline).

Where the twin is not faithful, and what that leaves untested:
- security groups are recorded by moto, not enforced on the test cluster's bridge: the tests check
  the rules that exist, not that packets are dropped;
- placement groups and capacity: moto has neither (see tests/{unit,integration}/test_aws.py);
- the nodes boot with the pinned PyTorch at /opt/ddpctl/venv (a baked image): python_env's probe
  finds it and installs nothing; its download from PyTorch's index and the NVIDIA driver install are
  tested in check mode only (tests/integration/test_playbooks.py);
- instances are "running" as soon as RunInstances answers and the node is up by then: the waits for
  the console's host keys and for SSH are exercised, their timeouts are not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ddpctl.infra.hosts.site_play import SITE
from tests.support.cli import Output, ended
from tests.support.scripts import SLOW
from tests.support.testbed import cluster as test_cluster
from tests.support.testbed.twin import TwinProcess, in_test_range
from tests.support.twin_env import CALLER, TwinEnv, leftover_ansible


def node_dirs() -> list[Path]:
    return sorted((test_cluster.TESTBED_DIR / "nodes").glob("ec2-*"))


# ---- one cluster of 3 nodes, as a user brings it up, uses it and takes it down ---------------------


def test_up_launches_and_configures_in_one_command(twin: TwinEnv) -> None:
    result = twin.ok("up", "--provider", "aws", "--yes", "--nodes", "3")
    assert f"configuring 3 node(s) with {SITE}" in result.stderr  # the real path, as a wheel user finds it
    assert "aws cluster 'default' is up: 3 x p3.2xlarge" in result.stderr
    assert "image: " in result.stderr and "NVIDIA's proprietary 580 driver" in result.stderr  # p3: why Ubuntu
    state = twin.state()
    assert state["status"] == "up"
    assert [n["python"] for n in state["nodes"]] == ["/opt/ddpctl/venv/bin/python"] * 3
    assert all(n["workdir"] == "/opt/ddpctl/work" for n in state["nodes"])
    assert len(TwinProcess.nodes()) == 3
    for inst in twin.moto.alive_instances():  # every address an instance reports is one of the test cluster's
        for key in ("PrivateIpAddress", "PublicIpAddress"):
            assert in_test_range(inst[key]), inst
    known = (twin.home / "clusters" / "default" / "known_hosts").read_text().splitlines()
    assert len(known) == 3 * 3  # rsa, ecdsa, ed25519 of each node, from the console output


def test_what_exists_is_locked_down(twin: TwinEnv) -> None:
    ec2 = twin.moto.ec2
    [group] = ec2.describe_security_groups(Filters=[{"Name": "tag:ddpctl:cluster", "Values": ["default"]}])[
        "SecurityGroups"
    ]
    rules = group["IpPermissions"]
    ssh = [r for r in rules if r["IpProtocol"] == "tcp"]
    assert [(r["FromPort"], r["ToPort"], [x["CidrIp"] for x in r["IpRanges"]]) for r in ssh] == [(22, 22, [CALLER])]
    inside = [r for r in rules if r["IpProtocol"] == "-1"]
    assert [[p["GroupId"] for p in r["UserIdGroupPairs"]] for r in inside] == [[group["GroupId"]]]
    assert all(not r.get("IpRanges") for r in inside) and len(rules) == 2
    for inst in twin.moto.alive_instances():
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [inst["InstanceId"]]}])
        assert [v["Encrypted"] for v in volumes["Volumes"]] == [True]
    cluster_dir = twin.home / "clusters" / "default"
    for path in cluster_dir.rglob("*"):
        if path.is_file() and not path.name.endswith(".pub"):
            assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    assert_no_credentials_on_nodes(twin)


def assert_no_credentials_on_nodes(twin: TwinEnv) -> None:
    """Neither the controller's AWS key nor its secret is in any node's files or processes."""
    needles = (twin.access_key.encode(), twin.secret.encode())
    for d in node_dirs():
        for path in d.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                assert not any(n in data for n in needles), f"an AWS credential in {path}"
    for node in TwinProcess.nodes():
        pids = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout.split()
        assert pids  # sshd at least
        for pid in pids:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            assert not any(n in environ for n in needles), (
                f"an AWS credential in the environment of pid {pid} on {node}"
            )
            assert b"AWS_" not in environ, f"AWS_ variables in the environment of pid {pid} on {node}"


def test_status_shows_the_running_instances(twin: TwinEnv) -> None:
    doc = json.loads(twin.ok("status", "--json").stdout)
    [cluster] = doc["clusters"]
    assert cluster["status"] == "up"
    assert cluster["live"]["instances"] == {"running": 3} and cluster["live"]["billed_instances"] == 3


def test_check_names_every_link(twin: TwinEnv) -> None:
    doc = json.loads(twin.ok("check", "--json", "--size-mb", "4").stdout)
    pairs = {(r["from"], r["to"]) for r in doc["reachability"] if r["result"] == "ok"}
    assert pairs == {(a, b) for a in ("node0", "node1", "node2") for b in ("node0", "node1", "node2") if a != b}
    assert doc["slowest_link"]["busbw_gbps"] > 0
    assert doc["transport"] == {"node0": "gloo", "node1": "gloo", "node2": "gloo"}  # the twin's CPU nodes


def test_message_passing(twin: TwinEnv) -> None:
    result = twin.ok("run", "message-passing", "--nodes", "3")
    assert "rank 1 received 42.0 from rank 0" in result.stdout and "rank 2 received 42.0 from rank 0" in result.stdout


def test_a_projects_packages_reach_every_instance(twin: TwinEnv, tmp_path: Path) -> None:
    """The project's requirements.txt (its wheel in the project, `--no-index`) on every instance, in
    an environment layered on the image's torch, before the run (issue 37)."""
    from tests.support.wheels import make_project

    script = make_project(tmp_path / "proj", requirements="--no-index\nddpctl-tinypkg==0.1\n")
    result = twin.ok("run", str(script), "--nodes", "3")
    for node in range(3):
        assert f"node{node}: the run's packages (requirements.txt) installed in " in result.stderr
        assert f"rank {node}: tinypkg says hello" in result.stdout


def test_runs_outlive_every_ddpctl_here(twin: TwinEnv, tmp_path: Path) -> None:
    """The run's supervisor is on the head instance: an attached run, then a detached one, each
    with every ddpctl here SIGKILLed once its ranks have started, finish there; `runs`, `logs` and
    the record read afterwards through the head are right."""
    script = tmp_path / "job" / "slow.py"
    script.parent.mkdir()
    script.write_text(SLOW)
    attached = twin.start("run", str(script), "--nodes", "2", "--run-id", "rtwin00001", "-e", "SLEEP_S=8")
    Output(attached).until("started rank", timeout=600)
    attached.send_signal(signal.SIGKILL)
    attached.wait(timeout=30)
    assert ended(twin.env, "rtwin00001") == "succeeded"
    args = ("run", str(script), "--nodes", "2", "--run-id", "rtwin00002", "--detach", "--json", "-e", "SLEEP_S=8")
    detached = json.loads(twin.ok(*args).stdout)
    log = twin.home / "runs" / "rtwin00002" / "output.log"
    deadline = time.monotonic() + 600
    while "started rank" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        assert not (log.parent / "run.json").exists(), (log.parent / "run.json").read_text()  # it ended at once
        time.sleep(0.2)
    os.kill(detached["pid"], signal.SIGKILL)
    for run_id in ("rtwin00001", "rtwin00002"):
        assert ended(twin.env, run_id) == "succeeded"
        logs = twin.ok("logs", run_id).stdout
        assert "done rank 0" in logs and "done rank 1" in logs, logs
        record = json.loads((twin.home / "runs" / run_id / "run.json").read_text())
        assert record["result"]["exit_code"] == 0 and record["cluster"] == "default"


def test_ssh_reaches_each_node(twin: TwinEnv) -> None:
    """`ddpctl ssh NODE -- COMMAND` on EC2 nodes, and plain `ssh -F` with the cluster's ssh_config,
    which names every node (strict host keys from the console output, the cluster's key)."""
    private = {n["name"]: n["host"] for n in twin.state()["nodes"]}  # the address other nodes reach it at
    for node in ("node0", "node1"):
        result = twin.ok("ssh", node, "--", "hostname", "-I")
        assert private[node] in result.stdout.split()
    config = twin.home / "clusters" / "default" / "ssh_config"
    plain = subprocess.run(
        ["ssh", "-F", str(config), "node1", "hostname", "-I"], capture_output=True, text=True, timeout=60
    )
    assert plain.returncode == 0 and private["node1"] in plain.stdout.split(), plain.stderr
    printed = twin.ok("ssh", "--print", "node1").stdout
    assert f"-F {config}" in printed and "StrictHostKeyChecking=yes" in printed


def test_mnist_trains_and_leaves_a_snapshot(twin: TwinEnv) -> None:
    proc = twin.start(
        "run", "mnist", "--nodes", "2", "--", "--epochs", "1", "--log-every", "20", "--data-fraction", "0.3"
    )
    out = Output(proc)
    out.until("step 20 |", timeout=600)  # a short epoch (21 steps): plumbing, not accuracy
    assert_no_credentials_on_nodes(twin)  # the ranks' environments too, while they train
    text = out.finish(timeout=600)
    assert proc.returncode == 0, text
    accuracies = [float(a) for a in re.findall(r"held-out accuracy ([\d.]+)%", text)]
    assert accuracies and accuracies[-1] >= 70.0, text  # one epoch on 30 %: about 80 % (chance is 10 %)
    head = node_dirs()[0]
    assert list((head / "opt" / "ddpctl" / "work").rglob("*mnist*.pt")), "no snapshot on the head node"


def mnist_run(twin: TwinEnv) -> dict:
    return next(r for r in json.loads(twin.ok("runs", "--json").stdout)["runs"] if r["job"] == "mnist")


def test_runs_shows_what_a_run_cost(twin: TwinEnv) -> None:
    run = mnist_run(twin)
    price = json.loads((twin.home / "runs" / run["run_id"] / "options.json").read_text())["node_usd_per_hour"]
    assert price > 0 and run["duration_s"] > 0  # a p3.2xlarge's list price; 2 nodes for the run's duration
    assert abs(run["cost_usd"] - price * 2 * run["duration_s"] / 3600) <= 0.01


def test_download_fetches_a_runs_snapshot_from_the_head_node(twin: TwinEnv, tmp_path: Path) -> None:
    run_id = mnist_run(twin)["run_id"]
    doc = json.loads(twin.ok("download", run_id, "--to", str(tmp_path), "--json").stdout)
    assert doc["source"] == f"default:/opt/ddpctl/work/runs/{run_id}" and doc["dest"] == str(tmp_path / run_id)
    on_head = node_dirs()[0] / "opt" / "ddpctl" / "work" / "runs" / run_id
    assert sorted(p.name for p in (tmp_path / run_id).iterdir()) == sorted(p.name for p in on_head.iterdir())
    snapshot = next(on_head.glob("*mnist*.pt"))
    assert (tmp_path / run_id / snapshot.name).read_bytes() == snapshot.read_bytes()


def test_configure_again_changes_nothing(twin: TwinEnv) -> None:
    doc = json.loads(twin.ok("configure", "--json").stdout)
    assert doc["changed"] == {"node0": 0, "node1": 0, "node2": 0}


def test_down_asks_then_keeps_the_runs_snapshot_and_leaves_nothing(twin: TwinEnv) -> None:
    run_id = mnist_run(twin)["run_id"]
    snapshot = next((node_dirs()[0] / "opt" / "ddpctl" / "work" / "runs" / run_id).glob("*mnist*.pt"))
    on_head = snapshot.read_bytes()  # the node goes with `down`
    refused = twin.ddpctl("down")  # no terminal to ask on
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert (
        "take down aws cluster 'default' (3 node(s)) and delete all it made; run outputs only on the " in refused.stderr
    )
    assert f"run {run_id} (" in refused.stderr and "add --yes to go ahead" in refused.stderr
    assert twin.state()["status"] == "up"
    result = twin.ok("down", "--yes")
    kept = twin.home / "runs" / run_id / "outputs"
    assert f"keeping run {run_id}'s outputs (" in result.stderr and f" in {kept}" in result.stderr
    assert (kept / snapshot.name).read_bytes() == on_head
    assert "nothing of it is left" in result.stderr
    twin.assert_nothing_left("default")
    assert mnist_run(twin)["outputs"] == str(kept)


# ---- the head node's own instance profile ----------------------------------------------------------

#: What a node's botocore finds: its credential chain's source, and who STS says it is.
WHOAMI = """
import boto3
session = boto3.session.Session(region_name="us-east-1")
creds = session.get_credentials()
print(creds.method if creds else "none")
print(session.client("sts").get_caller_identity()["Arn"] if creds else "")
"""


def test_only_the_head_gets_its_roles_credentials(twin: TwinEnv) -> None:
    """--head-instance-profile: the head node's botocore gets the role's short-lived credentials from
    the instance metadata service (IMDSv2; the twin's, named in each node's ~/.aws/config), as an
    instance profile's; a worker gets none. No credential is copied to any node."""
    import tempfile

    import boto3

    iam = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("iam", endpoint_url=twin.proc.url)
    iam.create_role(RoleName="ddpctl-head-role", AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName="ddpctl-head")
    iam.add_role_to_instance_profile(InstanceProfileName="ddpctl-head", RoleName="ddpctl-head-role")
    up = ("up", "--provider", "aws", "--yes", "--nodes", "2", "--name", "c4", "--no-configure")
    twin.ok(*up, "--head-instance-profile", "ddpctl-head")
    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp is the nodes' too; pytest's own is root's alone
    try:
        shared.chmod(0o755)
        (shared / "whoami.py").write_text(WHOAMI)
        (shared / "whoami.py").chmod(0o644)
        python = "/opt/ddpctl/venv/bin/python"
        head = twin.ok("ssh", "node0", "--name", "c4", "--", python, str(shared / "whoami.py")).stdout.split()
        worker = twin.ok("ssh", "node1", "--name", "c4", "--", python, str(shared / "whoami.py")).stdout.split()
    finally:
        shutil.rmtree(shared)
    [instances] = [r for r in twin.state("c4")["resources"] if r["kind"] == "instances"]
    head_id = instances["detail"]["nodes"]["node0"]
    assert head == ["iam-role", f"arn:aws:sts::123456789012:assumed-role/ddpctl-head-role/{head_id}"]
    assert worker == ["none"]
    twin.ok("down", "--name", "c4", "--yes")
    twin.assert_nothing_left("c4")
    iam.remove_role_from_instance_profile(InstanceProfileName="ddpctl-head", RoleName="ddpctl-head-role")
    iam.delete_instance_profile(InstanceProfileName="ddpctl-head")
    iam.delete_role(RoleName="ddpctl-head-role")


# ---- --no-configure, then the printed ansible-playbook command, then ddpctl configure -----------


def test_no_configure_then_by_hand_then_configure(twin: TwinEnv, tmp_path: Path) -> None:
    up = twin.ok("up", "--provider", "aws", "--yes", "--nodes", "2", "--name", "c2", "--no-configure")
    known = (twin.home / "clusters" / "c2" / "known_hosts").read_text().splitlines()
    assert len(known) == 2 * 3  # host keys are collected whether or not site.yml runs
    command = re.search(r"by hand with: (.*)$", up.stderr, re.M).group(1)
    by_hand = subprocess.run(
        command,
        shell=True,
        cwd=tmp_path,
        env=twin.env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert by_hand.returncode == 0, by_hand.stdout[-3000:] + by_hand.stderr
    assert re.search(r"node1\s+: ok=\d+\s+changed=[1-9]", by_hand.stdout)
    doc = json.loads(twin.ok("configure", "--name", "c2", "--json").stdout)
    assert doc["changed"] == {"node0": 0, "node1": 0}  # what ddpctl would have done, exactly
    result = twin.ok("run", "message-passing", "--name", "c2", "--nodes", "2")
    assert "rank 1 received 42.0 from rank 0" in result.stdout
    twin.ok("down", "--name", "c2", "--yes")
    twin.assert_nothing_left("c2")


# ---- crashes and Ctrl-C in the configure step ------------------------------------------------------


def test_crash_during_configure_then_down_leaves_nothing(twin: TwinEnv) -> None:
    proc = twin.start("up", "--provider", "aws", "--yes", "--nodes", "2", "--name", "crash")
    out = Output(proc)
    out.until("Read this node's SSH host key", timeout=600)  # site.yml is under way
    proc.kill()
    proc.wait()
    assert twin.state("crash")["status"] == "configuring"
    result = twin.ok("down", "--name", "crash", "--yes")
    assert "terminating 2 instance(s)" in result.stderr
    deadline = time.monotonic() + 30  # the orphaned play notices its nodes are gone
    while leftover_ansible(twin.home / "clusters" / "crash") and time.monotonic() < deadline:
        time.sleep(0.5)
    twin.assert_nothing_left("crash")


def test_ctrl_c_during_configure_says_how_to_go_on(twin: TwinEnv) -> None:
    proc = twin.start("up", "--provider", "aws", "--yes", "--nodes", "2", "--name", "intr")
    out = Output(proc)
    out.until("Read this node's SSH host key", timeout=600)
    proc.send_signal(signal.SIGINT)
    text = out.finish(timeout=120)
    assert proc.returncode == 130, text
    assert "finish with `ddpctl configure --name intr`, or delete everything with `ddpctl down --name intr`" in text
    assert leftover_ansible(twin.home / "clusters" / "intr") == []  # the play stopped with ddpctl
    doc = json.loads(twin.ok("configure", "--name", "intr", "--json").stdout)  # going on, as the message says
    assert doc["cluster"]["status"] == "up" and doc["cluster"]["nodes"][1]["python"] == "/opt/ddpctl/venv/bin/python"
    twin.ok("down", "--name", "intr", "--yes")
    twin.assert_nothing_left("intr")
