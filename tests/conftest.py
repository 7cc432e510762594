"""Shared fixtures. ``DDPCTL_FAIL_ON_SKIP=1`` (set by .ci/run) turns every skipped test into a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddpctl.infra.procs import RUN_KEY, find_tagged

REPO = Path(__file__).resolve().parents[1]
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


#: Fixtures that use the test cluster (one bridge, fixed node names on this machine): their tests
#: run one after the other, on one pytest-xdist worker, whatever `-n` says.
TESTBED_FIXTURES = frozenset({"testbed", "slurm_testbed", "twin"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `-n N --dist loadgroup` (./dev test): every test that uses the test cluster in one group, the
    other modules each in a group of their own (so a module's fixtures are set up once)."""
    for item in items:
        uses_testbed = TESTBED_FIXTURES & set(getattr(item, "fixturenames", ()))
        group = "testbed" if uses_testbed else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


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


def run_processes(run_id: str) -> list[psutil.Process]:
    """Every process of a run, found by its marker in the environment (as `ddpctl down` finds them)."""
    return find_tagged(RUN_KEY, run_id)


def start_run(run_id: str, *job_args: str, run_args: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ddpctl",
            "run",
            "mnist",
            "--nodes",
            "2",
            "--run-id",
            run_id,
            *run_args,
            "--",
            *job_args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_worker(run_id: str, rank: int, timeout: float = 120) -> psutil.Process:
    """The worker process of global ``rank``, once it is training (its first epoch line printed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in run_processes(run_id):
            try:
                if (
                    proc.environ().get("RANK") == str(rank)
                    and "mnist.py" in " ".join(proc.cmdline())
                    and time.time() - proc.create_time() > 4  # past init_process_group: in training
                ):
                    return proc
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no worker of rank {rank} for run {run_id}")


def assert_nothing_left(run_id: str, home: Path) -> None:
    assert run_processes(run_id) == []
    for state in (home / "clusters").glob("*.json"):
        raise AssertionError(f"cluster left behind: {state}")


class Output:
    """A running ``ddpctl run``'s output, read by a thread, so that waiting on it has a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        import queue
        import threading

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
        import queue

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
        """Wait for the run to end; return everything it printed."""
        self.proc.wait(timeout=timeout)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return self.text

    @property
    def text(self) -> str:
        return "".join(self.lines)


# ---- the test cluster: network namespaces with real sshd (tests/testbed/) ---------------------

from testbed.cluster import TESTBED_DIR, Testbed, testbed_down, testbed_missing, testbed_up  # noqa: E402, F401


@pytest.fixture(scope="module")
def testbed() -> Testbed:
    """A fresh 3-node test cluster for each test module (up in ~2 s, down in ~0.5 s)."""
    reason = testbed_missing()
    if reason:
        pytest.skip(reason)
    try:
        yield testbed_up(3)
    finally:
        testbed_down()


@pytest.fixture(scope="module")
def slurm_testbed() -> Testbed:
    """The same 3 nodes, with munge, slurmctld on node0 and slurmd on node0 and node1."""
    reason = testbed_missing() or (
        None
        if shutil.which("slurmd")
        else "the Slurm tests need slurmd (apt-get install slurmd slurmctld slurm-client munge)"
    )
    if reason:
        pytest.skip(reason)
    try:
        yield testbed_up(3, slurm_nodes=2)
    finally:
        testbed_down()


# ---- the moto server (tests/moto_server.py): one per session, shared by every module -----------


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory):
    from moto_server import running_moto

    if not Path(sys.executable).with_name("moto_server").exists():
        pytest.skip("moto's server is not installed: pip install 'ddpctl[test]' (moto[server])")
    with running_moto(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def moto(moto_server):
    """The moto server, reset: it holds only its defaults (a default VPC, subnets, security group...)."""
    moto_server.reset()
    return moto_server
