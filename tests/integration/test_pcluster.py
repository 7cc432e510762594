"""The ParallelCluster provider: its configuration, aws-parallelcluster's own schema, and the real
``pcluster`` CLI against the moto server.

``./dev test`` installs aws-parallelcluster into ``.venv-pcluster`` (its own venv: it pins older
attrs/packaging than ddpctl's) and exports ``DDPCTL_PCLUSTER``; Node.js comes with the system packages.

Exercised for real:
- the generated configuration loaded by aws-parallelcluster's ``ClusterSchema`` (offline, in its
  venv), and refused configurations reported as one line naming the field;
- ``pcluster`` against moto: describe-cluster/delete-cluster of a missing cluster (= gone),
  list-clusters, ``create-cluster --dryrun true`` with a moto VPC/subnet/key and a custom AMI;
- ``ddpctl up --provider pcluster``: the network and key pair (the aws provider's code), the final
  configuration file, then a real ``create-cluster``: validation, CDK synthesis with Node.js, the
  template upload to S3, CloudFormation CreateStack; moto's CloudFormation cannot run
  ParallelCluster's template (it answers "Template error: instance of Fn::GetAtt references
  undefined resource HeadNodeHealthAlarm...", and leaves the stack CREATE_IN_PROGRESS), so the
  test checks the one-line error, ``status`` of that stack, and that ``down`` deletes it with
  delete-cluster, waits until it is gone, and deletes the network and key pair;
- a crash after each of ddpctl's own steps, then ``down`` leaving nothing;
- ``describe-cluster-instances`` against moto (it finds instances by ParallelCluster's tags).

With recorded answers (the polling loops; describe-cluster and describe-cluster-instances in the
shapes the real CLI prints): CREATE_COMPLETE or a failure, compute nodes that start over a few
polls, that never start, or that ParallelCluster stops launching (PROTECTED), DELETE_FAILED; and,
through ``ddpctl up`` with a stand-in ``pcluster`` (STANDIN), a fleet that never starts, then
``down``. On the test cluster (node0 as the head node, node1 and node2 as compute nodes reachable
only through it): ``ddpctl check`` on the compute nodes, through the head node. tests/integration/test_slurm.py
has the head node's configure step and a job through sbatch.

Not exercised (no real AWS here): a cluster reaching CREATE_COMPLETE, compute nodes starting, and
a GPU job on such a cluster.

Two moto quirks are worked around through ddpctl's settings (never needed on AWS):
``DDPCTL_PCLUSTER_SUPPRESS_VALIDATORS`` skips the two launch-template validators (moto's dry-run
RunInstances wants an ``ebs`` parameter), and ``DDPCTL_PCLUSTER_S3_BUCKET`` gives a versioned bucket
(ParallelCluster's own bucket gets a TLS-only policy that moto enforces against plain http).
moto has no p3.2xlarge, so those tests use g5.xlarge.

Its pure tests (no process beyond Python) are in tests/unit/test_pcluster.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from tests.support.cli import ddpctl, tree
from tests.support.moto import NEWEST_DLAMI, REGION, SSH_CIDR, Moto
from tests.support.pcluster import _instance, _plan, _resolved
from tests.support.specs import cluster_spec
from tests.support.testbed.cluster import GROUP_VARS, Testbed

MOTO_QUIRKS = "type:HeadNodeLaunchTemplateValidator type:ComputeResourceLaunchTemplateValidator"
SECRET = "ddpctlSecretMarker0123456789abcdefABCDEF"
BUCKET = "ddpctl-pcluster-test"


def test_compute_nodes_ssh_config(tmp_path: Path) -> None:
    """Each compute node through the head node (ProxyJump), each with its own strict known_hosts; a
    ProxyJump of more than one hop is refused in one line (ddpctl follows one)."""
    from ddpctl.infra.hosts.connections import connect
    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.providers.pcluster import compute
    from ddpctl.infra.providers.pcluster.cli import ClusterInstance

    head = Host(
        name="head", address="198.51.100.9", user="ubuntu", key_file="/k/id_ed25519", ssh_config="/k/ssh_config"
    )
    nodes = [ClusterInstance.from_json(_instance("10.0.1.23"))]
    text = compute.ssh_config_text(head, "/k/known_hosts", nodes, tmp_path / "compute_known_hosts")
    assert text.splitlines()[1:] == [
        "Host ip-10-0-1-23",
        "    HostName 10.0.1.23",
        "    ProxyJump head",
        f"    UserKnownHostsFile {tmp_path}/compute_known_hosts",
        "Host head",
        "    HostName 198.51.100.9",
        "    Port 22",
        "    UserKnownHostsFile /k/known_hosts",
        "Host *",
        "    User ubuntu",
        "    IdentityFile /k/id_ed25519",
        "    IdentitiesOnly yes",
        "    StrictHostKeyChecking yes",
        "    GlobalKnownHostsFile /dev/null",
    ]
    config = tmp_path / "ssh_config"
    config.write_text("Host far\n    HostName 10.0.9.9\n    ProxyJump a,b\n")
    with pytest.raises(DdpctlError) as exc:
        connect(Host(name="far", address="far", ssh_config=str(config)))
    assert str(exc.value).startswith("far's jump host a (")  # hops in order (ssh -J a,b): the first one first


def test_help_and_import_load_nothing_heavy() -> None:
    code = (
        "import sys\nfrom ddpctl.main import cli\nimport ddpctl.infra.providers.pcluster\n"
        "sys.argv = ['ddpctl', 'up', '--help']\n"
        "try:\n    cli()\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'pcluster', 'yaml', 'marshmallow')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    assert "pcluster" in out and "DDPCTL_PCLUSTER" in out


# ---- with aws-parallelcluster installed --------------------------------------------------------


@pytest.fixture(scope="session")
def pcluster_exe() -> str:
    """``$DDPCTL_PCLUSTER`` (./dev test sets it), else the repo's .venv-pcluster, else PATH."""
    for candidate in (
        os.environ.get("DDPCTL_PCLUSTER"),
        str(REPO / ".venv-pcluster" / "bin" / "pcluster"),
        shutil.which("pcluster"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("aws-parallelcluster is not installed: ./dev test installs it into .venv-pcluster")


@pytest.fixture(scope="session")
def cdk() -> None:
    """A real create-cluster: ParallelCluster's CDK synthesizes the template with Node.js."""
    if not shutil.which("node"):
        pytest.skip("ParallelCluster's CDK needs Node.js (./dev test installs nodejs as root)")


@pytest.fixture(scope="session")
def install(pcluster_exe: str):
    from ddpctl.infra.providers.pcluster.cli import find_pcluster

    return find_pcluster({"DDPCTL_PCLUSTER": pcluster_exe})


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"nodes": 1, "spot": True, "ami": "ami-0123456789abcdef0"},
        {"settings": "shared+bucket"},
    ],
)
def test_schema_loads_the_generated_config(install, kw: dict[str, Any]) -> None:
    from ddpctl.infra.providers.pcluster import schema
    from ddpctl.infra.providers.pcluster.config import (
        PLACEHOLDER_SUBNET,
        Settings,
        to_yaml,
    )

    if kw.get("settings"):
        kw = {"settings": Settings(shared_gb=50, custom_s3_bucket="my-bucket")}
    plan = _plan(**kw)
    verdict = schema.validate(to_yaml(plan.config(_resolved(PLACEHOLDER_SUBNET))), plan.pcluster_name, install)
    assert verdict.version.startswith("3.") and verdict.queue == "gpu" and verdict.instance_types == ("p3.2xlarge",)


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = config
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    node[last] = value


