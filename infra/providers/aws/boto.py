"""boto3 and botocore, imported here only and only when first asked for (``ddpctl --help``, and
importing any provider, load neither). Every other module reaches the AWS SDK through these
functions or through the clients of ``ec2.Aws``.

The endpoint, profile and credentials are boto3's own business: ``AWS_ENDPOINT_URL`` (and the
per-service variants), profiles and credentials all work as they do for the AWS CLI.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

from ...model.errors import UsageError


def session(region: str | None = None) -> Any:
    """A boto3 session for ``region`` (None: the configured one)."""
    import boto3

    try:
        return boto3.session.Session(region_name=region)
    except exceptions().ProfileNotFound as exc:
        raise UsageError(f"{exc}: set AWS_PROFILE to a profile in ~/.aws/config, or unset it") from None


def credentials_found(region: str) -> bool:
    """Whether boto3 finds credentials (environment, profile, SSO cache, instance role...); asks no AWS
    API (an SSO or assume-role profile is resolved only when a call needs it)."""
    return session(region).get_credentials() is not None


#: ddpctl's retry settings, for what the user has not set (AWS_RETRY_MODE, AWS_MAX_ATTEMPTS, or the
#: profile's retry_mode / max_attempts): botocore's "standard" retries of throttling and transient errors.
DEFAULT_RETRIES = {"mode": "standard", "max_attempts": 5}
_RETRY_SETTINGS = {"mode": ("AWS_RETRY_MODE", "retry_mode"), "max_attempts": ("AWS_MAX_ATTEMPTS", "max_attempts")}


def client_config() -> Any:
    """Every client's settings: ddpctl's retries where the user set none (as the AWS CLI reads them:
    the environment, then the profile), timeouts and the user agent."""
    from botocore.config import Config

    retries = {key: value for key, value in DEFAULT_RETRIES.items() if not _user_set(*_RETRY_SETTINGS[key])}
    return Config(
        retries=retries or None,
        connect_timeout=10,
        read_timeout=60,
        user_agent_extra="ddpctl",
    )


def price_config() -> Any:
    """A price look-up's settings: as ``client_config``, but one retry and a short connect timeout
    where the user set none: a price that does not come at once comes from ddpctl's table."""
    from botocore.config import Config

    retries = {"mode": "standard", "max_attempts": 2}
    retries = {key: value for key, value in retries.items() if not _user_set(*_RETRY_SETTINGS[key])}
    return client_config().merge(Config(retries=retries or None, connect_timeout=5, read_timeout=20))


def _user_set(env: str, profile_key: str) -> bool:
    """Whether the user set a setting, in the environment or in the profile's section of ~/.aws/config."""
    if os.environ.get(env):
        return True
    import botocore.session

    try:
        return profile_key in botocore.session.get_session().get_scoped_config()
    except Exception:  # an unknown profile: the session that follows says so
        return False


def exceptions() -> ModuleType:
    """``botocore.exceptions``: ClientError, WaiterError, NoCredentialsError..."""
    import botocore.exceptions

    return botocore.exceptions


@functools.cache
def service_model(service: str) -> Any:
    """botocore's model of ``service`` (its operations, its signing name), from its bundled data."""
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


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
    """The region the AWS CLI v2 would use: AWS_REGION, then AWS_DEFAULT_REGION (botocore reads only
    this one), then the profile's; or ''. An empty variable counts as unset."""
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(variable):
            return os.environ[variable]
    import botocore.session

    try:
        return botocore.session.get_session().get_scoped_config().get("region") or ""
    except Exception:  # an unknown profile: the session that follows says so
        return ""


def http_response(url: str, status: int, body: bytes | None = None) -> Any:
    """A bare HTTP response, for a ``before-call`` hook that answers instead of the server (or a
    ``before-send`` hook, with the body botocore then parses)."""
    import botocore.awsrequest

    return botocore.awsrequest.AWSResponse(url, status, {}, None if body is None else _Body(body))


class _Body:
    """What botocore reads a response's body from (``stream()``)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body
