"""Fixtures and pytest hooks only: helpers are in tests/support/, which tests import directly.
``DDPCTL_FAIL_ON_SKIP=1`` (set by .ci/run) turns every skipped test into a failure."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.aws_env import Env
from tests.support.moto import Moto, running_moto
from tests.support.testbed.cluster import Testbed, exclusive, testbed_down, testbed_missing, testbed_up
from tests.support.testbed.twin import TwinProcess
from tests.support.twin_env import TwinEnv

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


#: Fixtures that use the test cluster (one bridge, fixed node names on this machine): their tests
#: run one after the other, on one pytest-xdist worker, whatever `-n` says.
TESTBED_FIXTURES = frozenset({"testbed", "slurm_testbed", "testbed16", "twin"})


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


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer's compiled artifacts (training/compile_cache.py) in a folder of the test's own, not in
    ~/.cache: no test finds another's warm cache. Created only when a test compiles."""
    monkeypatch.setenv(
        "DDPCTL_COMPILE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / f"compile-{os.urandom(6).hex()}")
    )


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh state home (DDPCTL_HOME) for the test; not created until ddpctl creates it."""
    path = tmp_path / "ddpctl-home"
    monkeypatch.setenv("DDPCTL_HOME", str(path))
    return path


# ---- the test cluster: network namespaces with real sshd (tests/support/testbed/) -------------


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """A fresh 3-node test cluster for each test module (up in ~2 s, down in ~0.5 s)."""
    reason = testbed_missing()
    if reason:
        pytest.skip(reason)
    with exclusive():
        try:
            yield testbed_up(3)
        finally:
            testbed_down()


@pytest.fixture(scope="module")
def slurm_testbed() -> Iterator[Testbed]:
    """The same 3 nodes, with munge, slurmctld on node0 and slurmd on node0 and node1."""
    reason = testbed_missing() or (
        None
        if shutil.which("slurmd")
        else "the Slurm tests need slurmd (apt-get install slurmd slurmctld slurm-client munge)"
    )
    if reason:
        pytest.skip(reason)
    with exclusive():
        try:
            yield testbed_up(3, slurm_nodes=2)
        finally:
            testbed_down()


@pytest.fixture(scope="module")
def testbed16() -> Iterator[Testbed]:
    """Sixteen nodes (tests/integration/test_scale.py), Slurm on the first four (slurmctld on node0)."""
    reason = testbed_missing() or (
        None if shutil.which("slurmd") else "the scale tests need slurmd (apt-get install slurmd)"
    )
    if reason:
        pytest.skip(reason)
    with exclusive():
        try:
            yield testbed_up(16, slurm_nodes=4)
        finally:
            testbed_down()


# ---- the moto server (tests/support/moto.py): one per session, shared by every module ----------


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    if not Path(sys.executable).with_name("moto_server").exists():
        pytest.skip("moto's server is not installed: pip install -e '.[test]' (moto[server])")
    with running_moto(tmp_path_factory.mktemp("moto")) as server:
        yield server


@pytest.fixture
def moto(moto_server: Moto) -> Moto:
    """The moto server, reset: it holds only its defaults (a default VPC, subnets, security group...)."""
    moto_server.reset()
    return moto_server


@pytest.fixture(scope="module")
def twin(moto_server: Moto, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinEnv]:
    reason = testbed_missing()
    if reason:
        pytest.skip(reason)
    with exclusive():
        testbed_up(0)  # the bridge; the twin adds a node per instance
        tmp = tmp_path_factory.mktemp("twin")
        proc = TwinProcess.start(moto_server.url, tmp / "twin.log")
        try:
            yield TwinEnv(proc, tmp)
        finally:
            proc.stop()
            testbed_down()


@pytest.fixture
def aws(moto: Moto, home: Path, tmp_path: Path) -> Env:
    return Env(moto, home, tmp_path)
