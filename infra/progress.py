"""The one type of a progress callback: a line for the user (stderr), e.g. "created vpc vpc-0abc";
and ``activity``, what a long step is doing now (an Ansible task, a wait on EC2), which a callback
that can (the CLI's) shows live with the time it has taken, and a plain callable ignores."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def activity(progress: Progress, text: str | None) -> None:
    """Say what is going on now (``text``), or that it is over (None)."""
    show = getattr(progress, "activity", None)
    if show is not None:
        show(text)
