"""boto3 and botocore, imported here only and only when first asked for (``ddpctl --help``, and
importing any provider, load neither). Every other module reaches the AWS SDK through these
functions or through the clients of ``ec2.Aws``.

The endpoint, profile and credentials are boto3's own business: ``AWS_ENDPOINT_URL`` (and the
per-service variants), profiles and credentials all work as they do for the AWS CLI.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def session(region: str | None = None) -> Any:
    """A boto3 session for ``region`` (None: the configured one)."""
    import boto3

    return boto3.session.Session(region_name=region)


def client_config() -> Any:
    """Every client's settings: botocore's "standard" retries of throttling and transient errors."""
    from botocore.config import Config

    return Config(
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=60,
        user_agent_extra="ddpctl",
    )


def exceptions() -> ModuleType:
    """``botocore.exceptions``: ClientError, WaiterError, NoCredentialsError..."""
    import botocore.exceptions

    return botocore.exceptions


def client_error() -> type[Exception]:
    """What a call raises when AWS answers with an error (its code: ``errors.code_of``)."""
    return exceptions().ClientError


def parser_error() -> type[Exception]:
    """What a call raises when the answer cannot be parsed (moto's HTML page for a missing call)."""
    import botocore.parsers

    return botocore.parsers.ResponseParserError


def aws_exceptions() -> tuple[type[BaseException], ...]:
    """What a boto3 call raises: API errors, client-side errors, and unparseable answers."""
    return (client_error(), exceptions().BotoCoreError, parser_error())


def available_regions() -> list[str]:
    """EC2's regions as botocore's bundled endpoint data knows them (no call made)."""
    botocore_data = session()
    regions = set(botocore_data.get_available_regions("ec2"))
    for partition in ("aws-us-gov", "aws-cn"):
        regions |= set(botocore_data.get_available_regions("ec2", partition_name=partition))
    return sorted(regions)


def default_region() -> str:
    """The region the AWS CLI would use (AWS_REGION, AWS_DEFAULT_REGION, the profile), or ''."""
    import botocore.session

    try:
        return botocore.session.get_session().get_config_variable("region") or ""
    except Exception:
        return ""


def http_response(url: str, status: int) -> Any:
    """A bare HTTP response, for a ``before-call`` hook that answers instead of the server."""
    import botocore.awsrequest

    return botocore.awsrequest.AWSResponse(url, status, {}, None)
