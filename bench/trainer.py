"""Training speed: the bundled jobs' Trainer set up as the pytorch/examples tutorial is (baseline)
against its fast path, on the same device, in one script.

    python -m bench.trainer                       # GPU: minGPT at the tutorial's shape, MNIST batch 64 and 512
    python -m bench.trainer --device cpu --quick  # CPU: 2 gloo ranks, small shapes

(--repeat 3 reports the median of three rounds; bench/RESULTS-trainer.md has an H100's figures.)

The script starts itself under `torchrun --standalone` (--nproc-per-node 1 on a GPU, 2 on the CPU)
and runs every job in every mode in those processes, one after another, with the same seed and
the same data order (DistributedSampler seed 0 in both), and prints one line per run and a table.

modes:
  baseline  as the tutorial: fp16 autocast + GradScaler for minGPT (MNIST: fp32, as its example),
            unfused AdamW, DataLoader workers (minGPT 4; MNIST 1, through torchvision's per-image
            ToTensor + Normalize), no compile, eager attention, TF32 off
  fast      the Trainer's defaults (SpeedConfig(); compiled on CUDA) + fused AdamW on CUDA + SDPA attention
  graphs    fast + --cuda-graphs (torch.compile mode="reduce-overhead"); CUDA only
  compile   fast + --compile (on the CPU, where the default is off; on CUDA the same as fast)

Data: minGPT trains on 5% of tiny-shakespeare. The MNIST training set can't be downloaded here, so
60,000 MNIST-shaped images are written in the idx format torchvision reads: the 10,000 bundled
test images, six times, each copy shifted by a pixel a different way.

MFU (minGPT): 6 * parameters * tokens/s over the GPU's dense bf16/fp16 peak (PEAK_TFLOPS).
Goals: minGPT fast/baseline >= 2.0x tokens/s; MNIST batch 64 >= 3x samples/s; loss after N steps
no worse than baseline's.
"""

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINING = REPO / "training"
sys.path[:0] = [str(TRAINING), str(TRAINING / "mingpt")]

# Dense bf16/fp16 tensor-core peak per GPU, TFLOP/s (datasheets, without sparsity); first match wins.
PEAK_TFLOPS = [
    ("H200", 989),
    ("GH200", 989),
    ("H100 PCIe", 756),
    ("H100 NVL", 835),
    ("H100", 989),
    ("H800", 989),
    ("A100", 312),
    ("A800", 312),
    ("L40S", 362),
    ("L40", 181),
    ("A10G", 70),
    ("A10", 125),
    ("L4", 121),
    ("V100", 125),
    ("T4", 65),
]

GPU_SHAPES = {  # job: (batch per rank, warm-up steps, timed steps); timed steps stay inside epoch 1
    "mingpt": (216, 15, 150),
    "mnist64": (64, 30, 500),
    "mnist512": (512, 10, 100),
}
CPU_SHAPES = {"mingpt": (16, 3, 20), "mnist64": (64, 3, 20), "mnist512": (512, 2, 6)}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--quick", action="store_true", help="small minGPT (2 layers, 128 wide, block 64), few steps")
    p.add_argument("--nproc", type=int, default=0, help="ranks; default 1 on CUDA, 2 on the CPU")
    p.add_argument(
        "--jobs",
        default="",
        help="comma list of mingpt,mnist64,mnist512 (default: all; --quick on the CPU: mingpt,mnist64)",
    )
    p.add_argument(
        "--modes",
        default="",
        help="comma list of baseline,fast,graphs,compile (default: CUDA "
        "baseline,fast,graphs; CPU baseline,fast,compile)",
    )
    p.add_argument("--steps", type=int, default=0, help="timed steps (default per job)")
    p.add_argument("--warmup", type=int, default=0, help="untimed steps first, compiling included (default per job)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1, help="rounds over every job and mode; the median is reported")
    p.add_argument("--json", default="", help="also write the results here")
    p.add_argument("--data-dir", default="", help=argparse.SUPPRESS)  # set by the launcher for its workers
    return p.parse_args()


# ---- the launcher --------------------------------------------------------------------------------


def write_idx(path, tensor):
    magic = {3: 0x0803, 1: 0x0801}[tensor.dim()]
    path.write_bytes(b"".join(n.to_bytes(4, "big") for n in (magic, *tensor.shape)) + tensor.numpy().tobytes())


def make_mnist(root):
    """60,000 MNIST-shaped training images (the bundled 10,000 test images, shifted copies) in torchvision's layout."""
    import torch
    from mnist import BUNDLED, read_idx

    images, labels = read_idx(BUNDLED / "t10k-images-idx3-ubyte.gz"), read_idx(BUNDLED / "t10k-labels-idx1-ubyte.gz")
    shifts = [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1)]
    train = torch.cat([images.roll(s, dims=(1, 2)) for s in shifts])
    raw = Path(root) / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, x, y in (("train", train, labels.repeat(len(shifts))), ("t10k", images, labels)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", x.contiguous())
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", y.contiguous())


def launch(args):
    import torch

    cuda = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    nproc = args.nproc or (1 if cuda else 2)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not cuda:
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        make_mnist(tmp)
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            __file__,
            *sys.argv[1:],
            "--data-dir",
            tmp,
            "--device",
            "cuda" if cuda else "cpu",
        ]
        return subprocess.run(cmd, env=env).returncode


