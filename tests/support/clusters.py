"""A cluster that a test module brings up once (``ddpctl up --provider onprem`` on the test cluster)
and its tests share: the command line, and what the module's fixture hands its tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import ddpctl


@dataclass(frozen=True)
class UpCluster:
    """What a module's cluster fixture yields: the environment its commands run with (its state home
    and Ansible home), ``up``'s finished command, the module's folder, and anything the module made
    for its tests (the inventory, a script)."""

    env: dict[str, str]
    up: subprocess.CompletedProcess
    tmp: Path
    inventory: Path | None = None
    steps: str = ""  # a script the module's runs use (test_scale: all-reduces in a loop)

    @property
    def home(self) -> Path:
        return Path(self.env["DDPCTL_HOME"])


def onprem_up(inventory: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``ddpctl up --provider onprem -i INVENTORY --json [ARGS]``, as every on-prem module brings its
    cluster up; it must succeed."""
    up = ddpctl("up", "--provider", "onprem", "-i", str(inventory), "--json", *args, env=env, timeout=timeout)
    assert up.returncode == 0, up.stdout + up.stderr
    return up
