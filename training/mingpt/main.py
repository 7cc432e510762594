"""Character-level GPT on tiny-shakespeare (or your own text) with DistributedDataParallel,
after the minGPT-ddp example in pytorch/examples.

Run by hand; a tiny model that trains in seconds on CPU:

    torchrun --standalone --nproc-per-node 2 training/mingpt/main.py \\
        --n-layer 2 --n-head 2 --n-embd 64 --block-size 32 --batch-size 32 --max-steps 60

Without the size flags it trains the example's model on GPUs (8 layers, 8 heads, 512 wide, context
128, batch 216 per rank: about 12 GB per rank), and on CPUs a small one that finishes in a few
minutes (CPU_SIZE; it says so). Every config field below is a flag (--data PATH, --lr, ...), and so
is every SpeedConfig field of fast_path.py (--no-compile, --precision, --cuda-graphs, ...).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # training/, home of the shared trainer.py

import torch
import torch.distributed as dist
import torch.nn.functional as F
from char_dataset import CharDataset
from model import GPT, GPTConfig
from torch.distributed.elastic.multiprocessing.errors import record
from trainer import SpeedConfig, Trainer, ddp_setup, default_snapshot_path, fraction, parse_config


@dataclass
class TrainerConfig:
    epochs: int = 10
    max_steps: int = 0  # total optimizer steps; 0 = no cap
    batch_size: int = 216  # per rank
    lr: float = 3e-4
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    save_every: int = 1  # epochs between snapshots (one is also written at the end)
    log_every: int = 10  # steps between loss lines
    snapshot_path: str = ""  # a file or s3://bucket/key; "" -> trainer.default_snapshot_path("mingpt")
    data: str = str(Path(__file__).resolve().parents[1] / "data" / "tinyshakespeare.txt")
    data_fraction: float = field(default=1.0, metadata={"type": fraction})  # train on the first fraction of the text
    prompt: str = "O God, O God!"
    sample_chars: int = 200
    seed: int = 0


#: Without a GPU and with no size flag given: a model a CPU trains in minutes (the example's would
#: take hours, and about 12 GB of memory per rank at its batch size).
CPU_SIZE = {"n_layer": 2, "n_head": 4, "n_embd": 128, "block_size": 64, "batch_size": 32, "max_steps": 150}


def size_for_cpu(gpt_cfg, cfg, argv):
    """Apply CPU_SIZE unless a size flag was given (then the user chose); True if applied."""
    given = {a.split("=")[0].removeprefix("--").replace("-", "_") for a in argv if a.startswith("--")}
    if given & set(CPU_SIZE):
        return False
    for name, value in CPU_SIZE.items():
        setattr(gpt_cfg if hasattr(gpt_cfg, name) else cfg, name, value)
    return True


def make_optimizer(model, cfg, fused=False):
    # Weight decay on matrices and embeddings only, not on biases and LayerNorm gains.
    # fused: one CUDA kernel for the whole update instead of a few per parameter group.
    params = list(model.parameters())
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), fused=fused or None)


def flops_per_sample(model, gpt_cfg):
    """Training FLOPs of one sequence (forward and backward): 6 per parameter per token plus attention,
    as nanoGPT's estimate_mfu counts them (the Trainer turns it into MFU on GPUs whose peak it knows)."""
    n, t = sum(p.numel() for p in model.parameters()), gpt_cfg.block_size
    return (6 * n + 12 * gpt_cfg.n_layer * gpt_cfg.n_embd * t) * t


def lm_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


@record  # an uncaught exception goes to torchrun's error file: its root cause names it
def main():
    gpt_cfg, cfg, speed = parse_config(GPTConfig(), TrainerConfig(), SpeedConfig())
    device = ddp_setup()
    if device.type == "cpu" and size_for_cpu(gpt_cfg, cfg, sys.argv[1:]) and dist.get_rank() == 0:
        sizes = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in CPU_SIZE.items())
        print(f"no GPU: the CPU-sized model ({sizes}); give any of these flags to choose", flush=True)
    torch.manual_seed(cfg.seed)
    dataset = CharDataset(cfg.data, gpt_cfg.block_size, cfg.data_fraction)
    model = GPT(gpt_cfg, dataset.vocab_size).to(device)
    if dist.get_rank() == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"{len(dataset.data):,} characters, vocab {dataset.vocab_size}, {n_params / 1e6:.2f}M parameters",
            flush=True,
        )

    optimizer = make_optimizer(model, cfg, fused=device.type == "cuda")
    trainer = Trainer(
        model,
        dataset,
        optimizer,
        lm_loss,
        device,
        speed=speed,
        batch_size=cfg.batch_size,
        epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        save_every=cfg.save_every,
        grad_clip=cfg.grad_clip,
        log_every=cfg.log_every,
        snapshot_path=cfg.snapshot_path or default_snapshot_path("mingpt"),
        flops_per_sample=flops_per_sample(model, gpt_cfg),
    )
    trainer.train()

    if dist.get_rank() == 0:
        model.eval()
        context = torch.tensor([dataset.encode(cfg.prompt) or [0]], device=device)
        out = model.generate(context, cfg.sample_chars, top_k=10)
        print("sample:", flush=True)
        print(dataset.decode(out[0].tolist()), flush=True)
    dist.barrier()  # leave together: a rank tearing down gloo while another still works aborts
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
