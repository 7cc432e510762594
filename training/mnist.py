"""MNIST digit classification with DistributedDataParallel (the pytorch/examples MNIST `Net`).

Run by hand (2 processes on this machine; add --nnodes/--rdzv-endpoint for several nodes):

    torchrun --standalone --nproc-per-node 2 training/mnist.py --epochs 2

Data: torchvision's MNIST in --data-dir (60,000 train, the 10,000 test images held out),
downloaded on first use. Without network access (or with --no-download) it falls back to the
real MNIST test set bundled in training/data/mnist: 9,000 images train, the last 1,000 are held out;
so does a node whose torchvision is missing or does not load with its torch (the bundled files need none).
Speed flags (--no-compile, --precision, --cuda-graphs, ...): see SpeedConfig in fast_path.py.
"""

import functools
import gzip
import os
import socket
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import TensorDataset
from trainer import SpeedConfig, Trainer, ddp_setup, default_snapshot_path, fraction, parse_config

HERE = Path(__file__).resolve().parent
BUNDLED = HERE / "data" / "mnist"


@dataclass
class Config:
    epochs: int = 2
    batch_size: int = 64  # per rank
    lr: float = 1.0
    gamma: float = 0.7  # StepLR: lr *= gamma after every epoch (1.0 keeps it constant)
    save_every: int = 1  # epochs between snapshots
    log_every: int = 20  # print the loss and throughput every N steps (0: once per epoch only)
    snapshot_path: str = ""  # a file or s3://bucket/key; "" -> trainer.default_snapshot_path("mnist")
    data_dir: str = str(HERE / "data")
    download: bool = True
    seed: int = 0
    # train on the first fraction of the training images (the held-out set stays whole)
    data_fraction: float = field(default=1.0, metadata={"type": fraction})
    max_steps: int = 0  # total optimizer steps (0: no cap); a run cut mid-epoch ends with a snapshot, no held-out line


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # torchvision's first (datasets.MNIST.mirrors[0])
RAW_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
NOT_DOWNLOADED = "not downloaded"


@functools.cache
def torchvision_datasets():
    """torchvision's datasets module, or the reason it cannot be had (not installed, or built for
    another torch: "operator torchvision::nms does not exist"). Imported only where it has MNIST to read
    or to download: the import costs a rank 1-2 s of CPU."""
    try:
        from torchvision import datasets
    except (ImportError, RuntimeError) as e:
        return None, f"torchvision unavailable: {str(e).splitlines()[0][:80]}"
    return datasets, None


def try_download(data_dir):
    """Download MNIST with torchvision; return None on success, else a short reason. Fails in seconds
    offline, before torchvision is imported."""
    old_timeout = socket.getdefaulttimeout()
    try:
        probe = urllib.request.Request(MIRROR + "t10k-labels-idx1-ubyte.gz", method="HEAD")
        urllib.request.urlopen(probe, timeout=5).close()  # honours proxies; torchvision's own urlopen has no timeout
        datasets, missing = torchvision_datasets()
        if datasets is None:
            return missing
        socket.setdefaulttimeout(30)
        datasets.MNIST(data_dir, train=True, download=True)
        return None
    except Exception as e:  # DNS failure, firewall, proxy, bad checksum ...
        return str(getattr(e, "reason", e)).splitlines()[0][:100]
    finally:
        socket.setdefaulttimeout(old_timeout)


def from_torchvision(data_dir):
    """((train images, labels, held-out images, labels), None) from torchvision's MNIST files in
    data_dir, or (None, why not)."""
    if not all((Path(data_dir) / "MNIST" / "raw" / name).is_file() for name in RAW_FILES):
        return None, NOT_DOWNLOADED
    datasets, missing = torchvision_datasets()
    if datasets is None:
        return None, missing
    try:
        train, test = (datasets.MNIST(data_dir, train=t) for t in (True, False))
    except RuntimeError as e:  # files torchvision does not accept
        return None, str(e).splitlines()[0][:100]
    return (train.data, train.targets, test.data, test.targets), None


