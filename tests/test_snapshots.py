"""Snapshots where every node can read them after a restart: a shared directory or an S3 prefix.

`ddpctl run --snapshot-dir DIR|s3://BUCKET/PREFIX` sets DDPCTL_SNAPSHOT_DIR for the ranks; the
Trainer's rank 0 reads and writes ``<dir>/<job>_snapshot.pt`` there (boto3 for s3:// URIs). S3 is
moto's server (tests/test_aws.py's fixture: a separate process on loopback); the ranks reach it
through the controller's own environment (AWS_ENDPOINT_URL and fake credentials, inherited by the
local executor), never through ``-e``, which would write them into the run's records.
"""

from __future__ import annotations

import importlib.util
import io
import json
import secrets
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.launch.sbatch import plan_sbatch
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.runs.records import RunOptions
from tests.support import TRAINING
from tests.support.cli import ddpctl, tree
from tests.support.moto import Moto
from tests.support.specs import cluster_spec

BUCKET = "ddpctl-snapshots"


def cluster(env: dict[str, str] | None = None) -> ClusterState:
    spec = cluster_spec(name="c", nodes=2, python="/opt/venv/bin/python", env=env or {})
    nodes = [NodeInfo(f"node{i}", f"10.0.0.{10 + i}", f"/work/node{i}", cpus=4) for i in range(2)]
    return ClusterState(spec=spec, cluster_id="cid", status="up", shared_dir="/shared", nodes=nodes)


def s3_client(moto: Moto):
    import boto3

    return boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("s3", endpoint_url=moto.url)


def load_trainer():
    """training/trainer.py under a unique name (it is a plain script directory, not a package)."""
    spec = importlib.util.spec_from_file_location("ddpctl_snapshots_trainer", TRAINING / "trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_bad_snapshot_dir_is_one_line_and_creates_nothing(home: Path) -> None:
    result = ddpctl("run", "mnist", "--nodes", "2", "--snapshot-dir", "s3:///run1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: --snapshot-dir s3:///run1: has no bucket: give s3://BUCKET/PREFIX, e.g. s3://my-bucket/runs/mnist"
    ]
    assert tree(home) == []
    help_text = ddpctl("run", "--help").stdout
    assert "--snapshot-dir" in help_text and "instance profile" in help_text


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


# ---- the Trainer against moto's S3, in this process ----------------------------------------------


def test_trainer_writes_and_resumes_an_s3_snapshot(
    moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import boto3
    import torch
    import torch.distributed as dist

    for key, value in moto.env(tmp_path / "home", tmp_path).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # boto3.client() reads the env above afresh
    s3 = s3_client(moto)
    s3.create_bucket(Bucket=BUCKET)
    trainer = load_trainer()
    uri = f"s3://{BUCKET}/unit/snap.pt"
    assert trainer.load_snapshot(uri) is None  # no snapshot yet: a fresh start, not an error

    def make(epochs: int):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 2))
        return trainer.Trainer(
            model,
            data,
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            torch.nn.functional.mse_loss,
            torch.device("cpu"),
            batch_size=4,
            epochs=epochs,
            snapshot_path=uri,
        )

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        first = make(1)
        first.train()
        assert f"Epoch 1 | step 2 | snapshot saved to {uri}" in capsys.readouterr().out
        snap = torch.load(io.BytesIO(s3.get_object(Bucket=BUCKET, Key="unit/snap.pt")["Body"].read()))
        assert {"model", "optimizer", "epoch", "step", "rng"} <= set(snap)
        assert snap["epoch"] == 1 and snap["optimizer"]["state"]  # momentum buffers travel too
        assert torch.equal(snap["rng"]["torch"], torch.get_rng_state())

        def torn_save(obj, f):  # serializing fails half-way: nothing is uploaded
            f.write(b"half a snapshot")
            raise OSError("out of memory")

        with monkeypatch.context() as m:
            m.setattr(torch, "save", torn_save)
            first.epochs_run = 7
            with pytest.raises(OSError):
                first._save_snapshot()
        assert trainer.load_snapshot(uri)["epoch"] == 1  # the previous snapshot is intact

        second = make(2)
        assert "Resuming from snapshot at epoch 1 (1 ranks)" in capsys.readouterr().out
        assert second.epochs_run == 1 and second.step == 2
        for a, b in zip(second.raw_model.parameters(), first.raw_model.parameters()):
            assert torch.equal(a, b)
        second.train()
        assert trainer.load_snapshot(uri)["epoch"] == 2
    finally:
        dist.destroy_process_group()
    missing_bucket = "s3://ddpctl-no-such-bucket/snap.pt"
    with pytest.raises(Exception, match="NoSuchBucket"):  # a typo in the bucket fails at start, not after an epoch
        trainer.load_snapshot(missing_bucket)


# ---- a real 2-node run through the CLI -----------------------------------------------------------


@pytest.mark.slow
def test_two_node_run_keeps_its_snapshot_in_s3(moto: Moto, home: Path, tmp_path: Path) -> None:
    import torch

    secret = "fake-secret-" + secrets.token_hex(8)  # distinctive, so a leak is found anywhere
    env = moto.env(home, tmp_path, AWS_SECRET_ACCESS_KEY=secret)
    s3 = s3_client(moto)
    s3.create_bucket(Bucket=BUCKET)
    uri = f"s3://{BUCKET}/run1"
    key = "run1/mnist_snapshot.pt"

    def snapshot() -> dict:
        return torch.load(io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))

    assert ddpctl("up", "--nodes", "2", env=env).returncode == 0
    try:
        first = ddpctl(
            "run", "mnist", "--nodes", "2", "--run-id", "s3a", "--snapshot-dir", uri, "--", "--epochs", "1", env=env
        )
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"snapshot saved to {uri}/mnist_snapshot.pt" in first.stdout
        snap = snapshot()
        assert snap["epoch"] == 1 and {"model", "optimizer", "rng"} <= set(snap)

        second = ddpctl(
            "run", "mnist", "--nodes", "2", "--run-id", "s3b", "--snapshot-dir", uri, "--", "--epochs", "2", env=env
        )
        assert second.returncode == 0, second.stdout + second.stderr
        assert "Resuming from snapshot at epoch 1 (2 ranks)" in second.stdout
        assert snapshot()["epoch"] == 2
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == [key]

        assert tree(home / "clusters" / "default" / "shared") == []  # nothing in the local shared dir
        assert not [p for p in home.rglob("*snapshot*")]  # nor anywhere else under the state home
        recorded = json.loads((home / "runs" / "s3a" / "options.json").read_text())["options"]
        assert recorded["snapshot_dir"] == uri and recorded["env"] == []  # `run --resume` gets it back
        plan = json.loads((home / "runs" / "s3a" / "run.json").read_text())["plan"]
        assert all(n["env"]["DDPCTL_SNAPSHOT_DIR"] == uri for n in plan["nodes"])
        assert not [k for n in plan["nodes"] for k in n["env"] if k.startswith("AWS_")]
    finally:
        down = ddpctl("down", env=env)
        assert down.returncode == 0, down.stderr
    for result in (first, second, down):
        assert secret not in result.stdout + result.stderr
    for path in home.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the AWS secret was written to {path}"
