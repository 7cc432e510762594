"""The one type of a progress callback: a line for the user (stderr), e.g. "created vpc vpc-0abc"."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
