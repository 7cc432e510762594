"""A progress callback for tests: what a step said, and the activity it showed (as the CLI's does)."""

from __future__ import annotations


class Recorder:
    """A progress callback that can show activity, as the CLI's does."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.activities: list[str | None] = []

    def __call__(self, message: str) -> None:
        self.lines.append(message)

    def activity(self, text: str | None) -> None:
        self.activities.append(text)
