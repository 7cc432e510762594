"""Snapshots where every node can read them after a restart: a shared directory or an S3 prefix.

`ddpctl run --snapshot-dir DIR|s3://BUCKET/PREFIX` sets DDPCTL_SNAPSHOT_DIR for the ranks; the
Trainer's rank 0 reads and writes ``<dir>/<job>_snapshot.pt`` there (boto3 for s3:// URIs). S3 is
moto's server (tests/{unit,integration}/test_aws.py's fixture: a separate process on loopback); the ranks reach it
through the controller's own environment (AWS_ENDPOINT_URL and fake credentials, inherited by the
local executor), never through ``-e``, which would write them into the run's records.

Its pure tests (no process beyond Python) are in tests/unit/test_snapshots.py.
"""

from __future__ import annotations

import io
import json
import secrets
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, tree
from tests.support.moto import Moto
from tests.support.snapshots import load_trainer

BUCKET = "ddpctl-snapshots"


def s3_client(moto: Moto):
    import boto3

    return boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("s3", endpoint_url=moto.url)


def test_bad_snapshot_dir_is_one_line_and_creates_nothing(home: Path) -> None:
    result = ddpctl("run", "mnist", "--nodes", "2", "--snapshot-dir", "s3:///run1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: --snapshot-dir s3:///run1: has no bucket: give s3://BUCKET/PREFIX, e.g. s3://my-bucket/runs/mnist"
    ]
    assert tree(home) == []
    help_text = ddpctl("run", "--help").stdout
    assert "--snapshot-dir" in help_text and "instance profile" in help_text


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
            "run",
            "mnist",
            "--nodes",
            "2",
            "--run-id",
            "s3a",
            "--snapshot-dir",
            uri,
            "--",
            "--epochs",
            "1",
            "--data-fraction",
            "0.05",
            env=env,
        )
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"snapshot saved to {uri}/mnist_snapshot.pt" in first.stdout
        snap = snapshot()
        assert snap["epoch"] == 1 and {"model", "optimizer", "rng"} <= set(snap)

        second = ddpctl(
            "run",
            "mnist",
            "--nodes",
            "2",
            "--run-id",
            "s3b",
            "--snapshot-dir",
            uri,
            "--",
            "--epochs",
            "2",
            "--data-fraction",
            "0.05",
            env=env,
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
