"""The bundled jobs and how a job name or a user's script resolves to a file to launch."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import UsageError

#: The training bundle: ``training/`` beside ``infra/`` in the source tree, and
#: ``ddpctl/training`` beside ``ddpctl/infra`` once installed.
BUNDLE_DIR = Path(__file__).resolve().parents[2] / "training"

#: Bundled job name -> script, relative to the bundle.
BUNDLED_JOBS: dict[str, str] = {
    "message-passing": "message_passing.py",
    "mnist": "mnist.py",
    "mingpt": "mingpt/main.py",
}


#: the bundled jobs whose arguments their parser (training/trainer.py parse_config) checks
PARSED_JOBS = ("mnist", "mingpt")


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
        check_python_source(job, path)
        return Job(path.stem, path.resolve(), bundled=False)
    choices = ", ".join(BUNDLED_JOBS)
    raise UsageError(f"unknown job {job!r}: choose one of {choices}, or give the path to a .py script")


def check_python_source(job: str, path: Path) -> None:
    """torchrun runs the script with Python: a shell script (or any file that is not Python) is
    refused now, not after the cluster started and every rank failed. A ``.py`` file, or one whose
    ``#!`` line names Python, is taken as it is (it may need a newer Python than this one)."""
    with open(path, "rb") as f:
        head = f.read(64 * 1024)
    first = head.split(b"\n", 1)[0]
    if path.suffix == ".py" or (first.startswith(b"#!") and b"python" in first):
        return
    try:
        compile(head.decode(), str(path), "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        said = f" (its first line is {first.decode(errors='replace')[:60]!r})" if first.startswith(b"#!") else ""
        raise UsageError(
            f"{job} is not a Python script{said}: torchrun runs the script with Python; "
            "give the .py file the shell script would start"
        ) from None


def check_bundled_args(job: Job, args: tuple[str, ...], python: str | None) -> None:
    """A bundled job's arguments, parsed by the job's own parser before anything starts (the script
    with ``DDPCTL_PARSE_ONLY=1`` exits after parsing), torch stood in for (``torchless.py``: 0.1 s
    of CPU where importing torch took 1.5-3 s). ``python``: the Python the nodes run the job with
    (None: none here with torch, e.g. a controller without it; the nodes will say)."""
    if job.name not in PARSED_JOBS or not args or python is None:
        return
    import subprocess

    env = {**os.environ, "DDPCTL_PARSE_ONLY": "1", "PYTHONPATH": str(BUNDLE_DIR)}
    try:
        out = subprocess.run(
            [python, str(Path(__file__).with_name("torchless.py")), str(job.script), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
            cwd=job.script.parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # the Python is checked elsewhere; the nodes parse the arguments anyway
    if out.returncode == 2:  # argparse's usage error
        error = next((line for line in reversed(out.stderr.splitlines()) if ": error: " in line), "")
        if error:
            said = error.split(": error: ", 1)[1]
            raise UsageError(f"{job.name} -- {' '.join(args)}: {said} (`python {job.script} --help` lists its flags)")
