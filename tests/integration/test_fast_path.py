"""The Trainer's fast path (SpeedConfig) on the CPU: batches gathered on the device in DistributedSampler's
order, autocast (bf16, and fp16 with a GradScaler as on V100s), torch.compile (inductor's C++ backend: gcc
is needed) against the eager path, and snapshot/resume of a compiled model. In-process gloo, one rank;
about 30-60 s on 2 cores, most of it one compile.
Its pure tests (no process beyond Python) are in tests/unit/test_fast_path.py.
"""

import re

import pytest
import torch
import torch.distributed as dist

from tests.support import TRAINING
from tests.support.fast_path import CPU, chars, tiny_gpt, trainer


@pytest.fixture
def one_rank():
    """A one-rank gloo group in this process; dynamo's global DDP setting put back afterwards."""
    optimize_ddp = torch._dynamo.config.optimize_ddp
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    torch._dynamo.config.optimize_ddp = optimize_ddp
    torch._dynamo.reset()


@pytest.fixture
def text(tmp_path):
    """112 characters: 96 windows of 16, six full batches of 16 (no shorter last batch to compile again)."""
    path = tmp_path / "text.txt"
    path.write_text((TRAINING / "data" / "tinyshakespeare.txt").read_text()[:112])
    return path


def lm_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def train(data, snapshot, speed, *, epochs, capsys, model=None):
    """Train the tiny GPT; return (model, per-step losses printed, all output)."""
    model = model or tiny_gpt(data.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    t = trainer.Trainer(
        model,
        data,
        optimizer,
        lm_loss,
        CPU,
        batch_size=16,
        epochs=epochs,
        grad_clip=1.0,
        log_every=1,
        snapshot_path=str(snapshot),
        speed=speed,
    )
    t.train()
    out = capsys.readouterr().out
    return model, [float(x) for x in re.findall(r"^step \d+ \| loss (\d+\.\d{4})(?: \||$)", out, re.M)], out


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_tracks_fp32(precision, one_rank, text, tmp_path, capsys):
    data = chars.CharDataset(text, 16)
    _, ref, _ = train(data, tmp_path / "ref.pt", trainer.SpeedConfig(), epochs=2, capsys=capsys)
    _, got, _ = train(data, tmp_path / "amp.pt", trainer.SpeedConfig(precision=precision), epochs=2, capsys=capsys)
    assert len(got) == len(ref) == 12 and got[-1] < got[0] - 0.3
    assert got == pytest.approx(ref, abs=0.05)
    scaler = torch.load(tmp_path / "amp.pt")["scaler"]
    assert (scaler is not None) == (precision == "fp16")  # fp16 (V100s) keeps its loss scale in the snapshot
    if scaler:
        assert scaler["scale"] > 0


def test_compiled_matches_eager_and_resumes(one_rank, text, tmp_path, capsys):
    data = chars.CharDataset(text, 16)
    plain = trainer.SpeedConfig(compile=False, device_data=False)  # the tutorial's path: DataLoader, eager
    eager_model, eager_losses, _ = train(data, tmp_path / "eager.pt", plain, epochs=2, capsys=capsys)

    fast = trainer.SpeedConfig(compile=True)  # inductor's C++ backend on the CPU
    snap = tmp_path / "compiled.pt"
    _, first, out = train(data, snap, fast, epochs=1, capsys=capsys)
    assert "torch.compile: first step took" in out
    keys = list(torch.load(snap)["model"])
    assert keys == list(eager_model.state_dict()) and not any("_orig_mod" in k for k in keys)

    # a new process would start here: a fresh model, compiled again, resumed from the snapshot
    model, second, out = train(data, snap, fast, epochs=2, capsys=capsys, model=tiny_gpt(data.vocab_size))
    assert "Resuming from snapshot at epoch 1" in out
    assert torch.load(snap)["epoch"] == 2 and torch.load(snap)["step"] == 12
    assert first + second == pytest.approx(eager_losses, abs=2e-4)  # printed to 4 places
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=name)
