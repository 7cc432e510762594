"""The torch versions ddpctl supports (infra/model/torch_versions.py): the verdict on a version, and the
older end of the range run for real (``./dev test`` installs torch 2.13.0's CPU build, without
torchvision, in ``.venv-torch-old`` beside the pinned 2.14.1): message-passing, MNIST with a worker
killed and resumed from its snapshot, and Ctrl-C, through the local provider and over SSH on the test
cluster with ``python_env_mode=existing``. Until 2.14 torchrun had no ``--log-line-prefix-template``,
which the launch line used to pass: every run below failed in 0.5 s with torch 2.13.
Its tests that start processes (real parts) are in tests/integration/test_torch_range.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.model.torch_versions import FLOOR, check_torch, release
from ddpctl.infra.runs.options import RunOptions
from ddpctl.infra.runs.prepare import prepare
from tests.support import REPO
from tests.support.specs import cluster_spec

ROLE_DEFAULTS = REPO / "playbooks" / "roles" / "python_env" / "defaults" / "main.yml"


def test_release_reads_local_tags_and_prereleases() -> None:
    assert release("2.13.0+cpu") == (2, 13, 0)
    assert release("2.15.0.dev20261101+cu130") == (2, 15, 0)
    assert release("2.4") == (2, 4)


def test_a_torch_below_the_floor_is_one_line_naming_the_node_version_and_range() -> None:
    with pytest.raises(UsageError) as exc:
        check_torch("2.3.1+cu121", "node node1")
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("node node1 has torch 2.3.1+cu121: ddpctl supports torch 2.4 or newer")


@pytest.mark.parametrize("version", ["2.4.0", "2.11.0", "2.13.0+cpu", "2.14.1+cu130", "2.15.0", "3.0.0a0"])
def test_supported_versions_pass(version: str) -> None:
    check_torch(version, "node node0")


def test_an_unreadable_version_is_one_line() -> None:
    with pytest.raises(UsageError, match="torch reports version 'unknown', which ddpctl cannot read"):
        check_torch("unknown", "node node0")


def test_run_refuses_a_node_whose_recorded_torch_is_below_the_floor(home: Path) -> None:
    """A node configure recorded with an old torch (its venv changed since `up`, or a state of
    before the range): `run` says which node, which torch and the range, and starts nothing."""
    store = StateStore(home)
    nodes = [
        NodeInfo(name=f"node{i}", host=f"10.0.0.{i}", workdir="/w", python="/env/bin/python", torch=version)
        for i, version in enumerate(("2.14.1+cu130", "2.3.1+cu121"))
    ]
    spec = cluster_spec(name="c", provider="onprem", inventory="/dev/null")
    store.save(ClusterState(spec=spec, cluster_id="abc", status="up", nodes=nodes))
    with pytest.raises(UsageError, match=r"^node node1 \(/env/bin/python\) has torch 2.3.1\+cu121: ddpctl supports"):
        prepare(RunOptions(job="message-passing", name="c", nodes=2), store)
    prepare(RunOptions(job="message-passing", name="c", nodes=1), store)  # node0 alone: fine


def test_the_python_env_role_keeps_the_same_floor() -> None:
    """The playbooks run without ddpctl too: their floor is a role default, kept equal to ddpctl's."""
    match = re.search(r'^python_env_torch_min_version: "([^"]+)"$', ROLE_DEFAULTS.read_text(), re.MULTILINE)
    assert match and match.group(1) == FLOOR
