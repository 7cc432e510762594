"""The AWS provider against a real EC2 API server: moto in server mode, on a loopback port.

ddpctl runs as a subprocess with ``AWS_ENDPOINT_URL`` pointing at the server and fake
credentials; nothing in ddpctl is patched. The tests check what exists by describing the server's
resources, and compare with what a freshly reset server holds (its default VPC, subnets, security
group...), so "nothing left" means nothing of any kind, tagged or not.

Exercised for real (moto 5.2): VPC, subnet, internet gateway + route, security group and its
rules, ImportKeyPair, RunInstances (one call, MinCount = MaxCount, tags on instance, volume and
ENI, IMDSv2, encrypted gp3 root volume, spot market options), the instance_running and
instance_terminated waiters, TerminateInstances, DryRun (moto ignores it for CreateVpc: ddpctl
deletes what such an endpoint creates), describe_images by owner and name (a realistic list of
Deep Learning AMIs and Canonical Ubuntu images seeded with MOTO_AMIS_PATH), SSM ParameterNotFound
-> fallback (moto has no /aws/service parameters; the SSM path itself is tested with botocore's
Stubber), describe_instance_types (moto lacks
p3.2xlarge: ddpctl's table is used), Service Quotas "not available" -> quota unknown, credential
errors (moto's auth switched on with /moto-api/reset-auth), an IAM instance profile (GetInstanceProfile,
then RunInstances' IamInstanceProfile, seen in describe_instances).

Not exercised, and why:
- placement groups: moto does not implement them (HTTP 500); the tests check ddpctl goes on
  without one and that `down` copes. Creating/deleting a real one is untested.
- ClientToken idempotency: moto ignores ClientToken (a retried RunInstances launches again);
  ddpctl also reconciles by tag before launching, which is tested only in the ordinary path.
- InsufficientInstanceCapacity and a low vCPU quota: moto has neither; a test-only botocore hook
  inside ddpctl (DDPCTL_FAULT, see infra/providers/aws/faults.py) answers instead of the server.
- configuring the nodes (site.yml over SSH): moto's instances are not hosts, so every `up` here
  passes --no-configure; the configure step, runs and checks on the instances are tested on the
  EC2 twin, where every instance is a host (tests/integration/test_aws_twin.py).
- DependencyViolation while ENIs linger after termination (moto frees them at once).
- the instance profile on every node: moto associates it with the first instance of a RunInstances
  call only, so the test checks that one.

Its pure tests (no process beyond Python) are in tests/unit/test_aws.py.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import aws_calls
from tests.support.aws_env import CONFIGURED_UP, UP, Env, error_line, line_with, only_line
from tests.support.cli import ddpctl, tree
from tests.support.moto import CANONICAL, NEWEST_DLAMI, NEWEST_UBUNTU, REGION, SSH_CIDR, Moto
from tests.support.specs import cluster_spec


def test_help_shows_aws_options_and_loads_no_boto3() -> None:
    code = (
        "import sys\nfrom ddpctl.main import cli\n"
        "for cmd in (['--help'], ['up', '--help'], ['down', '--help'], ['status', '--help']):\n"
        "    sys.argv = ['ddpctl', *cmd]\n"
        "    try:\n        cli()\n    except SystemExit as e:\n        assert e.code == 0\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'moto')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    for flag in (
        "--region",
        "--instance-type",
        "--az",
        "--volume-gb",
        "--ami",
        "--spot",
        "--ssh-cidr",
        "--subnet-id",
        "--no-configure",
        "--down-on-failure",
        "--iam-instance-profile",
    ):
        assert flag in out


# ---- against the moto server -------------------------------------------------------------------


def test_dry_run_creates_nothing_and_prices_the_cluster(aws: Env) -> None:
    result = aws.ok(*UP, "--nodes", "2", "--spot", "--dry-run")
    out = result.stdout
    assert "2 x p3.2xlarge" in out and "$6.12/h" in out
    assert NEWEST_UBUNTU in out  # p3: SSM has no Ubuntu parameter in moto: found by owner and name, newest first
    assert "DryRun RunInstances: ok" in out and "DryRun CreateSecurityGroup: ok" in out
    assert "takes one back" in out  # what happens to a spot instance on interruption
    assert "Nothing was created." in out
    doc = json.loads(aws.ok(*UP, "--nodes", "2", "--dry-run", "--json").stdout)
    assert doc["dry_run"] and doc["aws"]["plan"]["hourly_usd"] == pytest.approx(6.12)
    assert doc["cluster"]["status"] == "planned"
    aws.assert_clean()
    assert tree(aws.home) == []


def test_default_p3_gets_canonical_ubuntu_and_says_why(aws: Env) -> None:
    """p3.2xlarge (the default type, V100): the Deep Learning AMI's open driver cannot drive it, so
    the newest Canonical-owned Ubuntu 22.04 image, and the nvidia role's proprietary 580 + CUDA 12.6."""
    out = aws.ok(*CONFIGURED_UP, "--nodes", "2", "--dry-run").stdout
    ami = line_with(out, "  AMI: ")
    assert ami.startswith(
        "  AMI: Canonical's Ubuntu 22.04: the Deep Learning AMI's open NVIDIA driver cannot drive "
        "p3.2xlarge's V100 (Volta)"
    ), ami
    assert "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id" in ami
    found = line_with(out, "  AMI found: ")
    assert NEWEST_UBUNTU in found and "ubuntu-jammy-22.04-amd64-server-20250516" in found
    assert f"owned by {CANONICAL}" in found  # not the newer look-alike of another owner, not 24.04
    driver = line_with(out, "  GPU driver: ")
    assert "proprietary 580 driver (cuda-drivers-580) and CUDA 12.6" in driver
    assert "warning" not in out.replace("warning: vCPU quota", "")  # the old Volta warning is gone
    doc = json.loads(aws.ok(*CONFIGURED_UP, "--nodes", "2", "--dry-run", "--json").stdout)
    image = doc["aws"]["image"]
    assert image["ami"] == NEWEST_UBUNTU and image["source"] == "Canonical's Ubuntu 22.04"
    assert "cannot drive p3.2xlarge's V100" in image["reason"] and "cuda-drivers-580" in image["driver"]
    no_configure = aws.ok(*UP, "--dry-run").stdout  # UP has --no-configure
    assert "--no-configure: Canonical's Ubuntu 22.04 has no NVIDIA driver; run `ddpctl configure`" in no_configure
    assert line_with(no_configure, "  GPU driver: ").startswith("  GPU driver: none")
    aws.assert_clean()


