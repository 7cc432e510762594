"""The nodes' EC2 calls: their security group and placement group, the one RunInstances that
launches them all (no capacity and a low quota as errors of their own), waiting for their state,
and terminating them.

Calls that accept several ids take them all at once (one RunInstances with MinCount = MaxCount,
one TerminateInstances, one DescribeInstances per poll), so the number of calls does not grow with
the number of nodes; RunInstances carries a ClientToken, so a retried launch does not launch twice.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...model.errors import DdpctlError
from ...model.progress import Progress, activity
from . import boto
from .ec2 import Aws
from .errors import CREDENTIAL_CODES, CapacityError, QuotaError, code_of, is_unsupported, message_of
from .steps import adopt

POLL_S = 5.0
RUNNING_TIMEOUT_S = 900.0
TERMINATED_TIMEOUT_S = 900.0


def create_security_group(aws: Aws, name: str, vpc_id: str, cluster_id: str, tag_specs: list[dict[str, Any]]) -> str:
    try:
        return aws.ec2.create_security_group(
            GroupName=name,
            Description=f"ddpctl cluster {name}: SSH from the controller, all traffic between nodes",
            VpcId=vpc_id,
            TagSpecifications=tag_specs,
        )["GroupId"]
    except boto.client_error() as exc:
        if code_of(exc) != "InvalidGroup.Duplicate":
            raise
    groups = aws.ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]}]
    )["SecurityGroups"]
    return adopt(groups[0], "GroupId", cluster_id, f"security group {name}")


def authorize_ingress(aws: Aws, group_id: str, rules: list[dict[str, Any]], tag_specs: list[dict[str, Any]]) -> None:
    try:
        aws.ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=rules, TagSpecifications=tag_specs)
    except boto.client_error() as exc:
        if code_of(exc) != "InvalidPermission.Duplicate":
            raise


def authorize_egress(aws: Aws, group_id: str, rules: list[dict[str, Any]], tag_specs: list[dict[str, Any]]) -> None:
    if not rules:
        return
    try:
        aws.ec2.authorize_security_group_egress(GroupId=group_id, IpPermissions=rules, TagSpecifications=tag_specs)
    except boto.client_error() as exc:
        if code_of(exc) != "InvalidPermission.Duplicate":
            raise


def create_placement_group(aws: Aws, name: str, tag_specs: list[dict[str, Any]]) -> str | None:
    """Create a cluster placement group; None where the endpoint has none."""
    try:
        aws.ec2.create_placement_group(GroupName=name, Strategy="cluster", TagSpecifications=tag_specs)
    except boto.aws_exceptions() as exc:
        if code_of(exc) == "InvalidPlacementGroup.Duplicate":
            return ""
        if is_unsupported(exc):
            return None
        raise
    return ""


def run_instances(
    aws: Aws, request: dict[str, Any], zone: str, describe_quota: Callable[[], str]
) -> list[dict[str, Any]]:
    """The one RunInstances; no capacity in ``zone`` is a CapacityError (the caller tries another)."""
    try:
        return aws.ec2.run_instances(**request)["Instances"]
    except boto.client_error() as exc:
        code = code_of(exc)
        if code in ("InsufficientInstanceCapacity", "Unsupported", "InsufficientCapacityOnHost"):
            raise CapacityError(zone, message_of(exc)) from None
        if code in ("VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded"):
            raise QuotaError(f"EC2 refused the launch ({code}): {describe_quota()}") from None
        raise


def give_head_profile(aws: Aws, head: str, profile: str, progress: Progress) -> None:
    """The head node's own instance profile (``--head-instance-profile``): associated with its
    instance, or in place of the nodes' profile it was launched with (one launch makes every node);
    nothing where it has it already (a retried ``up``)."""
    found = aws.ec2.describe_iam_instance_profile_associations(Filters=[{"Name": "instance-id", "Values": [head]}])[
        "IamInstanceProfileAssociations"
    ]
    current = [a for a in found if a.get("State") in ("associating", "associated")]
    if current and current[0].get("IamInstanceProfile", {}).get("Arn", "").endswith(f"/{profile}"):
        return
    if current:
        aws.ec2.replace_iam_instance_profile_association(
            IamInstanceProfile={"Name": profile}, AssociationId=current[0]["AssociationId"]
        )
    else:
        aws.ec2.associate_iam_instance_profile(IamInstanceProfile={"Name": profile}, InstanceId=head)
    progress(f"the head node's IAM instance profile: {profile}")


def wait(aws: Aws, waiter_name: str, ids: list[str], progress: Progress, what: str, timeout: float) -> None:
    """A boto3 waiter, polled one attempt at a time so each poll can report progress (a line when the
    states change; the wait itself, with its time, as the activity going on)."""
    waiter = aws.ec2.get_waiter(waiter_name)
    deadline = time.monotonic() + timeout
    last = ""
    activity(progress, f"{what} ({len(ids)} instance(s))")
    try:
        while True:
            try:
                waiter.wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 1})
                return
            except boto.exceptions().WaiterError as exc:
                response = exc.last_response or {}
                gone = response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound"
                if waiter_name == "instance_terminated" and gone:
                    return  # EC2 no longer knows them: long terminated
                if "terminal failure" in str(exc) or response.get("Error"):
                    raise DdpctlError(
                        f"{what}: {_states(response) or response.get('Error', {}).get('Message', exc)}: "
                        "see the instances in the EC2 console"
                    ) from None
                states = _states(response)
                if states != last:
                    progress(f"{what}: {states}")
                    activity(progress, f"{what} ({states})")
                    last = states
            if time.monotonic() > deadline:
                raise DdpctlError(f"{what}: still not done after {timeout:.0f} s ({last})")
            time.sleep(POLL_S)
    finally:
        activity(progress, None)


def _states(response: dict[str, Any]) -> str:
    counts = Counter(i["State"]["Name"] for r in response.get("Reservations", []) for i in r.get("Instances", []))
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def terminate(aws: Aws, ids: list[str], progress: Progress, attempts: int = 5) -> None:
    """TerminateInstances for all ids at once, retried; ids EC2 does not know are dropped."""
    pending = list(ids)
    for attempt in range(attempts):
        if not pending:
            return
        try:
            aws.ec2.terminate_instances(InstanceIds=pending)
            return
        except boto.client_error() as exc:
            if code_of(exc) == "InvalidInstanceID.NotFound":
                unknown = set(re.findall(r"i-[0-9a-f]+", message_of(exc)))
                pending = [i for i in pending if i not in unknown] if unknown else []
                continue
            if code_of(exc) in CREDENTIAL_CODES or attempt == attempts - 1:
                raise
            progress(f"terminating failed ({code_of(exc)}): retrying")
            time.sleep(min(2**attempt, 30))
