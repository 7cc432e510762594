"""All-reduce bandwidth between the ranks of a job (what `ddpctl check` measures per pair of nodes).

Run by hand, like nccl-tests' all_reduce_perf:

    torchrun --standalone --nproc-per-node 2 training/allreduce_bench.py --size-mb 64 --iters 5

Prints, on rank 0, the algorithm bandwidth (bytes / time) and the bus bandwidth
(algbw * 2 * (n - 1) / n, the figure comparable with link speed), in GB/s.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=float, default=32)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    world = dist.get_world_size()
    x = torch.ones(int(args.size_mb * 2**20) // 4, device="cuda" if cuda else "cpu")
    for _ in range(args.warmup):
        dist.all_reduce(x)
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(x)
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.iters
    algbw = x.numel() * 4 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    if dist.get_rank() == 0:
        print(
            f"allreduce size_mb={args.size_mb:g} world={world} time_ms={seconds * 1000:.2f} "
            f"algbw_gbps={algbw:.3f} busbw_gbps={busbw:.3f}",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
