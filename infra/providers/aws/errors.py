"""AWS errors as one line that says what to do, and the error codes ddpctl acts on.

Every provider verb that calls AWS runs inside ``aws_errors(region)``: botocore's exceptions leave
it as a ``DdpctlError`` (``explain``), which the CLI prints as one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from ...model.errors import DdpctlError, UsageError
from . import boto

CREDENTIAL_CODES = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "ExpiredTokenException",
    "RequestExpired",
    "OptInRequired",
}
PERMISSION_CODES = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "Blocked"}
#: Where the IAM policy with every action ddpctl calls is (the repository's docs/; tests keep it in step).
POLICY_DOC = "docs/aws-iam-policy.json in ddpctl's repository"
#: The head node's (``up --head-instance-profile``): what its role needs to replace a lost node.
HEAD_POLICY_DOC = "docs/aws-head-iam-policy.json in ddpctl's repository"
#: The services ddpctl calls, EC2 first: where ``iam_action`` looks an operation up.
SERVICES = ("ec2", "iam", "ssm", "service-quotas", "cloudformation")


class CapacityError(DdpctlError):
    """No capacity for the instance type in one zone (the caller tries another)."""

    def __init__(self, zone: str, message: str) -> None:
        super().__init__(message)
        self.zone = zone


class QuotaError(DdpctlError):
    """The account's vCPU quota is too low for the launch (raised by EC2 itself)."""


def code_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def message_of(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Message", "")) or str(exc)


def iam_action(exc: BaseException) -> str:
    """The IAM action a refused call needed (``ec2:RunInstances``): as AWS's message names it, else
    the operation's service, as botocore's model of it signs (``servicequotas`` for service-quotas)."""
    named = re.search(r"perform: ([a-z0-9-]+:[A-Za-z0-9]+)", message_of(exc))
    if named:
        return named.group(1)
    op = getattr(exc, "operation_name", "") or "the call"
    for service in SERVICES:
        model = boto.service_model(service)
        if op in model.operation_names:
            return f"{model.signing_name}:{op}"
    return op


def is_unsupported(exc: BaseException) -> bool:
    """The endpoint does not implement the call (moto: HTTP 500 with an HTML page)."""
    if isinstance(exc, (boto.parser_error(), NotImplementedError)):
        return True
    return code_of(exc) in ("NotImplemented", "InvalidAction", "UnsupportedOperation", "InternalFailure")


def explain(exc: BaseException, region: str, policy: str = POLICY_DOC) -> DdpctlError:
    """An exception from boto3 as one line that says what to do (``policy``: the policy a refused call
    is missing from: the user's, or the head node's role's)."""
    bx = boto.exceptions()
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return DdpctlError(
            "no AWS credentials found: run `aws configure` (or `aws sso login`), or set AWS_PROFILE, "
            "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (`up --dry-run` shows the plan and its cost without them)"
        )
    if isinstance(exc, bx.ProfileNotFound):
        return DdpctlError(f"{exc}: set AWS_PROFILE to a profile in ~/.aws/config, or unset it")
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return DdpctlError(f"cannot reach AWS in {region} ({exc}): check your network and --region")
    code, op = code_of(exc), getattr(exc, "operation_name", "the call")
    if code in CREDENTIAL_CODES:
        return DdpctlError(
            f"AWS rejected your credentials ({code} on {op}): check them with `aws sts get-caller-identity`, "
            "and refresh expired ones (`aws sso login`, or new access keys)"
        )
    if code in PERMISSION_CODES:
        return DdpctlError(
            f"your AWS identity may not call {iam_action(exc)} ({code}): allow it in the identity's IAM policy "
            f"({policy} lists every action ddpctl calls)"
        )
    if code.startswith("InvalidAMIID"):
        return UsageError(f"AMI problem ({code}): {message_of(exc)}: pass an AMI of {region} with --ami")
    if isinstance(exc, bx.WaiterError):
        return DdpctlError(f"EC2 did not reach the expected state: {exc}")
    if is_unsupported(exc):
        return DdpctlError(f"the EC2 endpoint for {region} does not support {op}: {str(exc)[:120]}")
    if isinstance(exc, bx.BotoCoreError) or code:
        return DdpctlError(f"AWS {op} failed in {region}: {code or type(exc).__name__}: {message_of(exc)}")
    return DdpctlError(f"AWS call failed: {exc}")


@contextmanager
def aws_errors(region: str, policy: str = POLICY_DOC) -> Iterator[None]:
    """Turn botocore's exceptions into DdpctlError (the CLI prints one line); ``policy``: ``explain``'s."""
    try:
        yield
    except DdpctlError:
        raise
    except Exception as exc:
        if isinstance(exc, boto.aws_exceptions()):
            raise explain(exc, region, policy) from None
        raise
