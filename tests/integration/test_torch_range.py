"""The torch versions ddpctl supports (infra/model/torch_versions.py): the verdict on a version, and the
older end of the range run for real (``./dev test`` installs torch 2.13.0's CPU build, without
torchvision, in ``.venv-torch-old`` beside the pinned 2.14.1): message-passing and Ctrl-C through the
local provider and over SSH on the test cluster with ``python_env_mode=existing``, and MNIST with a
worker killed and resumed from its snapshot through the local provider (torchrun restarts it alike
whichever way it was started: the same over SSH, on the pinned torch, is test_onprem's). Until 2.14 torchrun had no ``--log-line-prefix-template``,
which the launch line used to pass: every run below failed in 0.5 s with torch 2.13.
Its pure tests (no process beyond Python) are in tests/unit/test_torch_range.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddpctl.infra.model.torch_versions import OLDER_TESTED
from tests.support import REPO
from tests.support.cli import Output, assert_resumed_to_90, ddpctl, start_ddpctl, start_run
from tests.support.clusters import UpCluster, onprem_up
from tests.support.processes import assert_nothing_left, wait_for_worker
from tests.support.testbed.cluster import Testbed, run_procs, worker_pid

# ---- the older end of the range, for real -------------------------------------------------------


@pytest.fixture(scope="module")
def old_python() -> str:
    path = os.environ.get("DDPCTL_OLD_TORCH_PYTHON") or str(REPO / ".venv-torch-old" / "bin" / "python")
    probe = "import importlib.metadata as m; print(m.version('torch'))"
    found = subprocess.run([path, "-c", probe], capture_output=True, text=True) if Path(path).is_file() else None
    if found is None or found.returncode != 0:
        pytest.skip(f"no older torch at {path}: `./dev test` installs torch {OLDER_TESTED} there")
    assert found.stdout.strip().split("+")[0] == OLDER_TESTED, found.stdout
    return path


@pytest.mark.slow
def test_local_message_passing_on_the_older_torch(home: Path, old_python: str) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", "--python", old_python)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout  # the rank prefix, from the env
    assert result.stdout.count("all_reduce OK (3.0 == 3.0)") == 2


@pytest.mark.slow
def test_local_mnist_on_the_older_torch_restarts_and_resumes(home: Path, old_python: str) -> None:
    """MNIST without torchvision (this torch has none that loads), a worker killed in epoch 2,
    torchrun restarts the workers, the job resumes from the epoch-1 snapshot and reaches 90 %."""
    run_args = ("--python", old_python, "--max-restarts", "1")
    proc = start_run("oldrestart", "--epochs", "2", "--data-fraction", "0.5", run_args=run_args)
    try:
        output = Output(proc)
        output.until("snapshot saved")
        worker = wait_for_worker("oldrestart", rank=1, timeout=60)
        time.sleep(0.5)  # into epoch 2 (about 3 s on half the images)
        worker.send_signal(signal.SIGKILL)
        out = output.finish(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "using the bundled MNIST test set" in out
    assert_resumed_to_90(out)
    assert_nothing_left("oldrestart", home)


@pytest.mark.slow
def test_local_ctrl_c_on_the_older_torch_stops_everything(home: Path, old_python: str) -> None:
    proc = start_run("oldint", "--epochs", "20", run_args=("--python", old_python))
    try:
        wait_for_worker("oldint", rank=0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    assert_nothing_left("oldint", home)


# ---- on the test cluster: the nodes' own (older) torch, python_env_mode=existing ---------------------


@pytest.fixture(scope="module")
def old_cluster(testbed: Testbed, old_python: str, tmp_path_factory: pytest.TempPathFactory):
    """`ddpctl up --provider onprem` on 2 test-cluster nodes whose Python is the older torch's venv."""
    tmp = tmp_path_factory.mktemp("old-torch")
    env = {**os.environ, "DDPCTL_HOME": str(tmp / "home"), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    venv = str(Path(old_python).parent.parent)
    inventory = testbed.inventory(tmp / "hosts.ini", 2, python_env_mode="existing", python_env_path=venv)
    up = onprem_up(inventory, env)
    yield UpCluster(env=env, up=up, tmp=tmp, inventory=inventory)
    down = ddpctl("down", env=env)
    assert down.returncode == 0, down.stderr


@pytest.mark.slow
def test_existing_mode_accepts_the_nodes_torch_and_records_it(old_cluster) -> None:
    nodes = json.loads(old_cluster.up.stdout)["cluster"]["nodes"]
    assert [n["torch"].split("+")[0] for n in nodes] == [OLDER_TESTED, OLDER_TESTED]


@pytest.mark.slow
def test_message_passing_over_ssh_on_the_older_torch(old_cluster) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", env=old_cluster.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout


@pytest.mark.slow
def test_ctrl_c_over_ssh_on_the_older_torch(old_cluster, testbed: Testbed) -> None:
    proc = start_ddpctl("run", "mnist", "--nodes", "2", "--", "--epochs", "20", env=old_cluster.env)
    try:
        worker_pid(testbed, "node1")
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out
    for node in ("node0", "node1"):
        assert run_procs(testbed, node) == [], f"survivors on {node}"
