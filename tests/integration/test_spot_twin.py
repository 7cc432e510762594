"""Spot that recovers, on the EC2 twin (tests/support/testbed/twin.py): a `--spot` cluster's instance
taken back by EC2 in the middle of an elastic run is replaced, and the run finishes with every node;
so is a node lost from the run whose machine, still running, is unhealthy (issue 38: a stand-in
nvidia-smi on it reports uncorrected ECC errors), its instance terminated.

EC2 taking a spot instance back is modelled by a TerminateInstances that ddpctl did not send (through
the twin, as the AWS console or an interruption would): moto marks the instance terminated and the
twin takes its host down (its processes killed, its connections closed). What the twin cannot show:
the 2 minutes' notice on the node (there is no instance metadata service behind it) and real spot
capacity (moto launches any spot request at once). The planning is unit-tested in
tests/unit/test_spot_plan.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil

from ddpctl.infra.tools.procs import NODE_KEY, RUN_KEY, find_tagged
from tests.support.cli import Output, ended, start_ddpctl
from tests.support.jobs import write_rounds
from tests.support.sick_gpus import gpu, install
from tests.support.testbed import twin as twin_hosts
from tests.support.twin_env import TwinEnv


def test_a_spot_instance_taken_back_or_unhealthy_is_replaced_and_the_run_takes_it_back(
    twin: TwinEnv, tmp_path: Path
) -> None:
    head_profile(twin, "ddpctl-head")
    up = ("up", "--provider", "aws", "--yes", "--nodes", "3", "--name", "spot", "--spot")
    twin.ok(*up, "--head-instance-profile", "ddpctl-head")
    before = twin.state("spot")
    [instances] = [r for r in before["resources"] if r["kind"] == "instances"]
    old_id, old_host = instances["detail"]["nodes"]["node2"], before["nodes"][2]["host"]
    job = write_rounds(tmp_path)
    args = ("run", str(job), "--name", "spot", "--nodes", "2:3", "-e", "DDPCTL_COLLECTIVE_TIMEOUT_S=15")
    proc = start_ddpctl(*args, env=HERE | twin.env, stdin=subprocess.DEVNULL)  # replaced from this machine
    try:
        out = Output(proc)
        out.until("round 0: 3 ranks", timeout=300)
        twin.moto.ec2.terminate_instances(InstanceIds=[old_id])  # EC2 takes node2's instance back
        text = out.finish(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, text
    assert "node2 lost" in text and "the run goes on with 2 node(s)" in text
    assert f"node2: EC2 took its spot instance back (its instance {old_id} is terminated)" in text
    assert "configuring 1 node(s)" in text  # site.yml limited to the new instance
    assert "node2 started again" in text
    assert "done: 3 ranks" in text  # the job ended with all three nodes

    doc = json.loads(twin.ok("status", "--json").stdout)
    [cluster] = doc["clusters"]
    assert cluster["live"]["instances"] == {"running": 3}  # the replacement, billed; the old one gone
    [instances] = [r for r in cluster["resources"] if r["kind"] == "instances"]
    new_id = instances["detail"]["nodes"]["node2"]
    assert new_id != old_id and old_id not in instances["detail"]["ids"] and new_id in instances["detail"]["ids"]
    assert instances["detail"]["replacing"] == {}
    node2 = cluster["nodes"][2]
    assert node2["host"] != old_host and node2["python"] == "/opt/ddpctl/venv/bin/python"
    [described] = [i for i in twin.moto.alive_instances() if i["InstanceId"] == new_id]
    assert described["InstanceLifecycle"] == "spot" and described["SubnetId"] == instances_subnet(twin, old_id)
    known = (twin.home / "clusters" / "spot" / "known_hosts").read_text()
    assert old_host not in known and node2["host"] in known and len(known.splitlines()) == 3 * 3

    unhealthy_node_is_replaced(twin, tmp_path)
    the_head_replaces_a_node_with_this_machine_gone(twin, tmp_path)
    twin.ok("down", "--yes", "--name", "spot")
    twin.assert_nothing_left("spot")
    head_profile(twin, "ddpctl-head", remove=True)


def unhealthy_node_is_replaced(twin: TwinEnv, tmp_path: Path) -> None:
    """node1's processes killed mid-run (its ranks crashed on a GPU gone bad), its machine still running
    with a GPU whose ECC errors nvidia-smi reports: before it is started again, the health query names
    it unhealthy, its instance is terminated and a new one takes its place; the run ends with 3 nodes."""
    before = twin.state("spot")
    [instances] = [r for r in before["resources"] if r["kind"] == "instances"]
    old_id = instances["detail"]["nodes"]["node1"]
    slot = int(before["nodes"][1]["host"].rsplit(".", 1)[1]) - twin_hosts.FIRST_HOST
    home = twin_hosts.testbed_dir() / "nodes" / f"ec2-{slot}"
    home = home / "home" / "ubuntu"
    install(home / "bin", [gpu(0, ecc=2)], [])  # first on PATH for its SSH sessions (~/.bashrc)
    (home / ".bashrc").write_text('PATH="$HOME/bin:$PATH"\n')
    job = write_rounds(tmp_path / "second")
    args = ("--name", "spot", "--nodes", "2:3", "--run-id", "rspotsick1", "-e", "DDPCTL_COLLECTIVE_TIMEOUT_S=15")
    proc = start_ddpctl("run", str(job), *args, env=HERE | twin.env, stdin=subprocess.DEVNULL)  # judged here
    try:
        out = Output(proc)
        out.until("round 0: 3 ranks", timeout=300)
        deadline = time.monotonic() + 60
        while not (procs := node_processes("rspotsick1", "node1")) and time.monotonic() < deadline:
            time.sleep(0.2)
        for each in procs:  # its agent and rank, as a GPU fault would take them
            each.send_signal(signal.SIGKILL)
        text = out.finish(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, text
    assert "node1 lost" in text
    reason = "GPU 0: 2 uncorrected ECC error(s) since the driver loaded"
    assert f"node1: unhealthy: {reason}: terminating its instance {old_id}, launching a new one" in text
    assert "node1 started again" in text and "done: 3 ranks" in text
    [instances] = [r for r in twin.state("spot")["resources"] if r["kind"] == "instances"]
    assert instances["detail"]["nodes"]["node1"] != old_id and old_id not in instances["detail"]["ids"]
    assert old_id not in [i["InstanceId"] for i in twin.moto.alive_instances()]


def the_head_replaces_a_node_with_this_machine_gone(twin: TwinEnv, tmp_path: Path) -> None:
    """The cluster's head has its own instance profile (and ddpctl's environment, the head_controller
    role's: baked on the twin): an elastic run is supervised there (``launcher.choose``), every ddpctl
    here is killed once its ranks run, then EC2 takes node2's instance back. The head replaces it by
    itself (``head_replace.py``, signed with the role's credentials from the metadata service; no
    credential on the node), copies the project there and starts it again: the run ends with 3 nodes.
    `runs` then brings the record here and the new instance into the cluster's state (``adopt``): `ssh`
    reaches node2 at its new address, with its host key."""
    old_id, old_host = instance_of(twin, "node2"), twin.state("spot")["nodes"][2]["host"]
    job = write_rounds(tmp_path / "third")
    args = ("--name", "spot", "--nodes", "2:3", "--run-id", "rspothead1", "-e", "DDPCTL_COLLECTIVE_TIMEOUT_S=15")
    proc = twin.start("run", str(job), *args)
    try:
        Output(proc).until("round 0: 3 ranks", timeout=300)
        proc.send_signal(signal.SIGKILL)  # this machine gone: the run goes on on the head
        proc.wait(timeout=30)
    finally:
        proc.kill()
    twin.moto.ec2.terminate_instances(InstanceIds=[old_id])  # EC2 takes node2's instance back
    assert ended(twin.env, "rspothead1", timeout=900) == "succeeded"
    text = twin.ok("logs", "rspothead1").stdout
    assert f"node2: EC2 took its spot instance back (its instance {old_id} is terminated)" in text, text
    assert "configuring 1 node(s)" in text and "node2 started again" in text and "done: 3 ranks" in text, text
    new_id = instance_of(twin, "node2")  # recorded here by `runs`
    alive = {i["InstanceId"]: i for i in twin.moto.alive_instances()}
    assert new_id != old_id and new_id in alive and old_id not in alive
    assert alive[new_id]["InstanceLifecycle"] == "spot"
    node2 = twin.state("spot")["nodes"][2]
    assert node2["host"] == alive[new_id]["PrivateIpAddress"] != old_host
    assert twin.ok("ssh", "node2", "--name", "spot", "--", "hostname").stdout.strip() == "node2"
    python = twin.state("spot")["nodes"][0]["controller"]
    assert python == "/opt/ddpctl/controller/bin/python"  # the head_controller role's venv, as configure found it
    who = twin.ok("ssh", "node0", "--name", "spot", "--", python, "-c", CREDENTIALS).stdout.split()
    assert who == ["iam-role"]  # what the head signs with: its role's credentials, no key on the node


CREDENTIALS = "import boto3; c = boto3.session.Session().get_credentials(); print(c.method if c else 'none')"


#: the run supervised by this machine's ddpctl (``launcher.SUPERVISOR_ENV``), which replaces lost nodes and
#: judges their health with this machine's credentials
HERE = {"DDPCTL_SUPERVISOR": "here"}


def head_profile(twin: TwinEnv, name: str, *, remove: bool = False) -> None:
    """An instance profile (and its role) in the twin's IAM for the head; ``remove``: taken away again."""
    import boto3

    iam = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("iam", endpoint_url=twin.proc.url)
    role = f"{name}-role"
    if remove:
        iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role)
        iam.delete_instance_profile(InstanceProfileName=name)
        iam.delete_role(RoleName=role)
        return
    iam.create_role(RoleName=role, AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName=name)
    iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role)


def instance_of(twin: TwinEnv, node: str) -> str:
    [instances] = [r for r in twin.state("spot")["resources"] if r["kind"] == "instances"]
    return instances["detail"]["nodes"][node]


def instances_subnet(env: TwinEnv, instance_id: str) -> str:
    """The subnet EC2 says an instance (terminated or not) was in."""
    reservations = env.moto.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["SubnetId"]


def node_processes(run_id: str, node: str) -> list[psutil.Process]:
    """The run's processes on ``node`` (its run id and node name both: a local run beside this test has
    nodes named node1 too)."""
    found = []
    for each in find_tagged(RUN_KEY, run_id):
        try:
            if each.environ().get(NODE_KEY) == node:
                found.append(each)
        except psutil.Error:
            pass
    return found
