"""Snapshots where every node can read them after a restart: a shared directory or an S3 prefix.

`ddpctl run --snapshot-dir DIR|s3://BUCKET/PREFIX` sets DDPCTL_SNAPSHOT_DIR for the ranks; the
Trainer's rank 0 reads and writes ``<dir>/<job>_snapshot.pt`` there (boto3 for s3:// URIs). S3 is
moto's server (tests/{unit,integration}/test_aws.py's fixture: a separate process on loopback); the ranks reach it
through the controller's own environment (AWS_ENDPOINT_URL and fake credentials, inherited by the
local executor), never through ``-e``, which would write them into the run's records.

Its tests that start processes (real parts) are in tests/integration/test_snapshots.py.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.launch.sbatch import plan_sbatch
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.runs.options import RunOptions
from tests.support.snapshots import load_trainer
from tests.support.specs import cluster_spec


def cluster(env: dict[str, str] | None = None) -> ClusterState:
    spec = cluster_spec(name="c", nodes=2, python="/opt/venv/bin/python", env=env or {})
    nodes = [NodeInfo(f"node{i}", f"10.0.0.{10 + i}", f"/work/node{i}", cpus=4) for i in range(2)]
    return ClusterState(spec=spec, cluster_id="cid", status="up", shared_dir="/shared", nodes=nodes)


# ---- planning and records: pure, fast ----------------------------------------------------------


def test_snapshot_dir_reaches_every_node_and_an_explicit_env_wins() -> None:
    run = RunSpec(job="mnist", nodes=2, run_id="r1", snapshot_dir="s3://bkt1/runs/a")
    for node in plan_torchrun(cluster(), run, script="s.py", port=1).nodes:
        assert node.env["DDPCTL_SNAPSHOT_DIR"] == "s3://bkt1/runs/a"
        assert node.env["DDPCTL_SHARED_DIR"] == "/shared"  # still there for anything else
        assert not [k for k in node.env if k.startswith("AWS_")]  # credentials never go through the plan
    # --snapshot-dir (a run option) beats the cluster's env; the run's own -e beats both
    on_cluster = cluster({"DDPCTL_SNAPSHOT_DIR": "/from-up"})
    assert (
        plan_torchrun(on_cluster, run, script="s.py", port=1).nodes[0].env["DDPCTL_SNAPSHOT_DIR"] == "s3://bkt1/runs/a"
    )
    explicit = replace(run, env={"DDPCTL_SNAPSHOT_DIR": "/mine"})
    assert plan_torchrun(on_cluster, explicit, script="s.py", port=1).nodes[1].env["DDPCTL_SNAPSHOT_DIR"] == "/mine"
    # no --snapshot-dir: a folder of the run's own, so that two runs never share a snapshot; a
    # DDPCTL_SNAPSHOT_DIR the cluster was brought up with (up -e) still holds
    first, second = (
        plan_torchrun(cluster(), RunSpec(job="mnist", nodes=2, run_id=r), script="s.py", port=1) for r in ("ra", "rb")
    )
    assert first.nodes[1].env["DDPCTL_SNAPSHOT_DIR"] == "/shared/runs/ra"
    assert second.nodes[0].env["DDPCTL_SNAPSHOT_DIR"] == "/shared/runs/rb"
    assert (
        plan_torchrun(on_cluster, RunSpec(job="mnist", nodes=2), script="s.py", port=1)
        .nodes[0]
        .env["DDPCTL_SNAPSHOT_DIR"]
        == "/from-up"
    )
    sbatch = plan_sbatch(run, python="python3", script="s.py", output_dir="/o", cluster_id="cid")
    assert "DDPCTL_SNAPSHOT_DIR=s3://bkt1/runs/a" in sbatch.script


def test_run_options_round_trip_the_snapshot_dir() -> None:
    opts = RunOptions(
        job="mnist", args=("--epochs", "2"), nodes=2, nproc_per_node=(2, 1), env=("A=1",), snapshot_dir="s3://bkt1/run1"
    )
    doc = json.loads(json.dumps(opts.to_dict()))
    assert doc["snapshot_dir"] == "s3://bkt1/run1"
    assert RunOptions.from_dict(doc) == opts
    older = {k: v for k, v in doc.items() if k != "snapshot_dir"}  # recorded before the option existed
    assert RunOptions.from_dict(older).snapshot_dir == ""


@pytest.mark.parametrize(
    "value,message",
    [
        ("s3://", "has no bucket"),
        ("s3:///prefix", "has no bucket"),
        ("s3://Bad_Bucket/x", "bucket name 'Bad_Bucket' is not valid"),
        ("gs://bkt1/x", "give an absolute directory"),
        ("relative/dir", "give an absolute directory"),
    ],
)
def test_bad_snapshot_dirs_are_refused(value: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        RunSpec(job="mnist", snapshot_dir=value)


def test_default_snapshot_path(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = load_trainer()
    for var in ("DDPCTL_SNAPSHOT_DIR", "DDPCTL_SHARED_DIR"):
        monkeypatch.delenv(var, raising=False)
    assert trainer.default_snapshot_path("mnist") == "./mnist_snapshot.pt"
    monkeypatch.setenv("DDPCTL_SHARED_DIR", "/shared")
    assert trainer.default_snapshot_path("mnist") == "/shared/mnist_snapshot.pt"
    monkeypatch.setenv("DDPCTL_SNAPSHOT_DIR", "/fsx/snaps")  # before the shared dir
    assert trainer.default_snapshot_path("mnist") == "/fsx/snaps/mnist_snapshot.pt"
    for uri in ("s3://bkt1/run1", "s3://bkt1/run1/"):
        monkeypatch.setenv("DDPCTL_SNAPSHOT_DIR", uri)
        assert trainer.default_snapshot_path("mingpt") == "s3://bkt1/run1/mingpt_snapshot.pt"
    monkeypatch.setenv("DDPCTL_SNAPSHOT_DIR", "s3://bkt1")
    assert trainer.default_snapshot_path("mnist") == "s3://bkt1/mnist_snapshot.pt"


def test_s3_snapshot_without_boto3_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = load_trainer()
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 -> ImportError
    with pytest.raises(RuntimeError, match=r"snapshot path s3://bkt1/k needs boto3 on the nodes: pip install boto3"):
        trainer.load_snapshot("s3://bkt1/k")
    with pytest.raises(RuntimeError, match="needs boto3"):
        trainer.save_snapshot({"epoch": 1}, "s3://bkt1/k")
