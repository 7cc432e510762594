"""Smoke test for a DDP cluster: point-to-point send/recv and an all_reduce across every rank.

Run by hand (2 processes on this machine; add --nnodes/--rdzv-endpoint for several nodes):

    torchrun --standalone --nproc-per-node 2 training/message_passing.py

Rank 0 sends 42.0 to every other rank, then all ranks all_reduce(SUM) rank+1, which must equal
world*(world+1)/2. Exits non-zero if anything is off.
"""

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from trainer import ddp_setup


@record  # an uncaught exception goes to torchrun's error file: its root cause names it
def main():
    device = ddp_setup()
    rank, world = dist.get_rank(), dist.get_world_size()

    if rank == 0:
        for dst in range(1, world):
            dist.send(torch.tensor([42.0], device=device), dst=dst)
    else:
        value = torch.zeros(1, device=device)
        dist.recv(value, src=0)
        print(f"rank {rank} received {value.item()} from rank 0", flush=True)

    total = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    result, expected = total.item(), world * (world + 1) / 2
    if result != expected:
        raise RuntimeError(f"rank {rank}: all_reduce gave {result}, expected {expected}")
    print(f"rank {rank}: all_reduce OK ({result} == {expected})", flush=True)

    dist.barrier()  # leave together: a rank tearing down gloo while another still works aborts
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