# ---- the workers ---------------------------------------------------------------------------------


def environment(device):
    import torch

    info = {"torch": torch.__version__, "python": platform.python_version(), "cpus": os.cpu_count()}
    if device.type == "cuda":
        info.update(
            gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version()
        )
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.split()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            info["driver"] = "?"
    else:
        info["cpu"] = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
        except (OSError, StopIteration):
            pass
    return info


def peak_tflops(name):
    return next((tf for key, tf in PEAK_TFLOPS if key in name), None)


def run_case(args, device, job, mode):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.utils.data import TensorDataset
    from torchvision import datasets, transforms
    from trainer import SpeedConfig, Trainer

    cuda, world = device.type == "cuda", dist.get_world_size()
    batch, warmup, steps = (GPU_SHAPES if cuda and not args.quick else CPU_SHAPES)[job]
    warmup, steps = args.warmup or warmup, args.steps or steps
    baseline = mode == "baseline"

    # Each run starts from torch's defaults: nothing compiled, TF32 off for matmuls, no cached memory.
    torch._dynamo.reset()
    gc.collect()
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(args.seed)

    if baseline:
        speed = SpeedConfig(
            precision="fp16" if job == "mingpt" and cuda else "fp32",
            compile=False,
            device_data=False,
            channels_last=False,
            workers=4 if job == "mingpt" else 1,
            tf32=False,
        )
    else:
        # compiled on CUDA whatever the run's length (the default compiles only where a run earns it back)
        speed = SpeedConfig(cuda_graphs=mode == "graphs", compile=True if mode == "compile" or cuda else None)

    if job == "mingpt":
        from char_dataset import CharDataset
        from main import TrainerConfig, lm_loss, make_optimizer
        from model import GPT, GPTConfig

        shape = dict(n_layer=2, n_head=4, n_embd=128, block_size=64) if args.quick else {}
        gpt_cfg = GPTConfig(**shape, attention="eager" if baseline else "sdpa")
        dataset = CharDataset(TRAINING / "data" / "tinyshakespeare.txt", gpt_cfg.block_size, 0.05)
        model = GPT(gpt_cfg, dataset.vocab_size).to(device)
        optimizer = make_optimizer(model, TrainerConfig(), fused=cuda and not baseline)
        loss_fn, grad_clip, units = lm_loss, 1.0, gpt_cfg.block_size
    else:
        from mnist import Net, normalize

        if baseline:  # the tutorial's pipeline: PIL image -> ToTensor -> Normalize, one image at a time
            tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
            dataset = datasets.MNIST(args.data_dir, train=True, transform=tf)
        else:  # mnist.py's: the whole set normalized once, as tensors
            raw = datasets.MNIST(args.data_dir, train=True)
            dataset = TensorDataset(normalize(raw.data), raw.targets)
        model = Net().to(device)
        optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
        loss_fn, grad_clip, units = F.nll_loss, 0.0, 1

    sync = torch.cuda.synchronize if cuda else (lambda: None)

    class BenchTrainer(Trainer):
        def _run_batch(self, source, targets):
            loss = super()._run_batch(source, targets)
            losses.append(loss)
            if len(losses) in (warmup, warmup + steps):
                sync()
                marks.append(time.perf_counter())
            return loss

        def _save_snapshot(self):  # nothing written: this measures training only
            self._saved_at = (self.epochs_run, self.step)

    losses, marks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        sync()
        start = time.perf_counter()
        trainer = BenchTrainer(
            model,
            dataset,
            optimizer,
            loss_fn,
            device,
            batch_size=batch,
            epochs=100,
            max_steps=warmup + steps,
            grad_clip=grad_clip,
            save_every=0,
            snapshot_path=os.path.join(tmp, "snap.pt"),
            speed=speed,
        )
        trainer.train()
    seconds = marks[1] - marks[0]
    # the loss after N steps: the mean over the last 10 steps and over ranks (one step's loss is noisy)
    last = torch.stack(losses[-10:]).float().mean().reshape(1)
    dist.all_reduce(last)
    n_params = sum(p.numel() for p in model.parameters())
    rate = world * batch * units * steps / seconds
    result = {
        "job": job,
        "mode": mode,
        "batch": batch,
        "ranks": world,
        "steps": steps,
        "total_steps": warmup + steps,
        "rate": rate,
        "unit": "tokens/s" if job == "mingpt" else "samples/s",
        "ms_per_iter": 1000 * seconds / steps,
        "warmup_s": marks[0] - start,
        "compile_s": trainer.compile_seconds,
        "loss": last.item() / world,
        "first_loss": losses[0].item(),
        "precision": trainer.speed.precision,
        "params": n_params,
        "peak_mem_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
        "mfu": None,
    }
    if job == "mingpt" and cuda and peak_tflops(torch.cuda.get_device_name(device)):
        result["mfu"] = 6 * n_params * rate / (peak_tflops(torch.cuda.get_device_name(device)) * 1e12)
    return result