@pytest.mark.parametrize(
    "path,value,message",
    [
        (
            "Scheduling.SlurmQueues.0.ComputeResources.0.MaxCount",
            0,
            "Scheduling.SlurmQueues[0].ComputeResources[0].MaxCount: Must be greater than or equal to 1.",
        ),
        (
            "Scheduling.SlurmQueues.0.ComputeResources.0.MinCount",
            -1,
            "Scheduling.SlurmQueues[0].ComputeResources[0].MinCount: Must be greater than or equal to 0.",
        ),
        ("HeadNode.Ssh.AllowedIps", "everyone", "HeadNode.Ssh.AllowedIps:"),
        (
            "HeadNode.LocalStorage.RootVolume.Encrypted",
            "yes please",
            "HeadNode.LocalStorage.RootVolume.Encrypted: Not a valid boolean.",
        ),
        ("Scheduling.SlurmQueues.0.CapacityType", "CHEAP", "Scheduling.SlurmQueues[0].CapacityType: Must be one of"),
        ("HeadNode.Networking.SubnetId", "subnet-xyz", "HeadNode.Networking.SubnetId:"),
        ("HeadNode.Bogus", 1, "HeadNode.Bogus: Unknown field."),
    ],
)
def test_schema_refuses_in_one_line(install, path: str, value: Any, message: str) -> None:
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.providers.pcluster import schema
    from ddpctl.infra.providers.pcluster.config import to_yaml

    config = _plan().config(_resolved())
    _set(config, path, value)
    with pytest.raises(UsageError) as exc:
        schema.validate(to_yaml(config), "ddpctl-c1", install)
    line = str(exc.value)
    assert line.startswith("the ParallelCluster configuration is invalid (aws-parallelcluster 3.")
    assert message in line and "\n" not in line


# ---- the pcluster CLI against the moto server ---------------------------------------------------