def test_turing_and_newer_keep_the_deep_learning_ami(aws: Env) -> None:
    out = aws.ok(*UP, "--instance-type", "g5.xlarge", "--dry-run").stdout
    assert line_with(out, "  AMI: ").startswith(
        "  AMI: the AWS Deep Learning AMI: its open NVIDIA driver supports g5.xlarge's A10G (Ampere)"
    )
    assert NEWEST_DLAMI in line_with(out, "  AMI found: ")
    assert "warning: --no-configure" not in out  # the DLAMI has its own driver
    configured = json.loads(aws.ok(*CONFIGURED_UP, "--instance-type", "g5.xlarge", "--dry-run", "--json").stdout)
    assert configured["aws"]["image"]["ami"] == NEWEST_DLAMI
    driver = configured["aws"]["image"]["driver"]
    assert driver.startswith("the Deep Learning AMI's own driver, loaded at boot: site.yml's nvidia role keeps it")
    assert "open kernel modules (nvidia-open-580) and CUDA 13.0 for the A10G" in driver  # if it did not drive them
    aws.assert_clean()


def test_the_users_ami_wins(aws: Env) -> None:
    mine = "ami-0d6f2a3b4c5d6e7f8"  # any image of the region
    out = aws.ok(*UP, "--ami", mine, "--dry-run").stdout  # the default type, p3.2xlarge
    assert line_with(out, "  AMI: ") == f"  AMI: {mine} (--ami: your image)"
    assert mine in line_with(out, "  AMI found: ") and "(--ami)" in out
    assert "warning: --no-configure" not in out and "Volta)" not in line_with(out, "  AMI: ")
    aws.ok(*UP, "--ami", mine)
    assert {i["ImageId"] for i in aws.moto.alive_instances()} == {mine}
    aws.ok("down", "--yes")
    aws.assert_clean()


