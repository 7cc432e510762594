"""Shared fixtures. ``DDPCTL_FAIL_ON_SKIP=1`` (set by .ci/run) turns every skipped test into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and os.environ.get("DDPCTL_FAIL_ON_SKIP") == "1":
        sys.stderr.write(f"\nDDPCTL_FAIL_ON_SKIP=1: {len(_skipped)} test(s) skipped: {', '.join(_skipped)}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh state home (DDPCTL_HOME) for the test; not created until ddpctl creates it."""
    path = tmp_path / "ddpctl-home"
    monkeypatch.setenv("DDPCTL_HOME", str(path))
    return path


def ddpctl(*args: str, timeout: float = 300, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (same interpreter, current environment)."""
    return subprocess.run(
        [sys.executable, "-m", "ddpctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        **kwargs,
    )


def tree(path: Path) -> list[str]:
    """Everything under ``path`` (empty if it does not exist)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# ---- the test cluster: network namespaces with real sshd (tests/testbed/up.sh) ----------------

TESTBED_DIR = Path("/tmp/ddpctl-tb")
TESTBED_SCRIPTS = REPO / "tests" / "testbed"
TESTBED_NEEDS = ("ip", "unshare", "/usr/sbin/sshd", "ssh", "ssh-keygen")


class Testbed:
    __test__ = False  # not a test class
    """N nodes (node0.. at 10.77.0.10+i) reachable over SSH with the testbed's key and known_hosts."""

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        self.nodes = [(f"node{i}", f"10.77.0.{10 + i}") for i in range(n)]
        self.ssh_config = root / "ssh" / "ssh_config"
        self.key = root / "ssh" / "id_ed25519"
        self.known_hosts = root / "ssh" / "known_hosts"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def inventory(self, path: Path, n: int | None = None, **group_vars: str) -> Path:
        """An Ansible INI inventory of the first ``n`` nodes, as a user would write it."""
        lines = ["[ddp_nodes]"]
        for name, ip in self.nodes[: n or len(self.nodes)]:
            lines.append(f"{name} ansible_host={ip} ddpctl_node_dir={self.node_dir(name)}")
        lines += ["", "[ddp_nodes:vars]", "ansible_user=root", f"ansible_ssh_private_key_file={self.key}",
                  f"ansible_ssh_common_args='-F {self.ssh_config}'"]  # fmt: skip
        lines += [f"{k}={v}" for k, v in group_vars.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def ssh(self, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", str(self.ssh_config), node, command],
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def netns_pids(self, node: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def testbed_missing() -> str | None:
    import shutil

    if os.geteuid() != 0:
        return "the test cluster needs root (network namespaces, sshd)"
    missing = [t for t in TESTBED_NEEDS if not shutil.which(t)]
    if missing:
        return f"the test cluster needs {', '.join(missing)} (apt-get install openssh-server iproute2)"
    return None


@pytest.fixture(scope="session")
def testbed() -> Testbed:
    reason = testbed_missing()
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "TESTBED": str(TESTBED_DIR), "NODES": "3"}
    subprocess.run([TESTBED_SCRIPTS / "down.sh"], env=env, check=False, capture_output=True)
    up = subprocess.run([TESTBED_SCRIPTS / "up.sh"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run([TESTBED_SCRIPTS / "down.sh"], env=env, check=False)
        raise RuntimeError(f"test cluster did not come up:\n{up.stdout}\n{up.stderr}")
    try:
        yield Testbed(TESTBED_DIR, 3)
    finally:
        subprocess.run([TESTBED_SCRIPTS / "down.sh"], env=env, check=False)
