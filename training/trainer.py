"""Shared DDP plumbing for the bundled jobs: process-group setup, a config helper and a Trainer.

Over 300 lines on purpose: the jobs' one Trainer, one file as in nanoGPT, that plain torchrun runs with only torch.

Not run on its own: mnist.py and mingpt/main.py import it (`from trainer import ...`), e.g.

    torchrun --standalone --nproc-per-node 2 training/mnist.py

A snapshot holds everything needed to pick up where a run stopped (a crashed node, a torchrun
restart, a re-launched job): {"model", "optimizer", "scheduler", "scaler", "epoch" (epochs
completed), "step" (optimizer steps taken), "rng"}. Global rank 0 writes it atomically; on start-up
rank 0 reads it and broadcasts it, so every rank resumes from the same point. The snapshot path is a
file, or an s3://bucket/key URI (read and written with boto3) where the nodes share no filesystem.

The fast path (SpeedConfig in fast_path.py; every field is a flag of the jobs) is on by default with CUDA: bf16
autocast (fp16 + GradScaler on GPUs without bf16, such as the V100), torch.compile (where the run
earns the compile back; compiled once for all ranks, nodes and later runs: compile_cache.py), TF32, the
training set kept on the GPU with batches gathered there (in DistributedSampler's order), and
channels-last image batches. On the CPU the defaults give the plain fp32 eager path, with batches
gathered straight from the in-memory dataset.

Metrics: at every log step and epoch end, rank 0 prints the loss and throughput and appends a JSON line
(step, epoch, loss, accuracy where on_epoch_end returns one, samples/s, tokens/s, MFU, GPU memory) to
metrics.jsonl beside the snapshot (metrics.py), which `ddpctl metrics` shows. The loss is read (a GPU
sync) on log steps only. Every rank beats each step (metrics.beat: a line every few seconds, which
ddpctl reads and does not show), with its forward-and-loss time as its compute time (on a GPU, a CUDA
event pair's, read only when a beat is printed: no sync per step), so that ddpctl
names a hung rank and a slow node.
"""

import argparse
import contextlib
import dataclasses
import datetime
import io
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

try:
    import compile_cache  # training/compile_cache.py: compiled artifacts shared by ranks, nodes and runs
    import metrics  # training/metrics.py: one JSON line per log step and epoch, rank 0 only
except ImportError:  # this file loaded by its path (the tests), its folder not on sys.path
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import compile_cache
    import metrics
from fast_path import PEAK_FLOPS, DeviceBatches, SpeedConfig, resolve_speed


def ddp_setup(device_type=None) -> torch.device:
    """Join the process group described by torchrun's LOCAL_RANK, RANK and WORLD_SIZE; return this rank's device.

    device_type None: CUDA (nccl) when available, else CPU (gloo); "cpu" forces gloo on the CPU.
    $DDPCTL_COLLECTIVE_TIMEOUT_S (ddpctl sets it for elastic runs) bounds how long a collective waits
    for a silent peer (torch's default: 10-30 min), so that torchrun can go on without a lost node.
    """
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = os.environ.get("DDPCTL_COLLECTIVE_TIMEOUT_S")
    kwargs = {"timeout": datetime.timedelta(seconds=float(timeout))} if timeout else {}
    if device_type in (None, "cuda") and torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=device, **kwargs)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size, **kwargs)
    return device


def default_snapshot_path(job: str) -> str:
    """<dir>/<job>_snapshot.pt, where <dir> is $DDPCTL_SNAPSHOT_DIR (a directory or s3://bucket/prefix,
    from `ddpctl run --snapshot-dir`), else $DDPCTL_SHARED_DIR (the cluster's shared directory), else "."."""
    where = os.environ.get("DDPCTL_SNAPSHOT_DIR") or os.environ.get("DDPCTL_SHARED_DIR") or "."
    if where.startswith("s3://"):
        return f"{where.rstrip('/')}/{job}_snapshot.pt"
    return os.path.join(where, f"{job}_snapshot.pt")


