"""All-reduce bandwidth between the ranks of a job (what `ddpctl check` measures per pair of nodes).

Run by hand, like nccl-tests' all_reduce_perf:

    torchrun --standalone --nproc-per-node 2 training/allreduce_bench.py --size-mb 64 --iters 5

Prints, on rank 0, the algorithm bandwidth (bytes / time) and the bus bandwidth
(algbw * 2 * (n - 1) / n, the figure comparable with link speed), in GB/s.

With --pairs (one process per node, as `ddpctl check` runs it), every pair of ranks instead, each
pair's all-reduce in a two-rank group of its own, in rounds of disjoint pairs that run at once
(N-1 rounds at N ranks, one launch for all of them); the lower rank of a pair prints its line.
--one-pair-at-a-time runs a round's pairs one after the other (ranks that share a host).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def pair_rounds(n):
    """Every pair of ``n`` ranks once, in rounds of disjoint pairs (the circle method): n-1 rounds
    for even n, n for odd n (one rank sits each round out)."""
    players = list(range(n)) + ([None] if n % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        rounds.append(sorted(tuple(sorted(p)) for p in pairs if None not in p))
        players = [players[0], players[-1], *players[1:-1]]  # rotate all but the first
    return rounds


def timed_allreduce(x, iters, warmup, cuda, group=None):
    """Seconds per all-reduce of ``x`` (in ``group``), after ``warmup`` untimed ones."""
    for _ in range(warmup):
        dist.all_reduce(x, group=group)
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x, group=group)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def bandwidths(x, seconds, world):
    algbw = x.numel() * 4 / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def every_pair(x, args, cuda):
    rank, world = dist.get_rank(), dist.get_world_size()
    # its node, for the reader; the backend: where it is gloo, NCCL chose no transport (`ddpctl check`)
    print(f"allreduce pairs: rank {rank} of {world} ready backend={dist.get_backend()}", flush=True)
    for number, pairs in enumerate(pair_rounds(world), 1):
        for batch in [[p] for p in pairs] if args.one_pair_at_a_time else [pairs]:
            # every rank makes every pair's group, in the same order, as torch requires (it names a
            # group by how many came before it); a pair's two ranks then connect to each other only
            groups = {p: dist.new_group(list(p)) for p in batch}
            mine = next((p for p in batch if rank in p), None)
            if mine is not None:
                group = groups[mine]
                seconds = timed_allreduce(x, args.iters, args.warmup, cuda, group)
                algbw, busbw = bandwidths(x, seconds, 2)
                if rank == mine[0]:
                    print(
                        f"pair {mine[0]} {mine[1]} round={number} size_mb={args.size_mb:g} time_ms={seconds * 1000:.2f} "
                        f"algbw_gbps={algbw:.3f} busbw_gbps={busbw:.3f} backend={dist.get_backend()}",
                        flush=True,
                    )
            dist.barrier()  # the next pairs start once these are done everywhere


@record  # an uncaught exception goes to torchrun's error file: its root cause names it
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=float, default=32)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--pairs", action="store_true", help="every pair of ranks, in rounds of disjoint pairs")
    parser.add_argument("--one-pair-at-a-time", action="store_true", help="with --pairs: no two pairs at once")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    world = dist.get_world_size()
    x = torch.ones(int(args.size_mb * 2**20) // 4, device="cuda" if cuda else "cpu")
    if args.pairs:
        every_pair(x, args, cuda)
    else:
        seconds = timed_allreduce(x, args.iters, args.warmup, cuda)
        algbw, busbw = bandwidths(x, seconds, world)
        if dist.get_rank() == 0:
            print(
                f"allreduce size_mb={args.size_mb:g} world={world} time_ms={seconds * 1000:.2f} "
                f"algbw_gbps={algbw:.3f} busbw_gbps={busbw:.3f} backend={dist.get_backend()}",
                flush=True,
            )
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
