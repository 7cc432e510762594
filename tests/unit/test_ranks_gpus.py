"""Ranks and GPUs agree (issue 37): a GPU job with more processes on a node than the GPUs it has is
refused before anything starts, in one line naming the node and its GPU count, whatever the
provider or launcher (from ``NodeInfo.gpus``). Real local runs: tests/integration/test_local_gpus.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.runs.options import RunOptions
from ddpctl.infra.runs.prepare import check_ranks_fit_gpus, prepare
from tests.support.specs import cluster_spec


def gpu_cluster(gpus: tuple[int, ...], **spec: object) -> ClusterState:
    nodes = [
        NodeInfo(f"node{i}", f"10.0.0.{i + 1}", "/w", gpus=g, ssh=Host(name=f"node{i}", address=f"10.0.0.{i + 1}"))
        for i, g in enumerate(gpus)
    ]
    return ClusterState(
        spec=cluster_spec(name="gpu", provider="onprem", inventory="/dev/null", nodes=len(gpus), **spec),
        cluster_id="abc",
        status="up",
        nodes=nodes,
    )


def test_more_ranks_than_a_nodes_gpus_is_one_line() -> None:
    with pytest.raises(UsageError) as err:
        check_ranks_fit_gpus(gpu_cluster((4, 1)), RunSpec(job="mnist", nodes=2, nproc_per_node=4, run_id="r1"))
    assert str(err.value) == (
        "4 process(es) on node node1 of cluster 'gpu', which has 1 GPU(s) (counted at up/configure): each rank of a "
        "GPU job needs a GPU of its own: give --nproc-per-node 1 or fewer, or -e CUDA_VISIBLE_DEVICES= (empty) for "
        "ranks that use no GPU"
    )


@pytest.mark.parametrize(
    ("gpus", "nproc", "env", "cluster_env"),
    [
        ((4, 1), (4, 1), {}, {}),  # one per GPU
        ((4, 4), 2, {}, {}),  # fewer is fine
        ((0, 0), 8, {}, {}),  # nodes without GPUs: CPU ranks
        ((1, 1), 4, {"CUDA_VISIBLE_DEVICES": ""}, {}),  # the run hides the GPUs: a CPU job
        ((1, 1), 4, {}, {"CUDA_VISIBLE_DEVICES": "0"}),  # the cluster's choice, as the user's
    ],
)
def test_what_fits_or_is_the_users_choice(gpus, nproc, env, cluster_env) -> None:
    cluster = gpu_cluster(gpus, env=cluster_env)
    check_ranks_fit_gpus(cluster, RunSpec(job="mnist", nodes=2, nproc_per_node=nproc, run_id="r1", env=env))


@pytest.mark.parametrize("launcher", ["torchrun", "sbatch"])
def test_refused_in_prepare_before_anything_whatever_the_launcher(home: Path, launcher: str) -> None:
    store = StateStore(home)
    cluster = gpu_cluster((1, 1))
    cluster.launcher = launcher
    store.save(cluster)
    with pytest.raises(UsageError, match="4 process.es. on node node0 of cluster 'gpu', which has 1 GPU"):
        prepare(RunOptions(job="message-passing", name="gpu", nproc_per_node=4), store)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
