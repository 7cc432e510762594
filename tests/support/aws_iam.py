"""What tests/unit/test_aws_iam.py and tests/integration/test_aws_iam.py share: the two policies in
docs/, the user's (``POLICY``: every call of the aws provider) and the head node's (``HEAD_POLICY``:
a node's replacement, ``spot.replace_instances``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import REPO

POLICY = REPO / "docs" / "aws-iam-policy.json"
HEAD_POLICY = REPO / "docs" / "aws-head-iam-policy.json"


def statements(policy: Path = POLICY) -> list[dict]:
    return json.loads(policy.read_text())["Statement"]


def as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def policy_actions(policy: Path = POLICY) -> set[str]:
    return {a for s in statements(policy) for a in as_list(s["Action"])}