def _s3(uri):
    """An S3 client (boto3's usual credentials: on AWS, the instance profile) and the URI's bucket and key."""
    try:
        import boto3  # only for s3:// snapshots: local paths need torch alone
    except ImportError:
        raise RuntimeError(f"snapshot path {uri} needs boto3 on the nodes: pip install boto3") from None
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return boto3.client("s3"), bucket, key


def load_snapshot(path):
    """The snapshot at path (a file or s3://bucket/key), or None if there is none yet."""
    if path.startswith("s3://"):
        s3, bucket, key = _s3(path)
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:  # (without s3:ListBucket, S3 answers a missing key with 403 instead)
            return None
        return torch.load(io.BytesIO(body), map_location="cpu")
    return torch.load(path, map_location="cpu") if os.path.exists(path) else None


def save_snapshot(snapshot, path):
    """Write the snapshot so that readers see the old one or the new one, never half of one; return where."""
    if path.startswith("s3://"):
        buf = io.BytesIO()
        torch.save(snapshot, buf)
        buf.seek(0)
        s3, bucket, key = _s3(path)
        s3.upload_fileobj(buf, bucket, key)  # the object appears whole when the upload completes
        return path
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"  # same directory, so os.replace is an atomic rename
    with open(tmp, "wb") as f:
        torch.save(snapshot, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def fraction(text):
    """An argparse type: a float in (0, 1]."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in (0, 1]")
    return value


def parse_config(*configs):
    """Turn every field of the given dataclass instances into a flag (n_layer -> --n-layer) and apply argv."""
    parser = argparse.ArgumentParser()
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            flag, default = "--" + f.name.replace("_", "-"), getattr(cfg, f.name)
            if f.type in (bool, bool | None):
                auto = "default: auto (on with CUDA)" if default is None else None
                parser.add_argument(
                    flag, action=argparse.BooleanOptionalAction, default=default, help=f.metadata.get("help", auto)
                )
            else:
                parser.add_argument(
                    flag,
                    type=f.metadata.get("type", f.type),
                    default=default,
                    choices=f.metadata.get("choices"),
                    help="default: %(default)s",
                )
    args = parser.parse_args()
    if os.environ.get("DDPCTL_PARSE_ONLY"):  # ddpctl checks a job's arguments before it starts the cluster
        sys.exit(0)
    for cfg in configs:
        for f in dataclasses.fields(cfg):
            setattr(cfg, f.name, getattr(args, f.name))
    return configs


class Trainer:
    def __init__(
        self,
        model,
        dataset,
        optimizer,
        loss_fn,
        device,
        *,
        batch_size,
        epochs,
        snapshot_path,
        save_every=1,
        scheduler=None,
        grad_clip=0.0,
        max_steps=0,
        log_every=0,
        on_epoch_end=None,
        speed=None,
        flops_per_sample=0.0,
    ):
        self.rank, self.device = dist.get_rank(), device
        self.optimizer, self.scheduler, self.loss_fn = optimizer, scheduler, loss_fn
        self.epochs, self.max_steps, self.grad_clip = epochs, max_steps, grad_clip
        self.save_every, self.log_every, self.on_epoch_end = save_every, log_every, on_epoch_end
        self.snapshot_path, self.batch_size, self.flops_per_sample = snapshot_path, batch_size, flops_per_sample
        # beside the snapshot (by default the run's folder, $DDPCTL_SNAPSHOT_DIR) where that is a local file
        folder = "" if snapshot_path.startswith("s3://") else os.path.dirname(snapshot_path)
        self.metrics_path = os.path.join(folder, "metrics.jsonl") if folder else metrics.metrics_path()
        speed = speed or SpeedConfig()
        forced_compile = True if speed.cuda_graphs else speed.compile  # None: chosen below, where it pays
        self.speed = speed = resolve_speed(speed, device, dataset)
        if speed.tf32:
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(speed.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext
        self.scaler = torch.amp.GradScaler(device.type, enabled=speed.precision == "fp16")  # fp16 needs loss scaling
        self.sampler = DistributedSampler(dataset)  # a different shard per rank, reshuffled by set_epoch()
        self.loader = self._batches(dataset)
        self.epochs_run, self.step, self.compute_s = 0, 0, None
        # a GPU's forward and loss time, as a CUDA event pair records it (read only when a beat goes out)
        timing = device.type == "cuda"
        self._events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(2)) if timing else None
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        peak = next((flops for part, flops in PEAK_FLOPS.items() if part in name), 0.0)
        self.peak_flops = peak if speed.precision in ("bf16", "fp16") else 0.0
        self.raw_model = model.to(device)  # uncompiled, unwrapped: what snapshots hold (no "_orig_mod." keys)
        if speed.channels_last:
            self.raw_model.to(memory_format=torch.channels_last)
        self._load_snapshot()
        self._saved_at = (self.epochs_run, self.step)
        self.compile_seconds = None
        speed.compile = self._choose_compile(forced_compile, dataset)
        self.model = self._wrapped()

    def _batches(self, dataset):
        """This rank's batches: gathered on the device (DeviceBatches), else a DataLoader. The short last batch
        is dropped (as most trainers do): a batch of another shape would compile the model a second time; the
        shuffle puts the dropped samples in other batches next epoch. Only where a full batch remains (a tiny
        shard keeps its one short batch)."""
        speed, device, batch_size = self.speed, self.device, self.batch_size
        drop_last = len(self.sampler) >= batch_size
        if speed.device_data:
            return DeviceBatches(dataset, batch_size, self.sampler, device, drop_last)
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            drop_last=drop_last,
            pin_memory=device.type == "cuda",
            num_workers=speed.workers,
            persistent_workers=speed.workers > 0,
        )

    def _wrapped(self):
        """The model as it trains: compiled where chosen, then wrapped in DDP (as nanoGPT does: DDP's buckets
        split the graph)."""
        model = self.raw_model
        if self.speed.compile:
            if dist.get_world_size() == 1:  # nothing to overlap with the backward: one graph, fewer launches
                torch._dynamo.config.optimize_ddp = False
            mode = "reduce-overhead" if self.speed.cuda_graphs else None
            model = torch.compile(self.raw_model, mode=mode, dynamic=False)
        # gradient_as_bucket_view: the grads live in DDP's all-reduce buckets, no copy in and out each step
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(model, device_ids=device_ids, gradient_as_bucket_view=True)

    def _choose_compile(self, forced, dataset):
        """Compile or not (compile_cache.choose_compile: where the run is long enough to earn it back), a warm
        cache of compiled artifacts loaded first where compiling may be chosen; one line says which and why."""
        self.compile_cache, self._first_steps, self._compiling = None, 1, None
        one_graph = dist.get_world_size() == 1
        if forced or (forced is None and self.device.type == "cuda"):
            self.compile_cache = compile_cache.CompileCache.for_model(
                self.raw_model,
                compile_cache.sample_batch(dataset, self.batch_size),
                self.device,
                precision=self.speed.precision,
                cuda_graphs=self.speed.cuda_graphs,
                channels_last=self.speed.channels_last,
                one_graph=one_graph,  # a single process compiles one graph, DDP one per bucket
            )
            self.compile_cache.load()
        warm = self.compile_cache is not None and self.compile_cache.warm
        steps = len(self.loader) * max(0, self.epochs - self.epochs_run)
        steps = min(steps, max(0, self.max_steps - self.step)) if self.max_steps else steps
        saving = compile_cache.step_saving_s(self.flops_per_sample * self.batch_size, self.peak_flops)
        choice = compile_cache.choose_compile(
            forced, device_type=self.device.type, steps=steps, warm=warm, saving_s=saving
        )
        cache = self.compile_cache
        if choice.compile and cache is not None and cache.enabled and not warm and not one_graph:
            self._first_steps = 2  # cold: the other ranks' first step is eager, their second compiles warm
        if self.rank == 0:
            print(choice.line(), flush=True)
            if choice.compile and cache is not None and cache.said:
                print(cache.said, flush=True)
        return choice.compile

    def _read_snapshot(self):
        """This run's snapshot, else the one it was asked to start from: $DDPCTL_RESUME_FROM, a folder
        (or s3:// prefix) holding a snapshot of the same name (`ddpctl run --resume-from RUN_ID`)."""
        snapshot = load_snapshot(self.snapshot_path)
        start_from = os.environ.get("DDPCTL_RESUME_FROM")
        if snapshot is None and start_from:
            snapshot = load_snapshot(f"{start_from.rstrip('/')}/{os.path.basename(self.snapshot_path)}")
            if snapshot is None:
                raise FileNotFoundError(f"no snapshot {os.path.basename(self.snapshot_path)} in {start_from}")
        return snapshot

    def _load_snapshot(self):
        # Only rank 0 reads the snapshot and broadcasts it, so a node-local snapshot still resumes every rank.
        box = [self._read_snapshot() if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        snapshot = box[0]
        if snapshot is None:
            return
        self.raw_model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in snapshot["model"].items()})
        self.optimizer.load_state_dict(snapshot["optimizer"])
        if self.scheduler is not None and snapshot["scheduler"] is not None:
            self.scheduler.load_state_dict(snapshot["scheduler"])
        if self.scaler.is_enabled() and snapshot.get("scaler"):
            self.scaler.load_state_dict(snapshot["scaler"])
        self.epochs_run, self.step = snapshot["epoch"], snapshot["step"]
        torch.set_rng_state(snapshot["rng"]["torch"])
        if torch.cuda.is_available() and "cuda" in snapshot["rng"]:
            torch.cuda.set_rng_state(snapshot["rng"]["cuda"])
        if self.rank == 0:
            print(f"Resuming from snapshot at epoch {self.epochs_run} ({dist.get_world_size()} ranks)", flush=True)

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad(set_to_none=True)
        if self.speed.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        start = time.perf_counter()
        if self._events is not None:
            self._events[0].record()
        with self.autocast():
            loss = self.loss_fn(self.model(source), targets)
        if self._events is not None:
            self._events[1].record()
            self.compute_s = self._gpu_compute_s  # read when metrics.beat prints: no sync per step
        else:
            self.compute_s = time.perf_counter() - start  # forward and loss: no collective in them
        self.scaler.scale(loss).backward()  # the scaler is a no-op unless fp16
        if self.grad_clip:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def _gpu_compute_s(self):
        """The last step's forward and loss on the GPU, in seconds (waits for that step's forward only)."""
        start, end = self._events
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    def _timed_first_batch(self, source, targets):
        """The first step of a compiled model, which compiles it: timed and reported once. Rank 0 then
        shares what it compiled (compile_cache). On a cold start of several ranks the others take this
        step eagerly (else they would compile the same graphs) and the next one warm, with rank 0's
        artifacts: then the first two steps are timed together."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        start, cache, done = time.perf_counter(), self.compile_cache, self._compiling is not None
        eager = not done and self._first_steps == 2 and self.rank != 0
        with torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext():
            loss = self._run_batch(source, targets)
        sync()
        if cache is not None and not done:
            cache.publish()
        self._compiling = (self._compiling or 0.0) + time.perf_counter() - start
        if self._first_steps == 2 and not done:
            return loss
        self.compile_seconds = self._compiling
        if self.rank == 0:
            how = "compiling with the cached artifacts" if cache is not None and cache.warm else "compiling"
            if self._first_steps == 2:
                how = "2 steps: compiling on rank 0, then the other ranks warm from its artifacts"
            print(
                f"torch.compile: first step took {self.compile_seconds:.1f} s ({how}; --no-compile skips it)",
                flush=True,
            )
            if cache is not None and cache.said and not cache.warm:
                print(cache.said, flush=True)
        return loss

    def _run_epoch(self, epoch):
        """Train one epoch (or until max_steps); return the mean training loss over all ranks."""
        self.sampler.set_epoch(epoch)
        self.model.train()
        self._mark = self._epoch_start = (time.perf_counter(), self.step)  # (when, step): throughput since then
        total, batches, targets = torch.zeros((), device=self.device), 0, None
        for source, targets in self.loader:
            source = source.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
            if self.speed.channels_last and source.dim() == 4:
                source = source.contiguous(memory_format=torch.channels_last)
            first = self.speed.compile and self.compile_seconds is None
            loss = (self._timed_first_batch if first else self._run_batch)(source, targets)
            total, batches, self.step = total + loss, batches + 1, self.step + 1
            metrics.beat(self.step, compute_s=self.compute_s)  # every rank: a line every few seconds
            if first:
                self._mark = self._epoch_start = (time.perf_counter(), self.step)  # throughput without the compile
            if self.rank == 0 and self.log_every and (self.step == 1 or self.step % self.log_every == 0):
                loss = loss.item()  # the GPU sync: the time since the mark is the steps' own
                m = self._metrics("step", epoch + 1, targets, self._mark, loss=round(loss, 4))
                self._mark = (time.perf_counter(), self.step)
                print(f"step {self.step} | loss {m['loss']:.4f}{_speed(m)}", flush=True)
            if self.max_steps and self.step >= self.max_steps:
                break
        if batches == len(self.loader):
            self.epochs_run = epoch + 1
        stats = torch.stack([total, torch.tensor(float(batches), device=self.device)])
        dist.all_reduce(stats)
        mean = (stats[0] / stats[1].clamp(min=1)).item()
        self._epoch_end, self._last_targets = time.perf_counter(), targets
        return mean

    def _metrics(self, kind, epoch, targets, since, now=None, **values):
        """values, the throughput from since (when, step) to now (after a GPU sync), and GPU memory:
        appended to metrics.jsonl and returned for the loss line. Rank 0 only."""
        (then, step0), now = since, now or time.perf_counter()
        if self.step > step0 and now > then:
            samples = (self.step - step0) * self.batch_size * dist.get_world_size() / (now - then)
            values["samples_per_s"] = round(samples, 1)
            if targets is not None and targets.dim() > 1:  # a sequence per sample: its targets are tokens
                values["tokens_per_s"] = round(samples * targets[0].numel(), 1)
            if self.flops_per_sample and self.peak_flops:
                values["mfu"] = round(samples * self.flops_per_sample / dist.get_world_size() / self.peak_flops, 4)
        if self.device.type == "cuda":
            values["gpu_mem_gb"] = round(torch.cuda.max_memory_allocated(self.device) / 2**30, 2)
        values = {"kind": kind, "step": self.step, "epoch": epoch, **values}
        metrics.write_line(self.metrics_path, values)
        return values

    def _save_snapshot(self):
        self._saved_at = (self.epochs_run, self.step)
        if dist.get_rank() != 0:
            return
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state()
        snapshot = {
            "model": self.raw_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "epoch": self.epochs_run,
            "step": self.step,
            "rng": rng,
        }
        path = save_snapshot(snapshot, self.snapshot_path)
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
            extra = self.on_epoch_end(self.epochs_run, loss) if self.on_epoch_end is not None else None
            if self.rank == 0:  # the epoch's line: its mean loss, what on_epoch_end returned (e.g. accuracy)
                since, now, targets = self._epoch_start, self._epoch_end, self._last_targets
                self._metrics("epoch", self.epochs_run, targets, since, now, loss=round(loss, 4), **(extra or {}))
            if self.save_every and self.epochs_run % self.save_every == 0:
                self._save_snapshot()
        if self._saved_at != (self.epochs_run, self.step):
            self._save_snapshot()


def _speed(m):
    """| 1,234 samples/s | 56.7k tokens/s | MFU 41.0% (what the metrics line has)"""
    parts = [f"{m['samples_per_s']:,.0f} samples/s"] if "samples_per_s" in m else []
    parts += [f"{m['tokens_per_s'] / 1e3:,.1f}k tokens/s"] if "tokens_per_s" in m else []
    parts += [f"MFU {100 * m['mfu']:.1f}%"] if "mfu" in m else []
    return "".join(f" | {p}" for p in parts)
