"""The real ``ddpctl`` command in a subprocess (same interpreter, the test's environment): to the end
(``ddpctl``), or in the background (``start_ddpctl``, ``start_run``) with its ``Output`` read as it
comes."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.processes import spawn


def ddpctl(*args: str, timeout: float = 300, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run the real CLI to its end; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        **kwargs,
    )


def start_ddpctl(*args: str, **popen_kwargs) -> subprocess.Popen:
    """The real CLI in the background (``spawn``: a SIGINT is Ctrl-C), stdout and stderr merged on a
    text pipe; ``popen_kwargs`` (env, stdin...) go to Popen."""
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True, **popen_kwargs}
    return spawn([sys.executable, "-m", "ddpctl", *args], **options)


def run_results(env: dict[str, str]) -> dict[str, str]:
    """Each run's result as `ddpctl runs` says it (through the cluster for a run whose ddpctl is gone)."""
    result = ddpctl("runs", "--json", env=env)
    assert result.returncode == 0, result.stderr
    import json

    return {r["run_id"]: r["result"] for r in json.loads(result.stdout)["runs"]}


def ended(env: dict[str, str], run_id: str, timeout: float = 300) -> str:
    """The run's result as `runs` reads it, once it is not running any more (or at ``timeout``).
    Asked every 2 s: each `ddpctl runs` is a Python process here and, for a run on a head node, an
    SSH session and a Python there (about 0.5 CPU-s)."""
    deadline = time.monotonic() + timeout
    while True:
        result = run_results(env).get(run_id, "?")
        if result not in ("running", "unfinished", "?") and not result.startswith("killed"):
            return result
        if time.monotonic() > deadline:
            return result
        time.sleep(2)


def wait_for_line(proc: subprocess.Popen, text: str) -> list[str]:
    """The lines of a ``start_ddpctl`` process's output up to the first holding ``text``."""
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError("".join(seen))


def start_run(run_id: str, *job_args: str, run_args: tuple[str, ...] = ()) -> subprocess.Popen:
    """`ddpctl run mnist --nodes 2` on the local provider, in the background."""
    return start_ddpctl("run", "mnist", "--nodes", "2", "--run-id", run_id, *run_args, "--", *job_args)


def tree(path: Path) -> list[str]:
    """Everything under ``path`` (empty if it does not exist)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


class Output:
    """A running command's output, read by a thread, so that waiting on it has a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self._queue.put(line)
            self._queue.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, needle: str, timeout: float = 180) -> str:
        """Wait for a line that contains ``needle`` (and return it); fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"{needle!r} never printed; the run ended:\n{self.text}")
            self.lines.append(line)
            if needle in line:
                return line
        raise AssertionError(f"{needle!r} not printed within {timeout:.0f} s:\n{self.text}")

    def finish(self, timeout: float = 300) -> str:
        """Wait for the command to end; return everything it printed."""
        self.proc.wait(timeout=timeout)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return self.text

    @property
    def text(self) -> str:
        return "".join(self.lines)


def assert_resumed_to_90(out: str) -> None:
    """A 2-epoch MNIST run whose worker was killed in epoch 2: it resumed from the epoch-1 snapshot
    and ended at 90 % held-out accuracy or more."""
    assert "Resuming from snapshot at epoch 1" in out, out
    accuracies = [float(a) for a in re.findall(r"epoch 2/2 .* held-out accuracy ([\d.]+)%", out)]
    assert accuracies and accuracies[-1] >= 90.0, out
