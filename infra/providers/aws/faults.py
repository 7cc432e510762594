"""TEST-ONLY fault injection for the AWS provider, switched on by ``DDPCTL_FAULT``. Not for users.

The tests run ddpctl as a subprocess against a moto server and cannot patch it, so ddpctl
itself offers these hooks. Unset (always, outside tests), nothing here does anything. The value is a
comma-separated list of:

``after:STEP`` / ``before:STEP``
    kill ddpctl (SIGKILL, no cleanup, like a crash or ``kill -9``) right after STEP's AWS call
    returned but before the state records its result, or right before the call.
    STEP is a resource kind of ``plan.STEPS`` (vpc, subnet, security-group, instances...).
``interrupt-after:STEP``
    send ddpctl a SIGINT (Ctrl-C) at that point.
``fail-after:STEP``
    raise a DdpctlError at that point (``up`` failing by itself: --down-on-failure applies).
``capacity:ZONE[+ZONE...]`` / ``capacity:all``
    RunInstances in those zones fails with InsufficientInstanceCapacity (a client-side botocore
    ``before-call`` hook answers instead of the server: moto has no such fault).
``quota:N``
    Service Quotas answers that the instance family's vCPU quota is N (moto has no EC2 quotas).
``throttle:N``
    each EC2 client's first N requests are answered with RequestLimitExceeded, below botocore's
    retries (a ``before-send`` hook), so that the retry settings in force decide what follows.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from ...model.errors import DdpctlError
from . import boto

ENV = "DDPCTL_FAULT"


def _items() -> list[tuple[str, str]]:
    raw = os.environ.get(ENV, "")
    out = []
    for item in raw.split(","):
        action, _, arg = item.strip().partition(":")
        if action:
            out.append((action, arg))
    return out


def point(phase: str, step: str) -> None:
    """Called by ``up`` before and after each step; acts only when DDPCTL_FAULT names it."""
    for action, arg in _items():
        if arg != step:
            continue
        if action == phase:  # "after:vpc" / "before:vpc": a crash
            os.kill(os.getpid(), signal.SIGKILL)
        if phase == "after" and action == "interrupt-after":
            # KeyboardInterrupt at the next bytecode, as on Ctrl-C, even where ddpctl was started with
            # SIGINT ignored (a background job, nohup): Python then leaves SIGINT ignored
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
        if phase == "after" and action == "fail-after":
            raise DdpctlError(f"injected failure after {step} ({ENV}, test only)")


def install(client: Any) -> None:
    """Register the client-side hooks DDPCTL_FAULT asks for on a botocore client."""
    for action, arg in _items():
        if action == "capacity":
            zones = set(arg.split("+"))
            client.meta.events.register("before-call.ec2.RunInstances", _capacity(zones))
        elif action == "quota":
            client.meta.events.register("before-call.service-quotas.GetServiceQuota", _quota(float(arg)))
        elif action == "throttle":
            client.meta.events.register("before-send.ec2", _throttle(int(arg)))


def _response(status: int, parsed: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    parsed.setdefault("ResponseMetadata", {})["HTTPStatusCode"] = status
    return boto.http_response("http://ddpctl-fault", status), parsed


def _capacity(zones: set[str]):
    def hook(params: dict[str, Any], **_: Any):
        body = params.get("body") or {}
        if not isinstance(body, dict) or str(body.get("DryRun", "")).lower() == "true":
            return None
        zone = body.get("Placement.AvailabilityZone", "")
        if "all" in zones or zone in zones:
            return _response(
                500,
                {
                    "Error": {
                        "Code": "InsufficientInstanceCapacity",
                        "Message": f"We currently do not have sufficient {body.get('InstanceType')} capacity in "
                        f"the Availability Zone you requested ({zone}). (injected by {ENV})",
                    }
                },
            )
        return None

    return hook


def _quota(value: float):
    def hook(params: dict[str, Any], **_: Any):
        body = params.get("body") or b"{}"
        import json

        try:
            req = json.loads(body)
        except (TypeError, ValueError):
            req = {}
        return _response(
            200,
            {
                "Quota": {
                    "ServiceCode": req.get("ServiceCode", "ec2"),
                    "QuotaCode": req.get("QuotaCode", ""),
                    "Value": value,
                }
            },
        )

    return hook


THROTTLED = (
    b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded. "
    b"(injected by DDPCTL_FAULT)</Message></Error></Errors><RequestID>ddpctl-fault</RequestID></Response>"
)


def _throttle(count: int):
    left = [count]

    def hook(request: Any, **_: Any):
        if left[0] <= 0:
            return None
        left[0] -= 1
        return boto.http_response(request.url, 503, THROTTLED)

    return hook