class PcEnv:
    """One test's ddpctl and pcluster invocations against moto, and what moto held before."""

    def __init__(self, server: Moto, home: Path, tmp: Path, exe: str) -> None:
        import boto3

        self.moto, self.home, self.tmp, self.exe = server, home, tmp, exe
        self.user_home = tmp / "user-home"  # HOME: pcluster must not write ~/.parallelcluster
        self.user_home.mkdir()
        session = boto3.session.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        self.s3 = session.client("s3", endpoint_url=server.url)
        self.cfn = session.client("cloudformation", endpoint_url=server.url)
        self.s3.create_bucket(Bucket=BUCKET)
        self.s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        self.baseline = self.inventory()

    def env(self, **extra: str) -> dict[str, str]:
        env = self.moto.env(
            self.home,
            self.tmp,
            HOME=str(self.user_home),
            DDPCTL_PCLUSTER=self.exe,
            DDPCTL_PCLUSTER_SUPPRESS_VALIDATORS=MOTO_QUIRKS,
            DDPCTL_PCLUSTER_S3_BUCKET=BUCKET,
            AWS_SECRET_ACCESS_KEY=SECRET,
        )
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def run(self, *args: str, timeout: float = 300, **extra: str) -> subprocess.CompletedProcess:
        return ddpctl(*args, env=self.env(**extra), timeout=timeout)

    def ok(self, *args: str, **extra: str) -> subprocess.CompletedProcess:
        result = self.run(*args, **extra)
        assert result.returncode == 0, result.stderr
        return result

    def stacks(self) -> dict[str, str]:
        return {s["StackName"]: s["StackStatus"] for s in self.cfn.list_stacks()["StackSummaries"]}

    def inventory(self) -> dict[str, Any]:
        live = {n for n, s in self.stacks().items() if s != "DELETE_COMPLETE"}
        return {
            **self.moto.inventory(),
            "stacks": live,
            "buckets": {b["Name"] for b in self.s3.list_buckets()["Buckets"]},
        }

    def added(self) -> dict[str, Any]:
        now = self.inventory()
        return {k: now[k] - self.baseline[k] for k in now if now[k] - self.baseline[k]}

    def assert_clean(self) -> None:
        assert self.added() == {}
        assert not (self.home / "clusters" / "c1.json").exists() and not (self.home / "clusters" / "c1").exists()
        assert not (self.user_home / ".parallelcluster").exists()


@pytest.fixture
def pc(moto: Moto, home: Path, tmp_path: Path, pcluster_exe: str) -> PcEnv:
    return PcEnv(moto, home, tmp_path, pcluster_exe)


def _network(server: Moto) -> tuple[str, str]:
    ec2 = server.ec2
    vpc = ec2.create_vpc(CidrBlock="10.123.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.123.1.0/24", AvailabilityZone="us-east-1a")["Subnet"][
        "SubnetId"
    ]
    return vpc, subnet


def test_cli_adapter_against_moto(pc: PcEnv, install, tmp_path: Path) -> None:
    from ddpctl.infra.providers.pcluster.cli import PclusterCli
    from ddpctl.infra.providers.pcluster.config import Resolved, to_yaml

    _, subnet = _network(pc.moto)
    pc.moto.ec2.create_key_pair(KeyName="k1", KeyType="ed25519")
    cli = PclusterCli(install, REGION, tmp_path / "pcluster.log", pc.env())
    assert cli.describe("ddpctl-ghost") is None  # not found = gone
    assert cli.delete("ddpctl-ghost") is False
    config = _plan(instance_type="g5.xlarge", ami=NEWEST_DLAMI).config(
        Resolved(subnet_id=subnet, key_name="k1", ssh_cidr=SSH_CIDR)
    )
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(config))
    ok = cli.create("ddpctl-c1", path, dryrun=True, suppress=tuple(MOTO_QUIRKS.split()))
    assert ok.ok and ok.message == "Request would have succeeded, but DryRun flag is set."
    assert any(w.startswith("CustomAmiTagValidator") for w in ok.warnings)  # a DLAMI is not a pcluster AMI
    refused = cli.create("ddpctl-c1", path, dryrun=True)  # moto's launch-template quirk, reported as such
    assert not refused.ok and "HeadNodeLaunchTemplateValidator" in refused.message and "\n" not in refused.message
    assert (tmp_path / "pcluster.log").stat().st_size > 0  # PCLUSTER_LOG_FILE, not ~/.parallelcluster
    added = pc.added()  # the test's own network and key; nothing of ParallelCluster's
    assert (
        added["subnets"] == {subnet}
        and added["key_pairs"] == {"k1"}
        and "stacks" not in added
        and "instances" not in added
    )


def test_dry_run_through_the_cli_creates_nothing(pc: PcEnv) -> None:
    vpc, subnet = _network(pc.moto)
    pc.baseline = pc.inventory()
    args = (
        "up",
        "--provider",
        "pcluster",
        "--yes",
        "--name",
        "c1",
        "--nodes",
        "2",
        "--instance-type",
        "g5.xlarge",
        "--ami",
        NEWEST_DLAMI,
        "--ssh-cidr",
        SSH_CIDR,
        "--dry-run",
    )
    result = pc.ok(*args, "--subnet-id", subnet, "--vpc-id", vpc)
    out = result.stdout
    assert "ParallelCluster ddpctl-c1 in us-east-1" in out and "2 x g5.xlarge" in out
    assert "check schema: ok (aws-parallelcluster 3." in out
    assert "check create-cluster --dryrun: ok" in out and "Nothing was created." in out
    assert f"SubnetId: {subnet}" in out and "Encrypted: true" in out and "Secured: true" in out
    doc = json.loads(pc.ok(*args, "--json").stdout)  # a new network: the default VPC's subnet stands in
    assert doc["dry_run"] and doc["cluster"]["launcher"] == "sbatch"
    assert doc["pcluster"]["checks"]["create-cluster --dryrun"] == "ok"
    assert doc["pcluster"]["config"]["HeadNode"]["Ssh"]["AllowedIps"] == SSH_CIDR
    assert SECRET not in result.stdout + result.stderr
    pc.assert_clean()
    assert tree(pc.home) == []


