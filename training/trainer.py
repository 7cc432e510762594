"""Shared DDP plumbing for the bundled jobs: process-group setup, a config helper and a Trainer.

Not run on its own: mnist.py and mingpt/main.py import it (`from trainer import ...`), e.g.

    torchrun --standalone --nproc-per-node 2 training/mnist.py

A snapshot holds everything needed to pick up where a run stopped (a crashed node, a torchrun
restart, a re-launched job): {"model", "optimizer", "scheduler", "epoch" (epochs completed),
"step" (optimizer steps taken), "rng"}. Global rank 0 writes it atomically; on start-up rank 0
reads it and broadcasts it, so every rank resumes from the same point.
"""
import argparse
import dataclasses
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def ddp_setup() -> torch.device:
    """Join the process group described by torchrun's LOCAL_RANK, RANK and WORLD_SIZE; return this rank's device."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return device


def default_snapshot_path(job: str) -> str:
    """$DDPCTL_SHARED_DIR/<job>_snapshot.pt when ddpctl provides a shared dir, else ./<job>_snapshot.pt."""
    return os.path.join(os.environ.get("DDPCTL_SHARED_DIR") or ".", f"{job}_snapshot.pt")


def parse_config(*configs):
    """Turn every field of the given dataclass instances into a flag (n_layer -> --n-layer) and apply argv."""
    parser = argparse.ArgumentParser()
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            flag, default = "--" + f.name.replace("_", "-"), getattr(cfg, f.name)
            if f.type is bool:
                parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
            else:
                parser.add_argument(flag, type=f.type, default=default, help="default: %(default)s")
    args = parser.parse_args()
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            setattr(cfg, f.name, getattr(args, f.name))
    return configs


class Trainer:
    def __init__(self, model, dataset, optimizer, loss_fn, device, *, batch_size, epochs, snapshot_path,
                 save_every=1, scheduler=None, grad_clip=0.0, max_steps=0, log_every=0, on_epoch_end=None):
        self.rank, self.device = dist.get_rank(), device
        self.optimizer, self.scheduler, self.loss_fn = optimizer, scheduler, loss_fn
        self.epochs, self.max_steps, self.grad_clip = epochs, max_steps, grad_clip
        self.save_every, self.log_every, self.on_epoch_end = save_every, log_every, on_epoch_end
        self.snapshot_path = snapshot_path
        self.sampler = DistributedSampler(dataset)  # a different shard per rank, reshuffled by set_epoch()
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler,
                                 pin_memory=device.type == "cuda")
        self.epochs_run, self.step = 0, 0
        self.model = model.to(device)
        self._load_snapshot()
        self._saved_at = (self.epochs_run, self.step)
        self.model = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def _load_snapshot(self):
        # Only rank 0 reads the file and broadcasts it, so a node-local snapshot still resumes every rank.
        box = [None]
        if self.rank == 0 and os.path.exists(self.snapshot_path):
            box[0] = torch.load(self.snapshot_path, map_location="cpu")
        dist.broadcast_object_list(box, src=0)
        snapshot = box[0]
        if snapshot is None:
            return
        self.model.load_state_dict(snapshot["model"])
        self.optimizer.load_state_dict(snapshot["optimizer"])
        if self.scheduler is not None and snapshot["scheduler"] is not None:
            self.scheduler.load_state_dict(snapshot["scheduler"])
        self.epochs_run, self.step = snapshot["epoch"], snapshot["step"]
        torch.set_rng_state(snapshot["rng"]["torch"])
        if torch.cuda.is_available() and "cuda" in snapshot["rng"]:
            torch.cuda.set_rng_state(snapshot["rng"]["cuda"])
        if self.rank == 0:
            print(f"Resuming from snapshot at epoch {self.epochs_run}", flush=True)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(source), targets)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        """Train one epoch (or until max_steps); return the mean training loss over all ranks."""
        self.sampler.set_epoch(epoch)
        self.model.train()
        total, batches = torch.zeros((), device=self.device), 0
        for source, targets in self.loader:
            loss = self._run_batch(source.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True))
            total, batches, self.step = total + loss, batches + 1, self.step + 1
            if self.rank == 0 and self.log_every and (self.step == 1 or self.step % self.log_every == 0):
                print(f"step {self.step} | loss {loss.item():.4f}", flush=True)
            if self.max_steps and self.step >= self.max_steps:
                break
        if batches == len(self.loader):
            self.epochs_run = epoch + 1
        stats = torch.stack([total, torch.tensor(float(batches), device=self.device)])
        dist.all_reduce(stats)
        return (stats[0] / stats[1].clamp(min=1)).item()

    def _save_snapshot(self):
        self._saved_at = (self.epochs_run, self.step)
        if dist.get_rank() != 0:
            return
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        snapshot = {
            "model": self.model.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "epoch": self.epochs_run,
            "step": self.step,
            "rng": rng,
        }
        path = os.path.abspath(self.snapshot_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"  # same directory, so os.replace is an atomic rename
        with open(tmp, "wb") as f:
            torch.save(snapshot, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # readers see the old snapshot or the new one, never half of one
        print(f"Epoch {self.epochs_run} | step {self.step} | snapshot saved to {path}", flush=True)

    def train(self):
        for epoch in range(self.epochs_run, self.epochs):
            if self.max_steps and self.step >= self.max_steps:
                break
            loss = self._run_epoch(epoch)
            if self.epochs_run != epoch + 1:  # stopped mid-epoch by max_steps
                break
            if self.scheduler is not None:
                self.scheduler.step()
            if self.on_epoch_end is not None:
                self.on_epoch_end(self.epochs_run, loss)
            if self.save_every and self.epochs_run % self.save_every == 0:
                self._save_snapshot()
        if self._saved_at != (self.epochs_run, self.step):
            self._save_snapshot()
