"""The Trainer's fast path (SpeedConfig) on the CPU: batches gathered on the device in DistributedSampler's
order, autocast (bf16, and fp16 with a GradScaler as on V100s), torch.compile (inductor's C++ backend: gcc
is needed) against the eager path, and snapshot/resume of a compiled model. In-process gloo, one rank;
about 30-60 s on 2 cores, most of it one compile.
Its tests that start processes (real parts) are in tests/integration/test_fast_path.py.
"""

import sys

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tests.support import TRAINING
from tests.support.fast_path import CPU, chars, tiny_gpt, trainer


@pytest.fixture
def text(tmp_path):
    """112 characters: 96 windows of 16, six full batches of 16 (no shorter last batch to compile again)."""
    path = tmp_path / "text.txt"
    path.write_text((TRAINING / "data" / "tinyshakespeare.txt").read_text()[:112])
    return path


@pytest.mark.parametrize("make", ["tensors", "chars"])
def test_device_batches_follow_distributed_sampler(make, text):
    data = (
        TensorDataset(torch.arange(21.0).view(21, 1), torch.arange(21))
        if make == "tensors"
        else chars.CharDataset(text, 16)
    )
    for rank in (0, 1):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank)
        batches = trainer.DeviceBatches(data, 4, sampler, CPU)
        loader = DataLoader(data, batch_size=4, sampler=sampler)
        for epoch in (0, 1):  # reshuffled per epoch, a different shard per rank: exactly the DataLoader's batches
            sampler.set_epoch(epoch)
            got, want = list(batches), list(loader)
            assert len(got) == len(want) == len(batches) == len(loader)
            for g, w in zip(got, want):
                assert all(torch.equal(a, b) for a, b in zip(g, w))


def test_speed_defaults_and_flags(monkeypatch, text):
    s = trainer.resolve_speed(trainer.SpeedConfig(), CPU, TensorDataset(torch.zeros(4, 2)))
    assert (s.precision, s.compile, s.cuda_graphs, s.channels_last, s.tf32, s.device_data) == (
        "fp32",
        False,
        False,
        False,
        False,
        True,
    )  # the CPU path: plain fp32 eager, in-memory batches
    assert trainer.resolve_speed(trainer.SpeedConfig(), CPU, chars.CharDataset(text, 16)).device_data
    assert not trainer.resolve_speed(trainer.SpeedConfig(), CPU, torch.utils.data.Dataset()).device_data
    assert trainer.resolve_speed(trainer.SpeedConfig(cuda_graphs=True), CPU).compile  # graphs need compile

    monkeypatch.setattr(sys, "argv", ["job", "--compile", "--no-device-data", "--precision", "bf16", "--workers", "2"])
    (s,) = trainer.parse_config(trainer.SpeedConfig())
    assert (s.compile, s.device_data, s.precision, s.workers, s.cuda_graphs) == (True, False, "bf16", 2, False)
    monkeypatch.setattr(sys, "argv", ["job", "--precision", "fp8"])
    with pytest.raises(SystemExit):
        trainer.parse_config(trainer.SpeedConfig())


@pytest.mark.parametrize("given, ok", [("0.3", True), ("1", True), ("0", False), ("1.5", False), ("x", False)])
def test_data_fraction_is_a_fraction(monkeypatch, given, ok):
    """--data-fraction (the jobs' short runs: fewer images or characters, whole epochs) takes (0, 1] only."""
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        data_fraction: float = dataclasses.field(default=1.0, metadata={"type": trainer.fraction})

    monkeypatch.setattr(sys, "argv", ["job", "--data-fraction", given])
    if ok:
        assert trainer.parse_config(Cfg())[0].data_fraction == float(given)
    else:
        with pytest.raises(SystemExit):
            trainer.parse_config(Cfg())


def test_eager_attention_matches_sdpa():
    sdpa, eager = tiny_gpt(11).eval(), tiny_gpt(11, attention="eager").eval()
    eager.load_state_dict(sdpa.state_dict())  # same keys: the mask is not in the state dict
    idx = torch.randint(0, 11, (3, 16))
    with torch.no_grad():
        torch.testing.assert_close(eager(idx), sdpa(idx), rtol=1e-4, atol=1e-5)