def test_real_create_reaches_cloudformation_then_down_leaves_nothing(pc: PcEnv, cdk: None) -> None:
    up = pc.run(
        "up",
        "--provider",
        "pcluster",
        "--yes",
        "--name",
        "c1",
        "--nodes",
        "2",
        "--instance-type",
        "g5.xlarge",
        "--ami",
        NEWEST_DLAMI,
        "--ssh-cidr",
        SSH_CIDR,
        "--no-down-on-failure",
    )
    assert up.returncode == 1, up.stderr
    lines = up.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: pcluster create-cluster failed in us-east-1:"), (
        up.stderr
    )  # moto's CloudFormation
    assert "pcluster create-cluster ddpctl-c1: validating, synthesizing" in up.stderr
    added = pc.added()
    assert (
        len(added["vpcs"]) == len(added["subnets"]) == len(added["internet_gateways"]) == len(added["key_pairs"]) == 1
    )
    assert pc.stacks().get("ddpctl-c1") == "CREATE_IN_PROGRESS"  # CreateStack got the synthesized template

    cluster_dir = pc.home / "clusters" / "c1"
    config = __import__("yaml").safe_load((cluster_dir / "cluster-config.yaml").read_text())
    (subnet,) = added["subnets"]
    (key,) = added["key_pairs"]
    assert config["HeadNode"]["Networking"]["SubnetId"] == subnet and config["HeadNode"]["Ssh"]["KeyName"] == key
    assert config["CustomS3Bucket"] == BUCKET
    vpc = pc.moto.ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]
    assert vpc["MapPublicIpOnLaunch"] is True
    assert pc.moto.ec2.describe_vpc_attribute(VpcId=vpc["VpcId"], Attribute="enableDnsHostnames")["EnableDnsHostnames"][
        "Value"
    ]
    assert stat.S_IMODE((cluster_dir / "id_ed25519").stat().st_mode) == 0o600
    assert (cluster_dir / "pcluster-cli.log").stat().st_size > 0
    for path in pc.home.rglob("*"):  # the state, the config, pcluster's own log
        assert not path.is_file() or SECRET not in path.read_text(errors="replace"), path
    state = json.loads((pc.home / "clusters" / "c1.json").read_text())
    assert state["launcher"] == "sbatch"
    assert {r["kind"]: r["status"] for r in state["resources"]}["cluster"] == "planned"

    status = json.loads(pc.ok("status", "--json").stdout)["clusters"][0]["live"]
    assert status["cluster_status"] == "CREATE_IN_PROGRESS" and status["pcluster_name"] == "ddpctl-c1"
    assert "creating (ParallelCluster: CREATE_IN_PROGRESS" in pc.ok("status", COLUMNS="200").stdout

    down = pc.ok("down", "--yes")
    assert "deleting ddpctl-c1 (CREATE_IN_PROGRESS)" in down.stderr and "is down" in down.stderr
    assert pc.stacks()["ddpctl-c1"] == "DELETE_COMPLETE"
    for result in (up, down):
        assert SECRET not in result.stdout + result.stderr
    pc.assert_clean()
    assert pc.ok("down", "--yes").returncode == 0  # twice is fine


def test_lost_state_file_down_by_name_and_region(pc: PcEnv, cdk: None) -> None:
    """The state home is gone after create-cluster: `down --name --region --provider pcluster` finds
    the ParallelCluster by its name and tag, deletes it, then the network and key pair by tag."""
    up = pc.run(
        "up",
        "--provider",
        "pcluster",
        "--yes",
        "--name",
        "c1",
        "--nodes",
        "2",
        "--instance-type",
        "g5.xlarge",
        "--ami",
        NEWEST_DLAMI,
        "--ssh-cidr",
        SSH_CIDR,
        "--no-down-on-failure",
    )
    assert up.returncode == 1 and pc.stacks().get("ddpctl-c1") == "CREATE_IN_PROGRESS", up.stderr
    lost = ("--home-id", (pc.home / "home-id").read_text().strip())  # the lost home's id: its cluster's tag
    shutil.rmtree(pc.home)
    assert pc.run("down", "--provider", "pcluster").returncode == 2  # only with --name and --region
    # the aws provider's sweep would hit a network in use
    as_aws = pc.run("down", "--name", "c1", "--region", REGION, *lost)
    assert as_aws.returncode == 2 and as_aws.stderr.strip().splitlines()[-1] == (
        f"Error: 'c1' in {REGION} is a ParallelCluster (ddpctl-c1): run `ddpctl down --name c1 --region {REGION} --provider pcluster`"
    )
    assert pc.stacks()["ddpctl-c1"] == "CREATE_IN_PROGRESS" and pc.added()["vpcs"]  # nothing was touched
    # without the lost home's id, the cluster is another state home's: left alone, stack and network
    left = pc.ok("down", "--name", "c1", "--region", REGION, "--provider", "pcluster")
    assert f"ddpctl-c1 in {REGION} belongs to another state home (home id {lost[1]}): left alone" in left.stderr
    assert "left alone: 4 resource(s) of a cluster 'c1'" in left.stderr, left.stderr
    assert pc.stacks()["ddpctl-c1"] == "CREATE_IN_PROGRESS" and pc.added()["vpcs"]
    down = pc.ok("down", "--name", "c1", "--region", REGION, "--provider", "pcluster", *lost)
    assert "no state file for 'c1': looking for ParallelCluster ddpctl-c1" in down.stderr
    assert "deleting ddpctl-c1 (CREATE_IN_PROGRESS)" in down.stderr and "is down" in down.stderr, down.stderr
    assert pc.stacks()["ddpctl-c1"] == "DELETE_COMPLETE"
    pc.assert_clean()
    assert pc.ok("down", "--name", "c1", "--region", REGION, "--provider", "pcluster").returncode == 0  # twice is fine


