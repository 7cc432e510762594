"""The bundled jobs and how a job name or a user's script resolves to a file to launch."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

#: The training bundle: ``training/`` beside ``infra/`` in the source tree, and
#: ``ddpctl/training`` beside ``ddpctl/infra`` once installed.
BUNDLE_DIR = Path(__file__).resolve().parent.parent / "training"

#: Bundled job name -> script, relative to the bundle.
BUNDLED_JOBS: dict[str, str] = {
    "message-passing": "message_passing.py",
    "mnist": "mnist.py",
    "mingpt": "mingpt/main.py",
}


@dataclass(frozen=True)
class Job:
    """A resolved job: its name (for snapshots and logs) and the script torchrun runs."""

    name: str
    script: Path
    bundled: bool


def resolve_job(job: str) -> Job:
    """``mnist`` -> the bundled script; ``./train.py`` -> the user's script (which must exist)."""
    if job in BUNDLED_JOBS:
        return Job(job, BUNDLE_DIR / BUNDLED_JOBS[job], bundled=True)
    path = Path(job).expanduser()
    if path.suffix == ".py" or "/" in job:
        try:
            is_dir, is_file = path.is_dir(), path.is_file()
        except OSError as exc:  # a name too long, a loop of links...
            raise UsageError(f"script {job!r}: {exc.strerror or exc}: give the path to a Python file") from None
        if is_dir:
            raise UsageError(f"script {job!r} is a directory: give the path to a Python file")
        if not is_file:
            raise UsageError(f"script {job!r} does not exist: give the path to a Python file")
        if not os.access(path, os.R_OK):  # read here to be uploaded, or by local nodes running as you
            raise UsageError(f"script {job!r} cannot be read: `chmod u+r {job}`, or give a script you can read")
        return Job(path.stem, path.resolve(), bundled=False)
    choices = ", ".join(BUNDLED_JOBS)
    raise UsageError(f"unknown job {job!r}: choose one of {choices}, or give the path to a .py script")
