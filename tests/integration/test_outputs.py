"""What a run produced is kept, and a run's snapshot is its own (issues 16 and 17), on the local
provider with real torchrun runs.

- the README's quick start (`ddpctl run mnist --nodes 2`, a cluster brought up for the run) leaves
  a loadable snapshot under the run's record, which `ddpctl runs` shows;
- `run --resume-from RUN_ID` starts from that snapshot (the model trained further);
- two runs of one job on one cluster do not share a snapshot: the second starts from scratch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from tests.support.cli import ddpctl, tree


def test_quick_start_keeps_a_loadable_snapshot_and_resume_from_trains_it_further(home: Path) -> None:
    first = ddpctl(
        "run", "mnist", "--nodes", "2", "--run-id", "rquick0001", "--", "--epochs", "1", "--data-fraction", "0.05"
    )
    assert first.returncode == 0, first.stderr
    kept = home / "runs" / "rquick0001" / "outputs"
    assert f"kept in {kept}" in first.stderr
    snapshot = torch.load(kept / "mnist_snapshot.pt", map_location="cpu", weights_only=False)
    assert snapshot["epoch"] == 1 and snapshot["model"]
    assert tree(home / "clusters") == []  # the run's cluster went; its results did not
    runs = {r["run_id"]: r for r in json.loads(ddpctl("runs", "--json").stdout)["runs"]}
    assert runs["rquick0001"]["outputs"] == str(kept)

    second = ddpctl(
        "run", "mnist", "--nodes", "2", "--resume-from", "rquick0001", "--", "--epochs", "2", "--data-fraction", "0.05"
    )
    assert second.returncode == 0, second.stderr
    assert "Resuming from snapshot at epoch 1" in second.stdout
    assert re.findall(r"epoch (\d+)/2", second.stdout) == ["2"]  # only the epoch left to do


def test_two_runs_on_one_cluster_do_not_share_a_snapshot(home: Path) -> None:
    assert ddpctl("up", "--nodes", "2").returncode == 0
    try:
        for run_id in ("rshare0001", "rshare0002"):
            result = ddpctl(
                "run", "mnist", "--nodes", "2", "--run-id", run_id, "--", "--epochs", "1", "--data-fraction", "0.05"
            )
            assert result.returncode == 0, result.stderr
            assert "Resuming" not in result.stdout  # the second trains from scratch
            assert (home / "clusters" / "default" / "shared" / "runs" / run_id / "mnist_snapshot.pt").is_file()
    finally:
        assert ddpctl("down").returncode == 0


def test_resume_from_an_unknown_run(home: Path) -> None:
    result = ddpctl("run", "mnist", "--resume-from", "rnothere01")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: --resume-from rnothere01: no such run under {home}: `ddpctl runs` lists them"
    )
    assert tree(home) == []
