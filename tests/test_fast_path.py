"""The Trainer's fast path (SpeedConfig) on the CPU: batches gathered on the device in DistributedSampler's
order, autocast (bf16, and fp16 with a GradScaler as on V100s), torch.compile (inductor's C++ backend: gcc
is needed) against the eager path, and snapshot/resume of a compiled model. In-process gloo, one rank;
about 30-60 s on 2 cores, most of it one compile."""

import importlib.util
import re
import sys

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tests.support import TRAINING


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(f"ddpctl_fast_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


trainer = load_module("trainer", TRAINING / "trainer.py")
gpt = load_module("mingpt_model", TRAINING / "mingpt" / "model.py")
chars = load_module("char_dataset", TRAINING / "mingpt" / "char_dataset.py")
CPU = torch.device("cpu")


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


def tiny_gpt(vocab_size, attention="sdpa"):
    torch.manual_seed(0)
    cfg = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, dropout=0.0, attention=attention)
    return gpt.GPT(cfg, vocab_size)


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


def test_eager_attention_matches_sdpa():
    sdpa, eager = tiny_gpt(11).eval(), tiny_gpt(11, attention="eager").eval()
    eager.load_state_dict(sdpa.state_dict())  # same keys: the mask is not in the state dict
    idx = torch.randint(0, 11, (3, 16))
    with torch.no_grad():
        torch.testing.assert_close(eager(idx), sdpa(idx), rtol=1e-4, atol=1e-5)


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