def fmt(r):
    mem = f"{r['peak_mem_gib']:.2f} GiB" if r["peak_mem_gib"] is not None else "-"
    mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
    comp = f"{r['compile_s']:.1f}" if r["compile_s"] is not None else "-"
    return (
        f"| {r['job']} | {r['mode']} | {r['precision']} | {r['rate']:,.0f} {r['unit']} | {r['ms_per_iter']:.2f} | "
        f"{mem} | {mfu} | {r['warmup_s']:.1f} / {comp} | {r['first_loss']:.4f} | {r['loss']:.4f} |"
    )


def worker(args):
    import torch
    import torch.distributed as dist
    from trainer import ddp_setup

    device = ddp_setup(args.device)
    cuda, rank0 = device.type == "cuda", dist.get_rank() == 0
    jobs = (
        args.jobs.split(",")
        if args.jobs
        else (["mingpt", "mnist64"] if args.quick and not cuda else ["mingpt", "mnist64", "mnist512"])
    )
    default_modes = ["baseline", "fast", "graphs"] if cuda else ["baseline", "fast", "compile"]
    modes = args.modes.split(",") if args.modes else default_modes
    if rank0:
        print("environment:", json.dumps(environment(device)), flush=True)
        print(
            f"{dist.get_world_size()} rank(s) on {device.type}; per-rank OMP threads {torch.get_num_threads()}",
            flush=True,
        )
    runs = {}  # (job, mode) -> one result per round
    for rnd in range(args.repeat):
        for job in jobs:
            for mode in modes:
                if mode == "graphs" and not cuda:
                    continue
                try:
                    r = run_case(args, device, job, mode)
                except Exception as e:  # report and go on: one failing mode must not hide the others
                    if rank0:
                        print(f"{job} {mode}: FAILED: {type(e).__name__}: {str(e)[:2000]}", flush=True)
                    continue
                runs.setdefault((job, mode), []).append(r)
                if rank0:
                    print(f"result (round {rnd + 1}):", json.dumps(r), flush=True)
    results = []
    for rs in runs.values():  # the round with the median throughput; compile time from round 1 (cold caches)
        r = dict(sorted(rs, key=lambda x: x["rate"])[len(rs) // 2])
        r.update(compile_s=rs[0]["compile_s"], warmup_s=rs[0]["warmup_s"], rounds=[x["rate"] for x in rs])
        results.append(r)
    if rank0:
        print(f"\nmedian of {args.repeat} round(s); warm-up and compile times from round 1 (cold compile caches)")
        print(
            "| job | mode | precision | throughput | ms/iter | peak mem | MFU | warm-up s / compile s "
            "| loss step 1 | loss after N (mean of last 10) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in results:
            print(fmt(r))
        print()
        for job in jobs:
            base = next((r for r in results if r["job"] == job and r["mode"] == "baseline"), None)
            for r in results:
                if base and r["job"] == job and r is not base:
                    print(
                        f"{job}: {r['mode']}/baseline = {r['rate'] / base['rate']:.2f}x {r['unit']}, "
                        f"loss after {r['total_steps']} steps {r['loss']:.4f} vs {base['loss']:.4f}",
                        flush=True,
                    )
        if args.json:
            Path(args.json).write_text(json.dumps({"environment": environment(device), "results": results}, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def main():
    args = parse_args()
    if "LOCAL_RANK" in os.environ:
        worker(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
