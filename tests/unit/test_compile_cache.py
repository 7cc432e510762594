"""Issue 39: the pure parts of training/compile_cache.py: whether compiling pays (choose_compile), the
artifacts' key (another torch, device, model, batch or setting never loads them), their folder and
atomic file, and a torch without the artifacts API (one line, no error). The cache across real ranks
and runs is tests/integration/test_compile_cache.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.support import TRAINING
from tests.support.fast_path import CPU, load_module

cc = load_module("compile_cache", TRAINING / "compile_cache.py")


def test_forced_either_way_whatever_the_run() -> None:
    for device_type in ("cuda", "cpu"):
        assert cc.choose_compile(True, device_type=device_type, steps=1, warm=False).line() == "compile: on (--compile)"
        off = cc.choose_compile(False, device_type=device_type, steps=10**6, warm=True)
        assert off.line() == "compile: off (--no-compile)"


def test_the_cpu_stays_eager_by_default() -> None:
    choice = cc.choose_compile(None, device_type="cpu", steps=10**6, warm=True)
    assert not choice.compile and "--compile forces it" in choice.reason


def test_a_gpu_run_compiles_when_its_steps_earn_the_compile_back() -> None:
    short = cc.choose_compile(None, device_type="cuda", steps=30, warm=False, saving_s=0.01)
    assert short.line() == (
        "compile: off (a 30-step run saving ~0 s would not earn back a ~25 s compile; --compile forces it)"
    )
    long = cc.choose_compile(None, device_type="cuda", steps=5000, warm=False, saving_s=0.01)
    assert long.line() == "compile: on (a 5,000-step run saving ~50 s earns back a ~25 s compile)"
    # a warm cache makes compiling cheap: the same 500 steps that would not pay cold pay warm
    assert not cc.choose_compile(None, device_type="cuda", steps=500, warm=False, saving_s=0.01).compile
    warm = cc.choose_compile(None, device_type="cuda", steps=500, warm=True, saving_s=0.01)
    assert warm.line() == "compile: on (warm cache found, a 500-step run saving ~5 s earns back a ~3 s compile)"


def test_the_steps_saving_comes_from_the_jobs_flops_where_known() -> None:
    # minGPT at the tutorial's shape on an H200: ~21 ms eager steps, a fifth of it saved
    assert cc.step_saving_s(4.2e12, 989e12) == pytest.approx(0.0042, rel=0.02)
    assert cc.step_saving_s(0.0, 989e12) == cc.step_saving_s(4.2e12, 0.0) == cc.DEFAULT_STEP_SAVING_S


def _key(model=None, batch=(4, 8), dtype=torch.float32, **settings):
    model = model or torch.nn.Linear(8, 2)
    sample = (torch.empty(batch, dtype=dtype), torch.empty(batch[0], dtype=torch.long))
    return cc.cache_key(cc.key_parts(model, sample, CPU, **{"precision": "fp32", "one_graph": False, **settings}))


def test_the_key_changes_with_everything_the_compiled_code_depends_on(monkeypatch) -> None:
    torch.manual_seed(0)
    base = _key()
    assert _key() == base  # the same run again: the same file
    assert _key(model=torch.nn.Linear(8, 3)) != base  # another model shape
    assert _key(model=torch.nn.Sequential(torch.nn.Linear(8, 2))) != base  # another structure
    assert _key(batch=(8, 8)) != base and _key(dtype=torch.bfloat16) != base  # another batch
    assert _key(precision="bf16") != base and _key(one_graph=True) != base and _key(cuda_graphs=True) != base
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    assert _key() != base  # another torch
    monkeypatch.undo()
    parts = cc.key_parts(torch.nn.Linear(8, 2), (), CPU)
    assert parts["device"].startswith("cpu ") and parts["torch"] == torch.__version__
    monkeypatch.setattr(cc, "device_name", lambda device: "NVIDIA H200 sm90")
    assert _key() != base  # another device


def test_a_sample_batch_has_the_batches_shapes() -> None:
    data = torch.utils.data.TensorDataset(torch.zeros(10, 3, 5), torch.zeros(10, dtype=torch.long))
    x, y = cc.sample_batch(data, 4)
    assert (x.shape, y.shape, y.dtype) == ((4, 3, 5), (4,), torch.long)
    assert cc.sample_batch([("an image", 1)], 4) == ()  # not tensors: no shapes in the key


def test_the_folders_are_the_clusters_shared_one_and_the_nodes_own(tmp_path: Path) -> None:
    assert cc.cache_folders({"DDPCTL_COMPILE_CACHE_DIR": "/c", "DDPCTL_SHARED_DIR": "/s"}) == ["/c"]
    both = cc.cache_folders({"DDPCTL_SHARED_DIR": "/s", "XDG_CACHE_HOME": "/x"})
    assert both == ["/s/compile-cache", "/x/ddpctl/compile-cache"]
    assert cc.cache_folders({"XDG_CACHE_HOME": "/x"}) == ["/x/ddpctl/compile-cache"]
    path = cc.artifact_path(str(tmp_path / "new"), "abc")
    assert cc.read_artifact(path) is None
    cc.write_artifact(path, b"compiled")
    assert cc.read_artifact(path) == b"compiled" and os.listdir(tmp_path / "new") == ["torch-compile-abc.bin"]


def test_without_the_artifacts_api_one_line_and_inductors_cache_shared(monkeypatch, tmp_path: Path) -> None:
    import torch.distributed as dist

    monkeypatch.delattr(torch.compiler, "save_cache_artifacts")
    assert not cc.has_artifacts_api()
    env = cc.shared_inductor_env({"DDPCTL_SHARED_DIR": "/s"})
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(f"/s/compile-cache/torch-{torch.__version__}/")
    assert set(env) == {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    assert cc.shared_inductor_env({"DDPCTL_SHARED_DIR": "/s", "TORCHINDUCTOR_CACHE_DIR": "/mine"}).keys() == {
        "TRITON_CACHE_DIR"
    }  # what the user set stays
    assert cc.shared_inductor_env({}) == {}
    monkeypatch.delenv("DDPCTL_SHARED_DIR", raising=False)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cache = cc.CompileCache.for_model(torch.nn.Linear(2, 2), (), CPU, folders=[str(tmp_path)])
        assert not cache.enabled and not cache.load() and cache.publish() == 0
    finally:
        dist.destroy_process_group()
    assert cache.said == (
        f"compile cache: off (torch {torch.__version__} has no torch.compiler.save_cache_artifacts;"
        " each node compiles for itself)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("max_steps", "steps"), [(0, 4), (3, 3)])
def test_the_trainer_weighs_its_own_steps_and_says_its_choice(monkeypatch, tmp_path, capsys, max_steps, steps):
    """10 samples in batches of 4 for 2 epochs: 4 steps (the short batch dropped), or --max-steps."""
    import torch.distributed as dist

    from tests.support.fast_path import trainer

    asked = {}

    def choose(forced, **kwargs):
        asked.update(forced=forced, **kwargs)
        return cc.Choice(False, "as the test says")

    monkeypatch.setattr(trainer.compile_cache, "choose_compile", choose)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 2)
        data = torch.utils.data.TensorDataset(torch.randn(10, 4), torch.randn(10, 2))
        t = trainer.Trainer(
            model,
            data,
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.nn.functional.mse_loss,
            CPU,
            batch_size=4,
            epochs=2,
            max_steps=max_steps,
            snapshot_path=str(tmp_path / "snap.pt"),
        )
    finally:
        dist.destroy_process_group()
    assert asked == {"forced": None, "device_type": "cpu", "steps": steps, "warm": False, "saving_s": 0.005}
    assert not t.speed.compile and t.compile_cache is None  # off: no cache looked for
    assert "compile: off (as the test says)\n" in capsys.readouterr().out


def test_the_file_is_read_from_the_first_folder_that_has_it_and_written_to_all(monkeypatch, tmp_path, capsys):
    """Two folders (the cluster's shared one, the node's own): found in the second, copied to the first; a
    damaged file is said and compiled over, never fatal; rank 0's artifacts go to both folders."""
    import torch.distributed as dist

    shared, own = tmp_path / "shared", tmp_path / "own"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cc.write_artifact(cc.artifact_path(str(own), "k"), b"not artifacts")
        cache = cc.CompileCache("k", [str(shared), str(own)])
        assert cache.load() and cache.path == str(own / "torch-compile-k.bin")
        assert (shared / "torch-compile-k.bin").read_bytes() == b"not artifacts"
        assert f"compile cache: {cache.path} not loaded (" in capsys.readouterr().out

        monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"compiled", None))
        cold = cc.CompileCache("k2", [str(shared), str(own)])
        assert not cold.load() and cold.publish() == len(b"compiled")
        assert (shared / "torch-compile-k2.bin").read_bytes() == (own / "torch-compile-k2.bin").read_bytes()
        assert (
            cold.said
            == f"compile cache: saved 0.0 MB of compiled artifacts to {shared}/torch-compile-k2.bin and {own}/torch-compile-k2.bin"
        )
    finally:
        dist.destroy_process_group()
