"""The one JSON envelope every command's ``--json`` prints: the same top-level keys everywhere.

    {"schema": 1, "command": "run", "ok": true, "at": "2026-11-24T09:55:00Z", "error": null, ...}

The command's own keys follow (``cluster``, ``plan``, ``runs``...). On failure ``ok`` is false and
``error`` is ``{"code": EXIT_CODE, "message": "..."}`` (the ``Error:`` line). Times are ISO 8601, UTC.
The document is strict JSON (RFC 8259): a number that is not finite (a diverged run's NaN loss, an
``Infinity`` in a metrics line) is ``null``, here for every command (``dumps``).
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

SCHEMA = 1


def envelope(command: str | None, ok: bool, *, error: dict[str, Any] | None = None, **doc: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "command": command, "ok": ok, "at": iso(), "error": error, **doc}


def dumps(doc: dict[str, Any]) -> str:
    """A command's document as strict JSON text (what is not JSON's, a path, as its text)."""
    return json.dumps(finite(doc), indent=2, default=str, allow_nan=False)


def finite(value: Any) -> Any:
    """``value`` with every number that is not finite (NaN, Infinity) made None: JSON has none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def iso(epoch: float | None = None) -> str:
    when = (
        datetime.datetime.now(datetime.timezone.utc)
        if epoch is None
        else datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    )
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")