@pytest.mark.parametrize("step", ["dir", "vpc", "subnet", "key-pair", "config"])
def test_crash_after_each_step_then_down_leaves_nothing(pc: PcEnv, step: str) -> None:
    crashed = pc.run(
        "up",
        "--provider",
        "pcluster",
        "--yes",
        "--name",
        "c1",
        "--nodes",
        "2",
        "--instance-type",
        "g5.xlarge",
        "--ssh-cidr",
        SSH_CIDR,
        DDPCTL_FAULT=f"after:{step}",
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    state = json.loads((pc.home / "clusters" / "c1.json").read_text())
    assert next(r for r in state["resources"] if r["kind"] == step)["status"] == "planned"
    assert "is down" in pc.ok("down", "--yes").stderr
    pc.assert_clean()


#: A stand-in ``pcluster``: answers from ``answers.json`` in $DDPCTL_TEST_PCLUSTER_DIR, each
#: command's answers in order (the last one repeating), every call logged to ``calls.jsonl``.
#: describe-cluster is "not found" before create-cluster and after delete-cluster (one
#: DELETE_IN_PROGRESS first), as ParallelCluster's is; tags "from-config" are the Tags of the
#: configuration create-cluster got, as ParallelCluster puts them on its stack.
STANDIN = r"""
import json, os, sys
args, here = sys.argv[1:], os.environ["DDPCTL_TEST_PCLUSTER_DIR"]
def path(name): return os.path.join(here, name)
with open(path("calls.jsonl"), "a") as f: f.write(json.dumps(args) + "\n")
answers = json.load(open(path("answers.json")))
state = json.load(open(path("state.json"))) if os.path.exists(path("state.json")) else {"counts": {}}
command, name = args[0], args[args.index("--cluster-name") + 1] if "--cluster-name" in args else ""
missing = {"message": f"Cluster '{name}' does not exist or belongs to an incompatible ParallelCluster major version."}
def next_answer(key):
    seq, n = answers.get(key) or [{"message": f"stand-in: no answer recorded for {key}"}], state["counts"].get(key, 0)
    state["counts"][key] = n + 1
    return seq[min(n, len(seq) - 1)]
if command == "create-cluster":
    import yaml
    config = yaml.safe_load(open(args[args.index("--cluster-configuration") + 1]))
    state["tags"], state["created"] = config.get("Tags", []), True
    doc = {"cluster": {"clusterName": name, "clusterStatus": "CREATE_IN_PROGRESS"}}
elif command == "delete-cluster":
    state["deleted"] = state.get("deleted", 0) + 1 if state.get("created") else 0
    doc = {"cluster": {"clusterName": name, "clusterStatus": "DELETE_IN_PROGRESS"}} if state.get("created") else missing
elif command == "describe-cluster":
    if not state.get("created"):
        doc = missing
    elif state.get("deleted"):
        doc = {"clusterName": name, "clusterStatus": "DELETE_IN_PROGRESS", "tags": []} if state["deleted"] == 1 else missing
        state["deleted"] += 1
        state["created"] = state["deleted"] < 3
    else:
        doc = dict(next_answer(command), clusterName=name)
    if doc.get("tags") == "from-config":
        doc["tags"] = [{"key": t["Key"], "value": t["Value"]} for t in state.get("tags", [])]
else:
    doc = next_answer(command)
json.dump(state, open(path("state.json"), "w"))
print(json.dumps(doc, indent=2))
sys.exit(1 if "message" in doc else 0)
"""


class StandIn:
    """A stand-in ``pcluster`` (STANDIN) whose Python is ``python`` (the real install's, for the schema check)."""

    def __init__(self, tmp: Path, python: str, answers: dict[str, list[Any]]) -> None:
        self.dir = tmp / "standin"
        self.dir.mkdir()
        self.exe = self.dir / "pcluster"
        self.exe.write_text(f"#!{python}\n{STANDIN}")
        self.exe.chmod(0o755)
        (self.dir / "answers.json").write_text(json.dumps(answers))

    @property
    def env(self) -> dict[str, str]:
        return {"DDPCTL_PCLUSTER": str(self.exe), "DDPCTL_TEST_PCLUSTER_DIR": str(self.dir)}

    def calls(self) -> list[list[str]]:
        path = self.dir / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_describe_cluster_instances_pages(tmp_path: Path) -> None:
    """Every page (nextToken) of describe-cluster-instances; an error answer is one line."""
    from ddpctl.infra.providers.pcluster.cli import Install, PclusterCli, PclusterError

    first = {"instances": [_instance("10.77.0.11"), _instance("10.77.0.12", "pending")], "nextToken": "page-2"}
    standin = StandIn(
        tmp_path,
        sys.executable,
        {
            "describe-cluster-instances": [
                first,
                {"instances": [_instance("10.77.0.13")]},
                {"message": "Bad Request: Failed to retrieve cluster instances. Throttling"},
            ]
        },
    )
    cli = PclusterCli(
        Install(str(standin.exe), sys.executable), REGION, tmp_path / "pc.log", {**os.environ, **standin.env}
    )
    nodes = cli.compute_instances("ddpctl-c1")
    assert [(n.private_ip, n.state) for n in nodes] == [
        ("10.77.0.11", "running"),
        ("10.77.0.12", "pending"),
        ("10.77.0.13", "running"),
    ]
    base = ["describe-cluster-instances", "--cluster-name", "ddpctl-c1", "--node-type", "ComputeNode"]
    assert standin.calls() == [[*base, "--region", REGION], [*base, "--next-token", "page-2", "--region", REGION]]
    with pytest.raises(PclusterError) as exc:
        cli.compute_instances("ddpctl-c1")
    assert (
        str(exc.value)
        == "pcluster describe-cluster-instances failed in us-east-1: Bad Request: Failed to retrieve cluster instances. Throttling"
    )


def test_describe_cluster_instances_against_moto(pc: PcEnv, install, tmp_path: Path) -> None:
    """The real CLI's describe-cluster-instances: instances found by ParallelCluster's tags."""
    from ddpctl.infra.providers.pcluster import compute
    from ddpctl.infra.providers.pcluster.cli import PclusterCli

    def launch(node_type: str, count: int, queue: str = "") -> list[str]:
        tags = [
            {"Key": "parallelcluster:cluster-name", "Value": "ddpctl-c1"},
            {"Key": "parallelcluster:node-type", "Value": node_type},
        ]
        tags += [{"Key": "parallelcluster:queue-name", "Value": queue}] if queue else []
        made = pc.moto.ec2.run_instances(
            ImageId=NEWEST_DLAMI,
            InstanceType="g5.xlarge",
            MinCount=count,
            MaxCount=count,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        return sorted(i["InstanceId"] for i in made["Instances"])

    launch("HeadNode", 1)
    gpu, cpu = launch("Compute", 2, "gpu"), launch("Compute", 1, "cpu")
    cli = PclusterCli(install, REGION, tmp_path / "pc.log", pc.env())
    nodes = cli.compute_instances("ddpctl-c1")
    assert sorted(n.instance_id for n in nodes) == sorted(gpu + cpu)
    assert {n.node_type for n in nodes} == {"ComputeNode"} and all(n.private_ip and n.launch_time for n in nodes)
    assert sorted(n.instance_id for n in compute.running(nodes)) == gpu
    pc.moto.ec2.terminate_instances(InstanceIds=gpu[:1])  # gone from the list, as on AWS
    assert sorted(n.instance_id for n in compute.running(cli.compute_instances("ddpctl-c1"))) == gpu[1:]
    assert cli.compute_instances("ddpctl-other") == []


@pytest.mark.parametrize("keep", [True, False])
def test_compute_fleet_that_never_starts(pc: PcEnv, install, keep: bool) -> None:
    """`ddpctl up` through a stand-in pcluster whose cluster completes but whose compute nodes stay
    pending: the wait ends with one line (what to check, `ddpctl down`), no traceback, and the
    cluster is deleted, by `ddpctl down` (--no-down-on-failure) or by up itself."""
    complete = {
        "clusterStatus": "CREATE_COMPLETE",
        "cloudFormationStackStatus": "CREATE_COMPLETE",
        "computeFleetStatus": "RUNNING",
        "tags": "from-config",
        "headNode": {"instanceId": "i-0head", "state": "running", "privateIpAddress": "10.0.0.10"},
    }
    pending = {"instances": [_instance("10.0.0.21", "pending"), _instance("10.0.0.22", "pending")]}
    standin = StandIn(
        pc.tmp,
        install.python,
        {
            "describe-cluster": [{"clusterStatus": "CREATE_IN_PROGRESS", "tags": "from-config"}, complete],
            "describe-cluster-instances": [{"instances": []}, pending],
        },
    )
    extra = {**standin.env, "DDPCTL_PCLUSTER_POLL_S": "0.05", "DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S": "1"}
    up = pc.run(
        "up",
        "--provider",
        "pcluster",
        "--yes",
        "--name",
        "c1",
        "--nodes",
        "2",
        "--instance-type",
        "g5.xlarge",
        "--ssh-cidr",
        SSH_CIDR,
        *(["--no-down-on-failure"] if keep else []),
        **extra,
    )
    assert up.returncode == 1, up.stderr
    assert "Traceback" not in up.stderr
    assert "ddpctl-c1: CREATE_IN_PROGRESS" in up.stderr
    assert "ddpctl-c1: compute nodes 0 of 2 running (0 s; waiting up to 1 s)" in up.stderr
    assert "ddpctl-c1: compute nodes 0 of 2 running (2 pending) (" in up.stderr
    assert up.stderr.strip().splitlines()[-1] == (
        "Error: the compute nodes of ddpctl-c1 did not all start in 1 s (0 of 2 running (2 pending)): check the vCPU "
        "quota 'Running On-Demand G and VT instances' (L-DB2E81BA) in us-east-1, capacity for g5.xlarge in the subnet's "
        "zone, and /var/log/parallelcluster/clustermgtd and slurm_resume.log on the head node; the cluster is billed "
        "until `ddpctl down --name c1` deletes it"
    )
    assert standin.calls()[1][:3] == ["create-cluster", "--cluster-name", "ddpctl-c1"]  # after the name check
    if keep:
        assert "kept what was made (--no-down-on-failure)" in up.stderr
        state = json.loads((pc.home / "clusters" / "c1.json").read_text())
        assert {r["kind"]: r["status"] for r in state["resources"]}["cluster"] == "created"
        assert pc.added()["vpcs"]
        down = pc.ok("down", "--yes", **extra)
    else:
        down = up
    assert "deleting ddpctl-c1 (CREATE_COMPLETE)" in down.stderr and "is down" in down.stderr, down.stderr
    assert [c[0] for c in standin.calls()].count("delete-cluster") == 1
    pc.assert_clean()


def test_missing_pcluster_is_one_line(pc: PcEnv) -> None:
    args = ("up", "--provider", "pcluster", "--name", "c1", "--ssh-cidr", SSH_CIDR, "--dry-run")
    bare_path = "/usr/bin:/bin"
    assert not shutil.which("pcluster", path=bare_path)
    missing = pc.run(*args, DDPCTL_PCLUSTER=None, PATH=bare_path)  # type: ignore[arg-type]
    lines = missing.stderr.strip().splitlines()
    assert missing.returncode == 1 and len(lines) == 1, missing.stderr
    assert "the pcluster CLI (aws-parallelcluster) is not installed" in lines[0] and "pipx install" in lines[0]
    wrong = pc.run(*args, DDPCTL_PCLUSTER=str(pc.tmp / "nowhere" / "pcluster"))
    assert wrong.returncode == 2 and "is not an executable pcluster" in wrong.stderr.strip().splitlines()[-1]
    up = pc.run(*args[:-1], "--yes", DDPCTL_PCLUSTER=None, PATH=bare_path)  # type: ignore[arg-type]
    assert up.returncode == 1 and "not installed" in up.stderr
    pc.assert_clean()
    assert tree(pc.home) == []


# ---- `ddpctl check` on the compute nodes, through the head node, on the test cluster -----------


class Console:
    """EC2's console output of the head node, as cloud-init prints it: the test node's host key."""

    def __init__(self, testbed: Testbed, address: str) -> None:
        rows = [
            line.split()[1:3]
            for line in testbed.known_hosts.read_text().splitlines()
            if address in line.split()[0].split(",")
        ]
        self.text = "\n".join(
            ["-----BEGIN SSH HOST KEY KEYS-----", *(" ".join(r) for r in rows), "-----END SSH HOST KEY KEYS-----"]
        )

    def console_output(self, instance_id: str) -> str:
        return self.text


@pytest.fixture
def bastion(testbed: Testbed) -> Iterator[Testbed]:
    """The test cluster behind its head node: from here only node0 answers; node1 and node2 are
    reachable from node0 alone, as a ParallelCluster's compute nodes are (../shared/testbed.md)."""
    with testbed.behind_bastion():
        yield testbed


@pytest.mark.slow
def test_check_reaches_the_compute_nodes_through_the_head(bastion: Testbed, tmp_path: Path) -> None:
    """`ddpctl check` on a ParallelCluster: node0 stands for the head node (recorded and configured
    as `up` does once CREATE_COMPLETE), node1 and node2 for the compute nodes that a (stand-in)
    describe-cluster-instances lists, which this machine cannot reach but through node0. Their host
    keys are read on node0 with ssh-keyscan; the links between them are checked over SSH through
    node0, strictly."""
    from ddpctl.infra.hosts.connections import connect
    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.model.state import ClusterPhase
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.pcluster.cli import ClusterInfo, HeadNode
    from ddpctl.infra.providers.pcluster.provider import PclusterProvider
    from ddpctl.infra.providers.pcluster.up import Up as _Up

    testbed = bastion
    direct = subprocess.run(
        ["ssh", "-F", str(testbed.ssh_config), "node1", "true"], capture_output=True, text=True, timeout=30
    )
    assert direct.returncode != 0  # the topology is honest: no way to node1 but through node0
    home, shared_home = tmp_path / "home", tmp_path / "home-ubuntu"  # the head node's /home/ubuntu, NFS-shared
    store = StateStore(home)
    spec = cluster_spec(
        name="pc",
        provider="pcluster",
        nodes=2,
        options={"region": REGION, "ssh_user": "root"},
        playbook_vars={
            **GROUP_VARS,
            "ddpctl_node_dir": str(shared_home / "ddpctl"),
            "ansible_python_interpreter": "/usr/bin/python3",
        },
    )
    provider = PclusterProvider(caller_address=lambda: "203.0.113.9", env={})
    state = provider.plan(spec, store)
    plan = provider.pcluster_plan(state, store)
    Path(plan.aws.cluster_dir).mkdir(parents=True, mode=0o700)
    shutil.copy(testbed.key, plan.aws.key_path)  # the cluster's key, which the test nodes trust
    head = HeadNode("i-0123456789abcdef0", "running", "", "10.77.0.10", "t3.large")
    info = ClusterInfo(
        name=plan.pcluster_name,
        status="CREATE_COMPLETE",
        stack_status="CREATE_COMPLETE",
        fleet_status="RUNNING",
        head=head,
    )
    said = _Up(
        state, store, lambda line: None, Console(testbed, "10.77.0.10"), plan, None, provider, provider.env
    ).finish(info)
    assert said.startswith("pcluster cluster 'pc' is up: head node 10.77.0.10")
    state.status = ClusterPhase.UP  # what Provider.up records once the steps are done
    store.save(state)

    ips = [ip for _, ip in testbed.nodes[1:]]
    listed = {"instances": [_instance(ips[1]), _instance("10.77.0.13", "pending"), _instance(ips[0])]}
    ghost = {"instances": [_instance(ips[0]), _instance("10.77.0.13")]}  # "running", but no such node
    standin = StandIn(tmp_path, sys.executable, {"describe-cluster-instances": [listed, listed, listed, ghost]})
    env = {**os.environ, "DDPCTL_HOME": str(home), "ANSIBLE_HOME": str(tmp_path / "ansible-home"), **standin.env}
    # the health part left out: the compute nodes' GPU count comes from the instance type (1 GPU), and
    # these stand-in nodes have no nvidia-smi (health is tested in test_check_health)
    result = ddpctl("check", "--json", "--no-health", "--size-mb", "4", env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    names = ["ip-10-77-0-11", "ip-10-77-0-12"]
    assert doc["ok"] is True and {(r["from"], r["to"], r["result"]) for r in doc["reachability"]} == {
        (names[0], names[1], "ok"),
        (names[1], names[0], "ok"),
    }
    assert [(b["a"], b["b"]) for b in doc["bandwidth"]] == [tuple(names)] and doc["bandwidth"][0]["busbw_gbps"] > 0
    assert (
        "2 compute node(s) running (10.77.0.11, 10.77.0.12): reaching them through the head node 10.77.0.10"
        in result.stderr
    )
    cluster_dir = Path(plan.aws.cluster_dir)
    scanned = {tuple(line.split()) for line in (cluster_dir / "compute_known_hosts").read_text().splitlines()}
    expected = {
        (ip, *line.split()[1:3])
        for line in testbed.known_hosts.read_text().splitlines()
        for ip in ips
        if ip in line.split()[0].split(",")
    }
    assert expected and expected <= scanned  # the nodes' own keys, read on node0
    ssh_config = cluster_dir / "compute_ssh_config"
    plain = subprocess.run(
        ["ssh", "-F", str(ssh_config), names[0], "hostname"], capture_output=True, text=True, timeout=30
    )
    assert plain.returncode == 0 and plain.stdout.strip() == "node1", plain.stderr  # the file works for OpenSSH too
    text = ddpctl("check", "--no-bandwidth", "--no-health", env=env, timeout=120)
    assert text.returncode == 0 and f"{names[0]} <-> {names[1]}" in text.stdout, text.stderr
    # `ddpctl ssh` opens a compute node too, through the head, as check names it (the recorded head alone asks
    # describe-cluster-instances nothing)
    on_compute = ddpctl("ssh", names[1], "--", "hostname", env=env, timeout=120)
    assert on_compute.returncode == 0 and on_compute.stdout.strip() == "node2", on_compute.stderr
    assert ddpctl("ssh", "--", "hostname", env=env, timeout=60).stdout.strip() == "node0"

    # strict through the jump: a compute node's key that is not the one read on node0 is refused
    (cluster_dir / "compute_known_hosts").write_text(
        "".join(f"{ip} {Console(testbed, ips[1]).text.splitlines()[1]}\n" for ip in ips)
    )
    with pytest.raises(DdpctlError) as exc:
        connect(Host(name=names[0], address=names[0], ssh_config=str(ssh_config)), timeout=10)
    assert str(exc.value).startswith(f"{names[0]} (root@10.77.0.11:22): ") and "\n" not in str(exc.value)
    ghosted = ddpctl("check", "--no-bandwidth", env=env, timeout=120)
    assert ghosted.returncode == 1 and "Traceback" not in ghosted.stderr
    assert ghosted.stderr.strip().splitlines()[-1] == (
        "Error: the head node could not read the SSH host key of 10.77.0.13 (ssh-keyscan: no answer in 5 s): "
        "are those compute nodes up, with sshd running?"
    ), ghosted.stderr
    store.delete("pc")  # `down` would delete the ParallelCluster: there is none
