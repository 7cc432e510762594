"""moto's EC2 server as the AWS tests use it: one test's ddpctl invocations (its state home, the
server's environment) and what "nothing left" means there; the ``up`` command line they share; the
error lines they read. The ``aws`` fixture is in tests/conftest.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.support.cli import ddpctl
from tests.support.moto import SSH_CIDR, Moto

UP = ("up", "--provider", "aws", "--name", "c1", "--ssh-cidr", SSH_CIDR, "--yes", "--no-configure")
CONFIGURED_UP = UP[:-1]  # with the configure step: only a dry run can have it here


class Env:
    """One test's ddpctl invocations: state home, environment, and the server's baseline."""

    def __init__(self, moto: Moto, home: Path, tmp: Path) -> None:
        self.moto, self.home, self.tmp = moto, home, tmp
        self.baseline = moto.inventory()

    def run(
        self, *args: str, fault: str = "", timeout: float = 120, stdin: Any = None, **extra: str
    ) -> subprocess.CompletedProcess:
        env = self.moto.env(self.home, self.tmp, **extra)
        if fault:
            env["DDPCTL_FAULT"] = fault
        return ddpctl(*args, env=env, timeout=timeout, stdin=stdin)

    def ok(self, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        result = self.run(*args, **kw)
        assert result.returncode == 0, result.stderr
        return result

    def added(self) -> dict[str, set[str]]:
        now = self.moto.inventory()
        return {k: now[k] - self.baseline[k] for k in now if now[k] - self.baseline[k]}

    def assert_clean(self) -> None:
        now = self.moto.inventory()
        assert now == self.baseline, {k: (now[k] ^ self.baseline[k]) for k in now if now[k] != self.baseline[k]}
        assert not (self.home / "clusters" / "c1.json").exists()
        assert not (self.home / "clusters" / "c1").exists()


def line_with(text: str, prefix: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, text
    return lines[0]


def error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), result.stderr
    return lines[-1]


def only_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return error_line(result)
