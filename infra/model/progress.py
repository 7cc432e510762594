"""The one type of a progress callback: a line for the user (stderr), e.g. "created vpc vpc-0abc";
and ``activity``, what a long step is doing now (an Ansible task, a wait on EC2), which a callback
that can (the CLI's) shows live with the time it has taken, and a plain callable ignores.

``step`` marks a long step that has nothing finer to say (``check``'s tests, ``down``): its text
is the activity while it runs; a finer activity inside it (an EC2 or ParallelCluster wait) shows
instead, and once that ends (``activity(progress, None)``) the step's text again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Progress = Callable[[str], None]


def activity(progress: Progress, text: str | None) -> None:
    """Say what is going on now (``text``), or that it is over (None: the enclosing ``step``'s
    text again, if one runs)."""
    show = getattr(progress, "activity", None)
    if show is None:
        return
    steps = getattr(progress, "steps", None)  # the enclosing steps, on a callback that keeps them
    show(steps[-1] if text is None and steps else text)


@contextmanager
def step(progress: Progress, text: str) -> Iterator[None]:
    """A long step: ``text`` as the activity while the block runs (nothing on a plain callable)."""
    steps = getattr(progress, "steps", None)
    if steps is None:
        activity(progress, text)
        try:
            yield
        finally:
            activity(progress, None)
        return
    steps.append(text)
    activity(progress, text)
    try:
        yield
    finally:
        steps.pop()
        activity(progress, None)
