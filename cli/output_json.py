"""The one JSON envelope every command's ``--json`` prints: the same top-level keys everywhere.

    {"schema": 1, "command": "run", "ok": true, "at": "2026-11-24T09:55:00Z", "error": null, ...}

The command's own keys follow (``cluster``, ``plan``, ``runs``...). On failure ``ok`` is false and
``error`` is ``{"code": EXIT_CODE, "message": "..."}`` (the ``Error:`` line). Times are ISO 8601, UTC.
"""

from __future__ import annotations

import datetime
from typing import Any

SCHEMA = 1


def envelope(command: str | None, ok: bool, *, error: dict[str, Any] | None = None, **doc: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "command": command, "ok": ok, "at": iso(), "error": error, **doc}


def iso(epoch: float | None = None) -> str:
    when = (
        datetime.datetime.now(datetime.timezone.utc)
        if epoch is None
        else datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    )
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")
