"""Issue 39 (compile once, warm everywhere): the Trainer's compiled artifacts shared by the ranks of a
run, and by a later run, on the CPU (inductor's C++ backend). Real 2-process torchrun on gloo, each rank
with an inductor cache folder of its own, as separate machines have; the artifacts' folder
($DDPCTL_COMPILE_CACHE_DIR) stands for the cluster's shared one. Asserted on what each rank compiled and
found in its cache (inductor's and AOTAutograd's counters), never on time: the times are printed only.
Each test a few minutes on 2 busy cores (a cold compile, then warm ones: on the CPU a warm rank still runs gcc).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import TRAINING

#: a rank of a tiny job: its own inductor cache (a node of its own), the bundled Trainer, compiled
JOB = """
import json, os, sys
rank = int(os.environ["RANK"])
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(sys.argv[1], f"node{rank}")
sys.path.insert(0, sys.argv[2])
import torch, torch.distributed as dist
from torch._dynamo.utils import counters
from trainer import SpeedConfig, Trainer, ddp_setup

device = ddp_setup("cpu")
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 2))
t = Trainer(model, data, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.functional.mse_loss, device,
            batch_size=4, epochs=1, snapshot_path=os.path.join(sys.argv[1], "snap.pt"),
            speed=SpeedConfig(compile=True))
t.train()
stats = {"rank": rank, "compile_s": round(t.compile_seconds, 2), **counters["inductor"], **counters["aot_autograd"]}
print("STATS " + json.dumps(stats), flush=True)
dist.destroy_process_group()
"""


def run(folder: Path, script: Path, cache: Path) -> tuple[str, dict[int, dict]]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    cmd += [str(script), str(folder), str(TRAINING)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DDPCTL_COMPILE_CACHE_DIR": str(cache)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    folder.mkdir()
    proc = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stats = [json.loads(line.split("STATS ", 1)[1]) for line in proc.stdout.splitlines() if "STATS " in line]
    return proc.stdout, {s["rank"]: s for s in stats}


@pytest.mark.slow
def test_rank_0_compiles_once_for_every_node_and_a_later_run(tmp_path: Path) -> None:
    script, cache = tmp_path / "job.py", tmp_path / "shared"
    script.write_text(JOB)

    out, first = run(tmp_path / "run1", script, cache)
    assert "compile: on (--compile)" in out
    # rank 0 compiled (every graph a miss), rank 1 took its first step eagerly, then loaded rank 0's
    # artifacts and compiled from them: every graph a hit, none compiled afresh
    assert first[0].get("fxgraph_cache_miss", 0) >= 1 and not first[0].get("fxgraph_cache_hit"), first
    assert first[1].get("fxgraph_cache_hit", 0) >= 1 and not first[1].get("fxgraph_cache_miss"), first
    assert first[1].get("autograd_cache_hit", 0) >= 1, first
    assert "compile cache: saved" in out and "(2 steps: compiling on rank 0" in out
    (saved,) = cache.iterdir()
    assert saved.name.startswith("torch-compile-") and saved.suffix == ".bin"

    # a later run on new nodes (fresh inductor caches): both ranks load the file before compiling
    out, later = run(tmp_path / "run2", script, cache)
    assert "compile cache: warm (" in out and str(saved) in out
    assert "compiling with the cached artifacts" in out
    for rank in (0, 1):
        assert later[rank].get("fxgraph_cache_hit", 0) >= 1 and not later[rank].get("fxgraph_cache_miss"), later
        assert later[rank].get("autograd_cache_hit", 0) >= 1, later
    assert [p.name for p in cache.iterdir()] == [saved.name]  # nothing new to save
    print(f"first step: cold {first[0]['compile_s']} s (rank 0), later run warm {later[0]['compile_s']} s")


@pytest.mark.slow
def test_ddpctl_runs_share_the_compiled_code_after_their_cluster_is_gone(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `ddpctl run` on 2 local nodes (an ephemeral cluster each time, its shared folder removed
    with it): the first run's rank 0 saves the artifacts to the cluster's shared folder and to its node's
    ~/.cache (here $XDG_CACHE_HOME), and the next run, on a new cluster, finds them there."""
    from tests.support.cli import ddpctl

    monkeypatch.delenv("DDPCTL_COMPILE_CACHE_DIR")  # the folders as ddpctl's ranks find them
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # this machine's, both runs
    job = ["--compile", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16"]
    job += ["--batch-size", "8", "--max-steps", "3", "--sample-chars", "1"]
    own = tmp_path / "xdg" / "ddpctl" / "compile-cache"

    first = ddpctl("run", "mingpt", "--nodes", "2", "--", *job, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[node0 r0] compile cache: saved " in first.stdout
    saved = first.stdout.split("compile cache: saved ", 1)[1].splitlines()[0]
    (artifact,) = own.iterdir()
    assert f"/shared/compile-cache/{artifact.name} and {artifact}" in saved  # both folders

    second = ddpctl("run", "mingpt", "--nodes", "2", "--", *job, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    warm = next(line for line in second.stdout.splitlines() if "compile cache: warm (" in line)
    assert warm.endswith(f"MB of compiled artifacts from {artifact})"), warm
    assert "compiling with the cached artifacts" in second.stdout