def test_up_creates_exactly_the_plan_and_down_leaves_nothing(aws: Env) -> None:
    moto, ec2 = aws.moto, aws.moto.ec2
    result = aws.ok(*UP, "--nodes", "2", "--json")
    cluster = json.loads(result.stdout)["cluster"]
    assert cluster["status"] == "up" and len(cluster["nodes"]) == 2
    assert [n["gpus"] for n in cluster["nodes"]] == [1, 1]  # p3.2xlarge: from ddpctl's table (moto lacks it)
    statuses = {r["kind"]: r["status"] for r in cluster["resources"]}
    assert statuses.pop("placement-group") == "skipped"  # moto has no placement groups
    assert set(statuses.values()) == {"created"}
    assert "placement groups" in result.stderr
    # the price the plan showed, with its source: moto has no Price List, so ddpctl's dated table
    assert "$6.12/h (ddpctl's table of 2026-09-24: us-east-1 on-demand) until `ddpctl down" in result.stderr

    added = aws.added()
    # The new VPC brings its own main route table and default security group; ddpctl adds one group.
    assert {k: len(v) for k, v in added.items()} == {
        "instances": 2,
        "vpcs": 1,
        "subnets": 1,
        "security_groups": 2,
        "internet_gateways": 1,
        "route_tables": 1,
        "key_pairs": 1,
        "volumes": 2,
        "network_interfaces": 2,
    }

    instances = moto.alive_instances()
    for inst in instances:
        tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
        assert (
            tags["ddpctl:cluster"] == "c1"
            and tags["ddpctl:created-by"] == "ddpctl"
            and tags["Name"] == "ddpctl-c1-node"
        )
        assert inst["InstanceType"] == "p3.2xlarge" and inst["ImageId"] == NEWEST_UBUNTU
        assert inst["MetadataOptions"]["HttpTokens"] == "required"
        assert inst["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert "IamInstanceProfile" not in inst  # no AWS credentials on the nodes
    volumes = ec2.describe_volumes(VolumeIds=sorted(added["volumes"]))["Volumes"]
    assert all(v["Encrypted"] and v["VolumeType"] == "gp3" and v["Size"] == 200 for v in volumes)
    groups = ec2.describe_security_groups(GroupIds=sorted(added["security_groups"]))["SecurityGroups"]
    assert min(g["GroupName"] for g in groups) == "ddpctl-c1-" + cluster["cluster_id"]
    (group,) = [g for g in groups if g["GroupName"] != "default"]
    group_id = group["GroupId"]
    assert {t["Key"] for t in group["Tags"]} >= {"ddpctl:cluster", "ddpctl:created-by", "Name"}
    ingress = [
        (
            p["IpProtocol"],
            p.get("FromPort"),
            [r["CidrIp"] for r in p["IpRanges"]],
            [g["GroupId"] for g in p["UserIdGroupPairs"]],
        )
        for p in group["IpPermissions"]
    ]
    assert sorted(ingress, key=str) == sorted([("tcp", 22, [SSH_CIDR], []), ("-1", None, [], [group_id])], key=str)
    enis = ec2.describe_network_interfaces(NetworkInterfaceIds=sorted(added["network_interfaces"]))["NetworkInterfaces"]
    assert all([g["GroupId"] for g in n["Groups"]] == [group_id] for n in enis)
    for kind in ("vpcs", "subnets", "internet_gateways", "key_pairs"):
        assert added[kind], kind
    (vpc,) = added["vpcs"]
    assert {t["Key"] for t in ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"][0]["Tags"]} >= {"ddpctl:cluster", "Name"}

    key = aws.home / "clusters" / "c1" / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    (pair,) = ec2.describe_key_pairs(KeyNames=sorted(added["key_pairs"]), IncludePublicKey=True)["KeyPairs"]
    assert pair["PublicKey"].split()[:2] == (key.parent / "id_ed25519.pub").read_text().split()[:2]
    inventory = (aws.home / "clusters" / "c1" / "inventory.ini").read_text()
    assert "[ddp_nodes]" in inventory and "AWS_" not in inventory

    status = json.loads(aws.ok("status", "--json").stdout)["clusters"][0]
    assert status["live"]["instances"] == {"running": 2} and status["live"]["cost_per_hour_usd"] == pytest.approx(6.12)
    assert "$6.12" in aws.ok("status").stdout  # the table
    assert status["age_s"] >= 0 and status["cost_so_far_usd"] == pytest.approx(6.12 * status["age_s"] / 3600, abs=0.02)
    assert "so far" in aws.ok("status").stdout

    down = aws.ok("down", "--yes")
    assert re.search(r"cluster 'c1' was up \d+ (s|min): about \$\d+\.\d\d at \$6\.12/h list price", down.stderr)
    aws.assert_clean()
    assert tree(aws.home / "clusters") == []
    aws.ok("down", "--yes")  # twice is fine
    aws.ok("down", "--name", "c1", "--region", REGION)


def test_a_version_2_state_file_is_taken_down_by_what_it_records(aws: Env) -> None:
    """State version 2 held a resource's detail fields only once known (version 3: every field), and
    the AWS options as keys of the spec (version 4: ``spec.options``). With the cluster's tags gone
    from EC2, only the recorded ids find its instances and network."""
    from ddpctl.infra.model.state import STATE_VERSION

    aws.ok(*UP, "--nodes", "2")
    path = aws.home / "clusters" / "c1.json"
    doc = json.loads(path.read_text())
    assert doc["version"] == STATE_VERSION
    doc["version"] = 2
    doc["spec"] |= doc["spec"].pop("options")
    for res in doc["resources"]:
        res["detail"] = {k: v for k, v in res["detail"].items() if v not in ("", [], {})}
    path.write_text(json.dumps(doc))
    added = aws.added()
    tagged = [*added["instances"], *added["vpcs"], *added["subnets"], *added["internet_gateways"]]
    tagged += added["security_groups"]
    aws.moto.ec2.delete_tags(Resources=sorted(tagged), Tags=[{"Key": "ddpctl:cluster"}])
    assert "c1" in aws.ok("status").stdout
    aws.ok("down", "--yes")
    aws.assert_clean()


@pytest.mark.parametrize(
    "step",
    [
        "dir",
        "key-file",
        "vpc",
        "internet-gateway",
        "route",
        "subnet",
        "security-group",
        "key-pair",
        "placement-group",
        "instances",
    ],
)
def test_crash_after_each_step_then_down_leaves_nothing(aws: Env, step: str) -> None:
    crashed = aws.run(*UP, "--nodes", "2", fault=f"after:{step}")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    state = json.loads((aws.home / "clusters" / "c1.json").read_text())
    res = next(r for r in state["resources"] if r["kind"] == step)
    assert res["status"] == "planned"  # made (or attempted) in AWS, never recorded as created
    down = aws.ok("down", "--yes")
    assert "is down" in down.stderr
    aws.assert_clean()


def test_lost_state_file_down_by_name_and_region(aws: Env) -> None:
    assert aws.run(*UP, "--nodes", "2", fault="after:instances").returncode == -signal.SIGKILL
    assert aws.added()["instances"]

    (aws.home / "clusters" / "c1.json").unlink()  # the state file is lost
    again = aws.run(*UP, "--nodes", "2")
    assert again.returncode == 1
    assert f"ddpctl down --name c1 --region {REGION}`" in only_line(again)  # leftovers are refused, with the fix
    assert "already run in us-east-1 and no state file records them" in only_line(again)
    aws.ok("down", "--name", "c1", "--region", REGION)
    aws.assert_clean()
    aws.ok("down", "--name", "c1", "--region", REGION)  # nothing left: still fine


def test_lost_state_home_down_by_its_home_id(aws: Env) -> None:
    """The whole state home is lost, its id with it: the cluster it made is another home's now. `up`
    names that home's id and the command that takes the cluster down; `down --region` alone leaves
    it (as it would a living home's), `--home-id` deletes it."""
    assert aws.run(*UP, "--nodes", "2", fault="after:instances").returncode == -signal.SIGKILL
    lost = (aws.home / "home-id").read_text().strip()
    import shutil

    shutil.rmtree(aws.home)
    again = aws.run(*UP, "--nodes", "2")
    assert again.returncode == 1
    fix = f"ddpctl down --name c1 --region {REGION} --home-id {lost}"
    assert f"belongs to another state home (home id {lost};" in only_line(again) and f"`{fix}`" in only_line(again)
    left = aws.ok("down", "--name", "c1", "--region", REGION)
    assert f"left alone: 7 resource(s) of a cluster 'c1' in {REGION} that another state home made" in left.stderr
    assert len(aws.added()["instances"]) == 2
    wrong = aws.run("down", "--name", "c1", "--home-id", lost)
    assert wrong.returncode == 2 and "--home-id is for a cluster whose state file is lost" in only_line(wrong)
    aws.ok(*fix.split()[1:])
    aws.assert_clean()


def test_interrupt_stops_creating_and_says_how_to_clean(aws: Env) -> None:
    result = aws.run(*UP, "--nodes", "2", fault="interrupt-after:security-group")
    assert result.returncode == 130, result.stderr
    assert "ddpctl down --name c1" in result.stderr and error_line(result) == "Error: interrupted"
    added = aws.added()
    assert added["security_groups"] and added["key_pairs"] and "instances" not in added
    aws.ok("down", "--yes")
    aws.assert_clean()


def test_failure_takes_down_what_up_made_unless_told_not_to(aws: Env) -> None:
    failed = aws.run(*UP, "--nodes", "2", fault="fail-after:security-group")
    assert failed.returncode == 1 and "injected failure" in error_line(failed)
    assert "taking down what was made" in failed.stderr
    aws.assert_clean()
    kept = aws.run(*UP, "--nodes", "2", "--no-down-on-failure", fault="fail-after:security-group")
    assert kept.returncode == 1 and "kept what was made" in kept.stderr
    assert aws.added()["security_groups"] and (aws.home / "clusters" / "c1.json").exists()
    aws.ok("down", "--yes")
    aws.assert_clean()


def test_no_capacity_in_one_zone_tries_the_next(aws: Env) -> None:
    result = aws.ok(*UP, "--nodes", "2", "--json", fault="capacity:us-east-1a")
    assert "no capacity in us-east-1a" in result.stderr
    cluster = json.loads(result.stdout)["cluster"]
    subnets = [r for r in cluster["resources"] if r["kind"] == "subnet"]
    assert [s["detail"]["az"] for s in subnets] == ["us-east-1a", "us-east-1b"]
    assert {i["Placement"]["AvailabilityZone"] for i in aws.moto.alive_instances()} == {"us-east-1b"}
    aws.ok("down", "--yes")
    aws.assert_clean()


def test_no_capacity_anywhere_is_one_line_and_leaves_nothing(aws: Env) -> None:
    result = aws.run(*UP, "--nodes", "2", fault="capacity:all")
    assert result.returncode == 1
    line = error_line(result)
    assert "no capacity for 2 x p3.2xlarge in us-east-1a, us-east-1b" in line and "try later" in line
    aws.assert_clean()


@pytest.mark.parametrize("instance_type", ["g5.12xlarge", "p3.8xlarge"])
def test_a_run_uses_every_gpu_of_every_node(aws: Env, instance_type: str) -> None:
    """Nodes of a 4-GPU type (g5.12xlarge's count from moto's DescribeInstanceTypes, p3.8xlarge's from
    ddpctl's table: moto lacks it): `run --dry-run` with neither --nodes nor --nproc-per-node plans
    every node with 4 processes each."""
    up = json.loads(aws.ok(*UP, "--nodes", "2", "--instance-type", instance_type, "--json").stdout)
    assert [n["gpus"] for n in up["cluster"]["nodes"]] == [4, 4]
    try:
        out = aws.ok("run", "mnist", "--dry-run").stdout
        assert "On all 2 node(s) of cluster 'c1', 4+4 process(es) (one per GPU):" in out
        assert "world size 8" in out and out.count("--nproc-per-node 4 ") == 2, out
    finally:
        aws.ok("down", "--name", "c1", "--yes")
    aws.assert_clean()


@pytest.mark.parametrize(
    "args,extra,code,message",
    [
        (
            (),
            {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""},
            1,
            "no AWS credentials found: run `aws configure`",
        ),
        (("--region", "us-mars-1"), {}, 2, "unknown AWS region 'us-mars-1'"),
        (("--region", "mars"), {}, 2, "invalid --region 'mars'"),
        (("--instance-type", "p99.bogus"), {}, 2, "unknown instance type 'p99.bogus' in us-east-1"),
        (("--ami", "ami-0123456789abcdef0"), {}, 2, "AMI ami-0123456789abcdef0 not found in us-east-1"),
        (("--instance-type", "g5g.xlarge"), {}, 2, "no AWS Deep Learning AMI for arm64 found in us-east-1: pass --ami"),
        ((), {"DDPCTL_FAULT": "quota:0"}, 1, "quota L-417A185B (Running On-Demand P instances) in us-east-1 is 0"),
        (("--ssh-cidr", "not-an-address"), {}, 2, "invalid --ssh-cidr 'not-an-address'"),
    ],
)
def test_errors_are_one_line_and_create_nothing(aws: Env, args, extra, code, message) -> None:
    env_extra = {k: v for k, v in extra.items() if k != "DDPCTL_FAULT"}
    result = aws.run(*UP, "--nodes", "2", *args, fault=extra.get("DDPCTL_FAULT", ""), **env_extra)
    assert result.returncode == code, result.stderr
    assert message in only_line(result)
    if "quota" in message:
        assert "request-service-quota-increase" in result.stderr
    aws.assert_clean()
    assert not (aws.home / "clusters").exists()


def test_rejected_credentials_are_one_line(aws: Env) -> None:
    aws.moto.post("/moto-api/reset-auth", b"0")  # moto now checks credentials like AWS
    try:
        result = aws.run(*UP, "--nodes", "2")
    finally:
        aws.moto.post("/moto-api/reset-auth", b"inf")
    assert result.returncode == 1
    assert "AWS rejected your credentials (AuthFailure" in only_line(result)
    aws.assert_clean()


def test_instance_profile_reaches_the_nodes(aws: Env) -> None:
    """--iam-instance-profile: the nodes' own AWS access (S3 snapshots), checked in IAM before anything is made."""
    import boto3

    iam = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("iam", endpoint_url=aws.moto.url)
    arn = iam.create_instance_profile(InstanceProfileName="ddpctl-s3")["InstanceProfile"]["Arn"]
    missing = aws.run(*UP, "--nodes", "2", "--iam-instance-profile", "no-such-profile")
    assert missing.returncode == 2
    assert "IAM instance profile 'no-such-profile' not found" in only_line(missing)
    aws.assert_clean()
    dry = aws.ok(*UP, "--nodes", "2", "--iam-instance-profile", "ddpctl-s3", "--dry-run").stdout
    assert "IAM instance profile: ddpctl-s3" in dry and "DryRun RunInstances: ok" in dry
    aws.assert_clean()
    aws.ok(*UP, "--nodes", "2", "--iam-instance-profile", "ddpctl-s3")
    instances = sorted(aws.moto.alive_instances(), key=lambda i: i["AmiLaunchIndex"])
    assert len(instances) == 2
    # moto 5.2 associates the profile with the first instance of a RunInstances call only (EC2: every one)
    assert instances[0]["IamInstanceProfile"]["Arn"] == arn
    state = json.loads((aws.home / "clusters" / "c1.json").read_text())
    assert state["spec"]["options"]["iam_instance_profile"] == "ddpctl-s3"
    aws.ok("down", "--yes")
    aws.assert_clean()
    assert iam.get_instance_profile(InstanceProfileName="ddpctl-s3")  # the user's: never deleted


def test_the_head_node_gets_its_own_instance_profile(aws: Env) -> None:
    """--head-instance-profile: the head's association in place of the nodes' profile it was launched
    with (or a new one where the nodes have none); checked in IAM before anything is made."""
    import boto3

    iam = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("iam", endpoint_url=aws.moto.url)
    arns = {n: iam.create_instance_profile(InstanceProfileName=n)["InstanceProfile"]["Arn"] for n in ("nodes", "head")}
    missing = aws.run(*UP, "--nodes", "2", "--head-instance-profile", "no-such-profile")
    assert missing.returncode == 2
    assert "IAM instance profile 'no-such-profile' not found" in only_line(missing)
    assert "--head-instance-profile" in only_line(missing)
    aws.assert_clean()

    def associations() -> dict[str, str]:
        found = aws.moto.ec2.describe_iam_instance_profile_associations()["IamInstanceProfileAssociations"]
        return {a["InstanceId"]: a["IamInstanceProfile"]["Arn"] for a in found if a["State"] == "associated"}

    for given in (("--iam-instance-profile", "nodes"), ()):
        up = aws.ok(*UP, "--nodes", "2", *given, "--head-instance-profile", "head")
        assert "the head node's IAM instance profile: head" in up.stderr
        state = json.loads((aws.home / "clusters" / "c1.json").read_text())
        [instances] = [r for r in state["resources"] if r["kind"] == "instances"]
        head = instances["detail"]["nodes"]["node0"]
        assert associations().get(head) == arns["head"]
        # moto 5.2 associates a launch's profile with its first instance only (EC2: every one): the head
        assert instances["detail"]["nodes"]["node1"] not in associations()
        assert state["spec"]["options"]["head_instance_profile"] == "head"
        aws.ok("down", "--yes")
        aws.assert_clean()


def test_given_subnet_is_used_and_never_deleted(aws: Env) -> None:
    ec2 = aws.moto.ec2
    vpc = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.50.1.0/24", AvailabilityZone="us-east-1c")["Subnet"]["SubnetId"]
    aws.baseline = aws.moto.inventory()
    aws.ok(*UP, "--nodes", "2", "--subnet-id", subnet, "--vpc-id", vpc)
    added = aws.added()
    assert "vpcs" not in added and "subnets" not in added and "internet_gateways" not in added
    assert {i["SubnetId"] for i in aws.moto.alive_instances()} == {subnet}
    aws.ok("down", "--yes")
    aws.assert_clean()  # the user's VPC and subnet are still there


def test_api_calls_do_not_grow_with_nodes(moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """up + down for 2 and 8 nodes make the same number of calls (batched launch/describe/terminate),
    but for one console read per node (the host keys)."""
    for key, value in moto.env(tmp_path / "home", tmp_path).items():
        if key.startswith(("AWS_", "DDPCTL_HOME")):
            monkeypatch.setenv(key, value)
    small = aws_calls.measure(2, tmp_path / "h2")
    moto.reset()
    large = aws_calls.measure(8, tmp_path / "h8")
    assert small.up_calls == large.up_calls and small.down_calls == large.down_calls, (small, large)
    assert large.by_op["RunInstances"] == 1 and large.by_op["TerminateInstances"] == 1
    assert large.by_op["GetConsoleOutput"] == 8  # the host keys: EC2 has no batched console read


def test_spot_and_the_callers_address_by_the_injected_lookup(
    moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --ssh-cidr: the provider's address lookup (checkip in real use) is replaced, not the network."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.aws import AwsProvider

    for key, value in moto.env(tmp_path / "home", tmp_path).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    baseline = moto.inventory()
    provider = AwsProvider(caller_address=lambda: "198.51.100.4")
    store = StateStore(tmp_path / "home")
    spec = cluster_spec(name="c2", provider="aws", nodes=2, options={"spot": True, "configure": False})
    state = provider.plan(spec, store)
    messages: list[str] = []
    clusters.up(provider, state, store, messages.append)
    assert any("takes one back" in m for m in messages)
    instances = moto.alive_instances()
    assert [i.get("InstanceLifecycle") for i in instances] == ["spot", "spot"]
    groups = moto.ec2.describe_security_groups(Filters=[{"Name": "tag:ddpctl:cluster", "Values": ["c2"]}])
    (group,) = groups["SecurityGroups"]
    ssh = [p for p in group["IpPermissions"] if p.get("FromPort") == 22]
    assert [r["CidrIp"] for r in ssh[0]["IpRanges"]] == ["198.51.100.4/32"]
    clusters.down("c2", store, messages.append)
    assert moto.inventory() == baseline


# ---- AWS settings as the AWS CLI v2 reads them ----------------------------------------------------


@pytest.mark.parametrize(
    ("env", "args", "region"),
    [
        ({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"}, (), "eu-west-1"),  # AWS_REGION first
        ({"AWS_DEFAULT_REGION": "us-west-2"}, (), "us-west-2"),
        (
            {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": ""},
            ("--region", "us-west-2"),
            "us-west-2",
        ),  # the flag wins
        ({"AWS_DEFAULT_REGION": "", "AWS_PROFILE": "work"}, (), "ap-northeast-1"),  # the profile's
    ],
)
def test_the_region_is_the_aws_clis(aws: Env, env: dict[str, str], args: tuple[str, ...], region: str) -> None:
    (aws.tmp / "no-aws-config").write_text("[profile work]\nregion = ap-northeast-1\n")
    doc = json.loads(aws.ok(*UP, "--nodes", "2", "--dry-run", "--json", *args, **env).stdout)
    assert doc["aws"]["plan"]["region"] == region
    aws.assert_clean()


def test_an_unknown_profile_is_one_line(aws: Env) -> None:
    result = aws.run(*UP, "--nodes", "2", "--dry-run", AWS_PROFILE="nosuchprofile")
    assert result.returncode == 2
    assert "nosuchprofile" in only_line(result) and "AWS_PROFILE" in only_line(result)
    aws.assert_clean()


@pytest.mark.parametrize(
    ("env", "profile", "ok"),
    [
        ({}, "", True),  # ddpctl's default: standard mode, 5 attempts, gets past two throttled answers
        ({"AWS_MAX_ATTEMPTS": "1"}, "", False),  # the user's setting is kept, not raised to 5
        ({}, "max_attempts = 1\n", False),  # the profile's too
        ({"AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "4"}, "", True),
    ],
)
def test_the_users_retry_settings_are_kept(aws: Env, env: dict[str, str], profile: str, ok: bool) -> None:
    """EC2 answers the first two requests of each client with RequestLimitExceeded (below botocore's
    retries): whether `up --dry-run` gets past them is the retry settings' doing."""
    (aws.tmp / "no-aws-config").write_text("[default]\n" + profile)
    result = aws.run(*UP, "--nodes", "2", "--dry-run", fault="throttle:2", **env)
    if ok:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 1 and "RequestLimitExceeded" in only_line(result)
    aws.assert_clean()


def test_user_tags_go_on_everything_ddpctl_creates(aws: Env) -> None:
    """--tag (and [cluster.tags] in ddpctl.toml): every resource that carries ddpctl's cluster tag
    carries the user's too, for tag policies and cost allocation."""
    (aws.tmp / "ddpctl.toml").write_text('[cluster.tags]\n"cost-center" = "42"\n')
    env = {"DDPCTL_CONFIG": str(aws.tmp / "ddpctl.toml")}
    plan = json.loads(aws.ok(*UP, "--nodes", "2", "--dry-run", "--json", **env).stdout)
    assert plan["aws"]["plan"]["user_tags"] == {"cost-center": "42"}
    plan = json.loads(aws.ok(*UP, "--nodes", "2", "--tag", "team=ml", "--dry-run", "--json", **env).stdout)
    assert plan["aws"]["plan"]["user_tags"] == {"team": "ml"}  # the flags win over the file, as for every option
    aws.ok(*UP, "--nodes", "2", "--tag", "team=ml", "--tag", "cost-center=42")
    try:
        ec2 = aws.moto.ec2  # each kind's own describe call (moto's DescribeTags loses some of a VPC's tags)
        listed = [
            ("i", [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]], "InstanceId"),
            ("vpc", ec2.describe_vpcs()["Vpcs"], "VpcId"),
            ("subnet", ec2.describe_subnets()["Subnets"], "SubnetId"),
            ("sg", ec2.describe_security_groups()["SecurityGroups"], "GroupId"),
            ("igw", ec2.describe_internet_gateways()["InternetGateways"], "InternetGatewayId"),
            ("key", ec2.describe_key_pairs()["KeyPairs"], "KeyPairId"),
            ("vol", ec2.describe_volumes()["Volumes"], "VolumeId"),
        ]
        tags = {
            item[key]: {t["Key"]: t["Value"] for t in item.get("Tags", [])}
            for _, items, key in listed
            for item in items
        }
        ours = {rid for rid, t in tags.items() if t.get("ddpctl:cluster") == "c1"}
        assert {rid.split("-")[0] for rid in ours} >= {"i", "vpc", "subnet", "sg", "igw", "key"}, ours
        for rid in ours:
            assert tags[rid].get("team") == "ml" and tags[rid].get("cost-center") == "42", (rid, tags[rid])
    finally:
        aws.ok("down", "--name", "c1", "--yes")
    aws.assert_clean()


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("aws:team=ml", "--tag aws:team is reserved"),
        ("ddpctl:cluster=x", "--tag ddpctl:cluster is reserved"),
        ("Name=x", "--tag Name is reserved"),
        ("=ml", "--tag '=ml' is not KEY=VALUE"),
        ("team", "--tag 'team' is not KEY=VALUE"),
        ("t{x}=1", "invalid --tag key 't{x}'"),
        ("team=" + "v" * 257, "invalid --tag value for team"),
    ],
)
def test_bad_tags_are_one_line(aws: Env, tag: str, message: str) -> None:
    result = aws.run(*UP, "--nodes", "2", "--tag", tag, "--dry-run")
    assert result.returncode == 2 and message in only_line(result)
    assert tree(aws.home) == []


def test_tags_are_for_the_aws_providers(home: Path) -> None:
    result = ddpctl("up", "--tag", "team=ml", "--dry-run")
    assert result.returncode == 2 and "--tag is for --provider aws or pcluster, not local" in result.stderr


# ---- asking before what costs money ---------------------------------------------------------------

ASKING_UP = tuple(a for a in UP if a != "--yes")


def test_up_asks_before_creating_what_is_billed(aws: Env) -> None:
    """No --yes and no terminal: one line that says to add --yes, nothing created. On a terminal,
    "n" creates nothing and "y" goes ahead. --dry-run never asks."""
    refused = aws.run(*ASKING_UP, "--nodes", "2", stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert "create 2 aws node(s) for cluster 'c1', about $6.12/h until `ddpctl down`: add --yes" in only_line(refused)
    aws.assert_clean()
    assert tree(aws.home) == []
    assert aws.run(*ASKING_UP, "--nodes", "2", "--dry-run", stdin=subprocess.DEVNULL).returncode == 0
    bad = aws.run(*ASKING_UP, "--nodes", "2", "--instance-type", "p2.xlarge", stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "which no current NVIDIA driver supports" in only_line(bad)  # checked before asking
    no = answer_on_a_terminal(aws, "n\n", *ASKING_UP, "--nodes", "2")
    assert no.returncode == 1 and "Go ahead? [y/N]" in no.stderr and "nothing was done (answered no)" in no.stderr
    aws.assert_clean()
    yes = answer_on_a_terminal(aws, "y\n", *ASKING_UP, "--nodes", "2")
    assert yes.returncode == 0, yes.stderr
    assert len(aws.moto.alive_instances()) == len(aws.baseline["instances"]) + 2
    aws.ok("down", "--name", "c1", "--yes")
    aws.assert_clean()


def answer_on_a_terminal(aws: Env, answer: str, *args: str) -> subprocess.CompletedProcess:
    """ddpctl with a pseudo-terminal as its stdin, ``answer`` typed on it."""
    import os
    import pty

    leader, follower = pty.openpty()
    try:
        os.write(leader, answer.encode())
        return aws.run(*args, stdin=follower)
    finally:
        os.close(follower)
        os.close(leader)


def test_down_all_asks_too(home: Path) -> None:
    assert ddpctl("up", "--nodes", "1").returncode == 0
    refused = ddpctl("down", "--all", stdin=subprocess.DEVNULL)
    assert (
        refused.returncode == 2 and "take down every cluster under" in refused.stderr and "add --yes" in refused.stderr
    )
    assert (home / "clusters" / "default.json").exists()
    assert ddpctl("down", "--all", "--yes").returncode == 0


@pytest.mark.parametrize(
    ("instance_type", "flags", "line"),
    [
        # what moto's describe_instance_types says (real EC2 values): p4d 4 EFA on 4 cards, p5 32 on 32
        ("p4d.24xlarge", ("--private-ip",), "EFA per node: 4 interface(s), all p4d.24xlarge takes"),
        ("p4d.24xlarge", (), "EFA per node: 1 interface(s) of the 4 p4d.24xlarge takes (EC2 gives no public"),
        ("p5.48xlarge", ("--private-ip",), "EFA per node: 32 interface(s), all p5.48xlarge takes"),
        ("g5.12xlarge", (), "EFA per node: 1 interface(s), all g5.12xlarge takes"),
        ("g5.xlarge", (), "EFA per node: no EFA: g5.xlarge does not support it"),
        ("p3.2xlarge", (), "EFA per node: no EFA: p3.2xlarge does not support it"),  # moto lacks p3: the table
    ],
)
def test_dry_run_says_efa_per_node(aws: Env, instance_type: str, flags: tuple[str, ...], line: str) -> None:
    out = aws.ok(*UP, "--nodes", "2", "--instance-type", instance_type, *flags, "--dry-run").stdout
    assert line in line_with(out, "  EFA per node: "), out
    if instance_type == "p3.2xlarge":
        assert "as ddpctl's table has it: EC2 did not describe it" in out
    doc = json.loads(
        aws.ok(*UP, "--nodes", "2", "--instance-type", instance_type, *flags, "--dry-run", "--json").stdout
    )
    assert doc["aws"]["plan"]["efa_interfaces"] == {"p4d.24xlarge": 4, "p5.48xlarge": 32, "g5.12xlarge": 1}.get(
        instance_type, 0
    )
    aws.assert_clean()


@pytest.mark.parametrize(("instance_type", "efa"), [("p4d.24xlarge", 4), ("g5.12xlarge", 1), ("g5.xlarge", 0)])
def test_up_launches_efa_interfaces_and_the_groups_egress_to_itself(
    moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance_type: str, efa: int
) -> None:
    """`up` against moto with the requests ddpctl sent read by a botocore hook on its own clients
    (``ec2.CLIENT_HOOKS``, as bench/aws_calls.py counts calls): RunInstances carries one EFA per
    network card (moto 5 accepts them, keeping one interface per device index), and the security
    group has all traffic to and from itself (moto keeps the egress rule)."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.aws import AwsProvider, ec2

    for key, value in moto.env(tmp_path / "home", tmp_path).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    baseline = moto.inventory()
    sent: dict[str, list[dict[str, Any]]] = {}

    def hook(client: Any) -> None:
        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            sent.setdefault(model.name, []).append(json.loads(json.dumps(params, default=str)))

        client.meta.events.register("before-parameter-build.ec2", record)

    provider = AwsProvider(caller_address=lambda: "198.51.100.4")
    store = StateStore(tmp_path / "home")
    options = {"instance_type": instance_type, "configure": False, "private_ip": True}
    spec = cluster_spec(name="efa", provider="aws", nodes=2, options=options)
    messages: list[str] = []
    ec2.CLIENT_HOOKS.append(hook)
    try:
        clusters.up(provider, provider.plan(spec, store), store, messages.append)
    finally:
        ec2.CLIENT_HOOKS.remove(hook)
    (launch,) = [r for r in sent["RunInstances"] if not r.get("DryRun")]
    nics = launch["NetworkInterfaces"]
    (group,) = moto.ec2.describe_security_groups(Filters=[{"Name": "tag:ddpctl:cluster", "Values": ["efa"]}])[
        "SecurityGroups"
    ]
    to_itself = [p for p in group["IpPermissionsEgress"] if [g["GroupId"] for g in p.get("UserIdGroupPairs", [])]]
    if efa:
        assert [n["InterfaceType"] for n in nics] == ["efa"] + ["efa-only"] * (efa - 1)
        assert [n["NetworkCardIndex"] for n in nics] == list(range(efa))
        assert [n["DeviceIndex"] for n in nics] == [0] + [1] * (efa - 1)
        assert all(n["Groups"] == [group["GroupId"]] for n in nics)
        assert to_itself and to_itself[0]["IpProtocol"] == "-1"
        assert to_itself[0]["UserIdGroupPairs"][0]["GroupId"] == group["GroupId"]
        assert any(f"launching 2 x {instance_type}" in m and f"{efa} EFA interface(s) each" in m for m in messages)
    else:
        assert len(nics) == 1 and "InterfaceType" not in nics[0]
        assert to_itself == [] and "AuthorizeSecurityGroupEgress" not in sent
        assert any(m.startswith("EFA per node: no EFA: g5.xlarge does not support it") for m in messages)
    ingress_itself = [p for p in group["IpPermissions"] if p.get("UserIdGroupPairs")]
    assert ingress_itself and ingress_itself[0]["IpProtocol"] == "-1"  # in from itself, as ever
    state = json.loads((tmp_path / "home" / "clusters" / "efa.json").read_text())
    (inst,) = [r for r in state["resources"] if r["kind"] == "instances"]
    assert inst["detail"]["efa_interfaces"] == efa
    assert all(n["DeleteOnTermination"] for n in nics)  # EC2 deletes every interface with its instance
    clusters.down("efa", store, messages.append)
    left = moto.inventory()
    lost = left.pop("network_interfaces") - baseline.pop("network_interfaces")
    assert left == baseline
    # moto keeps one interface per device index, so of the EFA-only ones at device index 1 it deletes
    # only the last with the instance; the others it lost track of stay behind in moto alone
    assert len(lost) == 2 * max(efa - 2, 0)
