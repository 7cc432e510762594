"""Tests for the bundled DDP jobs in training/: minGPT causality, message passing under torchrun,
and the Trainer's snapshot (atomic write, resume). CPU only; about half a minute on 2 cores.
Its pure tests (no process beyond Python) are in tests/unit/test_training_scripts.py.
"""

import gzip
import os
import re
import subprocess
import sys
import tempfile

import torch

from tests.support import TRAINING


def torchrun(script, *args, nproc=2, timeout=120):
    """Plain torchrun, as the tutorials run it, in a folder of its own: the scripts write
    metrics.jsonl in the current folder where no DDPCTL_SNAPSHOT_DIR says otherwise."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(TRAINING / script),
        *map(str, args),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("DDPCTL_SHARED_DIR", None)
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_message_passing():
    out = torchrun("message_passing.py")
    assert "rank 1 received 42.0 from rank 0" in out
    for rank in (0, 1):
        assert f"rank {rank}: all_reduce OK (3.0 == 3.0)" in out


def test_a_jobs_own_error_is_torchruns_root_cause(tmp_path):
    """The jobs' main is under torchelastic's ``@record``: an uncaught exception goes to the error
    file torchrun gives each worker (TORCHELASTIC_ERROR_FILE), so torchrun's root cause shows it
    (without, only "To enable traceback see ..."). Plain torchrun, as a user without ddpctl runs it."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"]
    cmd += [str(TRAINING / "mingpt" / "main.py"), "--data", str(tmp_path / "missing.txt")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("DDPCTL_SHARED_DIR", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    root = proc.stderr[proc.stderr.index("Root Cause (first observed failure):") :]
    assert "error_file: <N/A>" not in root and "To enable traceback" not in root, root
    assert re.search(r"traceback : Traceback \(most recent call last\):", root), root
    assert "FileNotFoundError: [Errno 2] No such file or directory" in root, root


def write_idx(path, tensor):
    magic = {3: 0x0803, 1: 0x0801}[tensor.dim()]
    header = b"".join(n.to_bytes(4, "big") for n in (magic, *tensor.shape))
    path.write_bytes(header + tensor.numpy().tobytes())


def read_idx_gz(path, ndim):
    with gzip.open(path) as f:
        data = f.read()
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).view(shape)


def test_mnist_snapshot_resume(tmp_path):
    # A small MNIST in torchvision's own layout (from the bundled test set), read with download=False.
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = read_idx_gz(TRAINING / "data/mnist/t10k-images-idx3-ubyte.gz", 3)
    labels = read_idx_gz(TRAINING / "data/mnist/t10k-labels-idx1-ubyte.gz", 1)
    for prefix, sl in (("train", slice(0, 1000)), ("t10k", slice(9800, 10000))):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images[sl].contiguous())
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels[sl].contiguous())
    snap = tmp_path / "snaps" / "mnist_snapshot.pt"
    common = ["--data-dir", tmp_path / "data", "--no-download", "--snapshot-path", snap]

    out = torchrun("mnist.py", "--epochs", 1, *common, nproc=1)
    assert re.search(r"^epoch 1/1 \| train loss \d+\.\d{4} \| held-out accuracy \d+\.\d{2}% \(200 images\)$", out, re.M)
    assert "bundled" not in out and "Resuming" not in out
    assert sorted(os.listdir(snap.parent)) == ["metrics.jsonl", snap.name]  # no temp file left behind
    first = torch.load(snap)
    assert first["epoch"] == 1 and set(first) >= {"model", "optimizer", "epoch", "rng"}

    out = torchrun("mnist.py", "--epochs", 2, *common, nproc=1)
    assert "Resuming from snapshot at epoch 1" in out
    assert "epoch 1/2" not in out and re.search(r"^epoch 2/2 \| ", out, re.M)
    second = torch.load(snap)
    assert second["epoch"] == 2 and second["step"] == 2 * first["step"]


def test_mnist_bundled_fallback(tmp_path):
    # --no-download behaves like a machine without network: the bundled test set, split 9,000 / 1,000.
    out = torchrun(
        "mnist.py", "--epochs", 1, "--no-download", "--data-dir", tmp_path, "--snapshot-path", tmp_path / "m.pt"
    )
    assert "using the bundled MNIST test set: 9,000 train / 1,000 held out" in out
    acc = float(re.search(r"^epoch 1/1 \| .* held-out accuracy (\d+\.\d+)% \(1000 images\)$", out, re.M).group(1))
    assert acc >= 90.0


def test_mingpt_loss_goes_down(tmp_path):
    out = torchrun(
        "mingpt/main.py",
        "--n-layer",
        1,
        "--n-head",
        2,
        "--n-embd",
        32,
        "--block-size",
        16,
        "--batch-size",
        32,
        "--max-steps",
        30,
        "--log-every",
        30,
        "--lr",
        3e-3,
        "--data-fraction",
        0.1,
        "--sample-chars",
        20,
        "--snapshot-path",
        tmp_path / "gpt.pt",
    )
    losses = [float(x) for x in re.findall(r"^step \d+ \| loss (\d+\.\d{4})(?: \||$)", out, re.M)]
    assert len(losses) == 2 and losses[-1] < losses[0] - 0.3
    assert re.search(r"^sample:\nO God, O God!", out, re.M)
    assert torch.load(tmp_path / "gpt.pt")["step"] == 30
