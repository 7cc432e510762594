"""The EC2 twin as the tests use it: ddpctl invocations against the twin in front of the session's
moto server (tests/support/testbed/twin.py), and what "nothing left" means there. The ``twin`` fixture
(one per module) is in tests/conftest.py."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import psutil

from tests.support.cli import start_ddpctl
from tests.support.moto import Moto
from tests.support.testbed.twin import TwinProcess

CALLER = "10.77.0.1/32"  # the controller's address on the test cluster's bridge, as the nodes see it


class TwinEnv:
    """The twin in front of the session's moto server, and ddpctl invocations against it."""

    def __init__(self, proc: TwinProcess, tmp: Path) -> None:
        self.proc, self.tmp = proc, tmp
        self.home = tmp / "ddpctl-home"
        self.moto = Moto(proc.url)  # every call through the twin: addresses as the twin reports them
        self.access_key = "AKIATWIN" + uuid.uuid4().hex[:12].upper()
        self.secret = "twin-secret-" + uuid.uuid4().hex
        config = tmp / "ddpctl.toml"
        config.write_text(f'[cluster]\nssh_cidr = "{CALLER}"\n')
        self.env = self.moto.env(
            self.home,
            tmp,
            DDPCTL_CONFIG=str(config),
            AWS_ACCESS_KEY_ID=self.access_key,
            AWS_SECRET_ACCESS_KEY=self.secret,
        )
        self.moto.reset()  # through the twin: no node of an earlier module is left
        self.baseline = self.moto.inventory()

    def ddpctl(self, *args: str, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ddpctl", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            **kw,
        )

    def ok(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        result = self.ddpctl(*args, timeout=timeout)
        assert result.returncode == 0, f"ddpctl {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    def start(self, *args: str) -> subprocess.Popen:
        """ddpctl in the background (a SIGINT is Ctrl-C), output (merged) on a pipe."""
        return start_ddpctl(*args, env=self.env, stdin=subprocess.DEVNULL)

    def state(self, name: str = "default") -> dict:
        return json.loads((self.home / "clusters" / f"{name}.json").read_text())

    def assert_nothing_left(self, name: str) -> None:
        now = self.moto.inventory()
        assert now == self.baseline, {k: now[k] ^ self.baseline[k] for k in now if now[k] != self.baseline[k]}
        assert TwinProcess.nodes() == []
        assert not (self.home / "clusters" / f"{name}.json").exists()
        assert not (self.home / "clusters" / name).exists()
        assert leftover_ansible(self.home / "clusters" / name) == []


def leftover_ansible(cluster_dir: Path) -> list[str]:
    """Controller processes still working on the cluster (ansible-playbook with its inventory)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if str(cluster_dir) in cmd and "ansible" in cmd:
            out.append(cmd)
    return out
