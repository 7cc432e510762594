"""Spot that recovers, on the EC2 twin (tests/support/testbed/twin.py): a `--spot` cluster's instance
taken back by EC2 in the middle of an elastic run is replaced, and the run finishes with every node,
first from this machine (the run supervised here); then, the head having its own instance profile,
by the run's supervisor on the head with every ddpctl here killed, in the same run as a node lost
whose machine, still running, is unhealthy (issue 38: a stand-in nvidia-smi on it reports
uncorrected ECC errors), its instance terminated.

EC2 taking a spot instance back is modelled by a TerminateInstances that ddpctl did not send (through
the twin, as the AWS console or an interruption would): moto marks the instance terminated and the
twin takes its host down (its processes killed, its connections closed). What the twin cannot show:
the 2 minutes' notice on the node (the twin's metadata service has no spot notice) and real spot
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

    the_head_replaces_a_node_with_this_machine_gone(twin, tmp_path)
    twin.ok("down", "--yes", "--name", "spot")
    twin.assert_nothing_left("spot")
    head_profile(twin, "ddpctl-head", remove=True)


def the_head_replaces_a_node_with_this_machine_gone(twin: TwinEnv, tmp_path: Path) -> None:
    """The cluster's head has its own instance profile (and ddpctl's environment, the head_controller
    role's: baked on the twin): an elastic run is supervised there (``launcher.choose``), every ddpctl
    here is killed once its ranks run, then node1's processes are killed on a machine whose GPU reports
    ECC errors and EC2 takes node2's instance back. The head replaces both by itself, one after the
    other (``runs/head_replace.py``: node1's health asked over the cluster's SSH, its instance
    terminated; signed with the role's credentials from the metadata service, no credential on the
    node), copies the project there and starts them again: the run ends with 3 nodes. `runs` then
    brings the record here and the new instances into the cluster's state (``adopt``): `ssh` reaches
    each at its new address, with its host key."""
    before = twin.state("spot")
    old = {node: instance_of(twin, node) for node in ("node1", "node2")}
    old_hosts = {n["name"]: n["host"] for n in before["nodes"]}
    sick_gpu(before["nodes"][1]["host"])
    job = write_rounds(tmp_path / "third")
    args = ("--name", "spot", "--nodes", "1:3", "--run-id", "rspothead1", "-e", "DDPCTL_COLLECTIVE_TIMEOUT_S=15")
    args += ("--max-restarts", "8")  # two losses, each a failure on the head's rank, whenever each is seen
    proc = twin.start("run", str(job), *args)
    try:
        Output(proc).until("round 0: 3 ranks", timeout=300)
        proc.send_signal(signal.SIGKILL)  # this machine gone: the run goes on on the head
        proc.wait(timeout=30)
    finally:
        proc.kill()
    deadline = time.monotonic() + 60
    while not (procs := node_processes("rspothead1", "node1")) and time.monotonic() < deadline:
        time.sleep(0.2)
    for each in procs:  # its agent and rank, as a GPU fault would take them
        each.send_signal(signal.SIGKILL)
    twin.moto.ec2.terminate_instances(InstanceIds=[old["node2"]])  # EC2 takes node2's instance back
    assert ended(twin.env, "rspothead1", timeout=1200) == "succeeded"
    text = twin.ok("logs", "rspothead1").stdout
    reason = "GPU 0: 2 uncorrected ECC error(s) since the driver loaded"
    assert f"node1: unhealthy: {reason}: terminating its instance {old['node1']}, launching a new one" in text, text
    assert f"node2: EC2 took its spot instance back (its instance {old['node2']} is terminated)" in text, text
    assert "node1 started again" in text and "node2 started again" in text and "done: 3 ranks" in text, text
    alive = {i["InstanceId"]: i for i in twin.moto.alive_instances()}
    nodes = {n["name"]: n for n in twin.state("spot")["nodes"]}
    for node in ("node1", "node2"):
        new_id = instance_of(twin, node)  # recorded here by `runs`
        assert new_id != old[node] and new_id in alive and old[node] not in alive
        assert alive[new_id]["InstanceLifecycle"] == "spot"
        [instances] = [r for r in twin.state("spot")["resources"] if r["kind"] == "instances"]
        assert old[node] not in instances["detail"]["ids"] and new_id in instances["detail"]["ids"]
        assert nodes[node]["host"] == alive[new_id]["PrivateIpAddress"] != old_hosts[node]
        assert twin.ok("ssh", node, "--name", "spot", "--", "hostname").stdout.strip() == node
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


def sick_gpu(host: str) -> None:
    """The twin's node at ``host``: a stand-in nvidia-smi that reports 2 uncorrected ECC errors on GPU 0,
    first on PATH for its SSH sessions (~/.bashrc)."""
    slot = int(host.rsplit(".", 1)[1]) - twin_hosts.FIRST_HOST
    home = twin_hosts.testbed_dir() / "nodes" / f"ec2-{slot}" / "home" / "ubuntu"
    install(home / "bin", [gpu(0, ecc=2)], [])
    (home / ".bashrc").write_text('PATH="$HOME/bin:$PATH"\n')


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
