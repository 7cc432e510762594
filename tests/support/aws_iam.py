"""What tests/unit/test_aws_iam.py and tests/integration/test_aws_iam.py share."""

from __future__ import annotations

import json

from tests.support import REPO

POLICY = REPO / "docs" / "aws-iam-policy.json"


def statements() -> list[dict]:
    return json.loads(POLICY.read_text())["Statement"]


def as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def policy_actions() -> set[str]:
    return {a for s in statements() for a in as_list(s["Action"])}
