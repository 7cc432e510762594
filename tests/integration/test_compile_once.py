"""Issue 39 (compile once): the short last training batch is dropped, so a compiled model never
compiles a second time for it; the Trainer in this process (gloo, one rank, inductor on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.snapshots import load_trainer


@pytest.fixture
def one_rank():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _trainer(tmp_path: Path, samples: int, batch_size: int, **speed):
    import torch

    trainer = load_trainer()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    data = torch.utils.data.TensorDataset(torch.randn(samples, 4), torch.randn(samples, 2))
    return trainer.Trainer(
        model,
        data,
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.nn.functional.mse_loss,
        torch.device("cpu"),
        batch_size=batch_size,
        epochs=2,
        snapshot_path=str(tmp_path / "snap.pt"),
        speed=trainer.SpeedConfig(**speed),
    )


@pytest.mark.parametrize("device_data", [True, False])  # batches gathered on the device, or a DataLoader
def test_every_training_batch_is_full(one_rank, tmp_path: Path, device_data: bool) -> None:
    t = _trainer(tmp_path, samples=10, batch_size=4, compile=False, device_data=device_data)
    assert len(t.loader) == 2 and [len(b[0]) for b in t.loader] == [4, 4]  # the short batch of 2 dropped
    tiny = _trainer(tmp_path, samples=3, batch_size=4, compile=False, device_data=device_data)
    assert [len(b[0]) for b in tiny.loader] == [3]  # a shard smaller than a batch keeps its one batch


def test_a_compiled_model_compiles_once_over_epochs_with_a_short_last_batch(one_rank, tmp_path: Path) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    t = _trainer(tmp_path, samples=10, batch_size=4, compile=True)
    t.train()
    assert t.step == 4  # 2 epochs of 2 full batches
    # one graph for the step's shapes: the 2-sample batch would have compiled a second
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1, dict(torch._dynamo.utils.counters["stats"])
