"""Tests for the bundled DDP jobs in training/: minGPT causality, message passing under torchrun,
and the Trainer's snapshot (atomic write, resume). CPU only; about half a minute on 2 cores.
Its tests that start processes (real parts) are in tests/integration/test_training_scripts.py.
"""

import importlib.util
import os

import pytest
import torch
import torch.distributed as dist

from tests.support import TRAINING


def load_module(name, path):
    """Import a training/ file under a unique name, so generic names (model, trainer) never clash."""
    spec = importlib.util.spec_from_file_location(f"ddpctl_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_gpt_is_causal(attention):
    m = load_module("mingpt_model", TRAINING / "mingpt" / "model.py")
    torch.manual_seed(0)
    cfg = m.GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, dropout=0.0, attention=attention)
    model = m.GPT(cfg, vocab_size=11).eval()
    idx = torch.randint(0, 11, (2, 16))
    with torch.no_grad():
        logits = model(idx)
        for t in (0, 5, 14):
            changed = idx.clone()
            changed[:, t + 1 :] = (changed[:, t + 1 :] + 1 + torch.randint(0, 10, changed[:, t + 1 :].shape)) % 11
            out = model(changed)
            assert torch.allclose(out[:, : t + 1], logits[:, : t + 1], atol=1e-5), f"position {t} sees the future"
            assert not torch.allclose(out[:, t + 1 :], logits[:, t + 1 :])  # the later positions do react


def test_snapshot_write_is_atomic(tmp_path, monkeypatch):
    trainer = load_module("trainer", TRAINING / "trainer.py")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = torch.nn.Linear(4, 2)
        data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 2))
        path = tmp_path / "new_dir" / "snap.pt"
        t = trainer.Trainer(
            model,
            data,
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.nn.functional.mse_loss,
            torch.device("cpu"),
            batch_size=4,
            epochs=1,
            snapshot_path=str(path),
        )
        t.train()  # creates the missing parent dir
        assert torch.load(path)["epoch"] == 1 and sorted(os.listdir(path.parent)) == ["metrics.jsonl", "snap.pt"]

        def torn_save(obj, f):  # a crash half-way through writing
            f.write(b"half a snapshot")
            raise OSError("disk full")

        monkeypatch.setattr(torch, "save", torn_save)
        t.epochs_run = 2
        with pytest.raises(OSError):
            t._save_snapshot()
        assert torch.load(path)["epoch"] == 1  # the previous snapshot is intact
    finally:
        dist.destroy_process_group()