def read_idx(path):
    """Read a gzipped idx file (the format MNIST ships in) into a uint8 tensor."""
    with gzip.open(path) as f:
        data = f.read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).view(shape)


def load_mnist(cfg, device):
    """Return (train_images, train_labels, heldout_images, heldout_labels); every rank agrees on the source."""
    reason = "--no-download" if not cfg.download else "not available on every node"
    data, missing = from_torchvision(cfg.data_dir)
    if data is None:
        if missing != NOT_DOWNLOADED:
            reason = missing
        elif cfg.download and int(os.environ["LOCAL_RANK"]) == 0:  # one download per node
            reason = try_download(cfg.data_dir) or reason
        dist.barrier()  # every rank takes this path together, or none (the all_reduce below agrees)
        data, _ = from_torchvision(cfg.data_dir)
    everyone = torch.tensor([data is not None], dtype=torch.int32, device=device)
    dist.all_reduce(everyone, op=dist.ReduceOp.MIN)  # mixing data sources across ranks would hang DDP
    if everyone.item():
        return data
    if dist.get_rank() == 0:
        print(
            f"MNIST download unavailable ({reason}); using the bundled MNIST test set: 9,000 train / 1,000 held out",
            flush=True,
        )
    images = read_idx(BUNDLED / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(BUNDLED / "t10k-labels-idx1-ubyte.gz").long()
    return images[:9000], labels[:9000], images[9000:], labels[9000:]


def normalize(images):
    """uint8 images -> float, scaled and normalized as torchvision's Normalize((0.1307,), (0.3081,)) does."""
    return images.float().div(255).unsqueeze(1).sub(0.1307).div(0.3081)


@torch.no_grad()
def evaluate(model, images, labels, device):
    """Each rank scores its slice of the held-out set; the counts are summed over ranks."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = images[rank::world], labels[rank::world]
    model.eval()
    correct = sum(
        int((model(xb.to(device)).argmax(1) == yb.to(device)).sum()) for xb, yb in zip(x.split(1000), y.split(1000))
    )
    stats = torch.tensor([correct, len(y)], device=device)
    dist.all_reduce(stats)
    return 100.0 * stats[0].item() / stats[1].item(), int(stats[1].item())


@record  # an uncaught exception goes to torchrun's error file: its root cause names it
def main():
    cfg, speed = parse_config(Config(), SpeedConfig())
    device = ddp_setup()
    torch.manual_seed(cfg.seed)
    train_x, train_y, heldout_x, heldout_y = load_mnist(cfg, device)
    keep = max(1, int(len(train_x) * cfg.data_fraction))
    train_x, train_y, heldout_x = train_x[:keep], train_y[:keep], normalize(heldout_x)

    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=cfg.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=cfg.gamma)

    def report(epoch, train_loss):
        acc, n = evaluate(model, heldout_x, heldout_y, device)
        if dist.get_rank() == 0:
            print(
                f"epoch {epoch}/{cfg.epochs} | train loss {train_loss:.4f} | held-out accuracy {acc:.2f}% ({n} images)",
                flush=True,
            )
        return {"accuracy": round(acc, 2)}  # in the epoch's metrics line

    trainer = Trainer(
        model,
        TensorDataset(normalize(train_x), train_y),
        optimizer,
        F.nll_loss,
        device,
        batch_size=cfg.batch_size,
        epochs=cfg.epochs,
        save_every=cfg.save_every,
        snapshot_path=cfg.snapshot_path or default_snapshot_path("mnist"),
        scheduler=scheduler,
        on_epoch_end=report,
        speed=speed,
        log_every=cfg.log_every,
        max_steps=cfg.max_steps,
    )
    trainer.train()
    dist.barrier()  # leave together: a rank tearing down gloo while another still works aborts
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
