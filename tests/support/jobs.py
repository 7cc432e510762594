"""Small user jobs that the fault tests run instead of MNIST where the point is membership, not learning:
they wait between collectives instead of computing, so a test that must outlast ddpctl's 30 s before a
lost node starts again costs the machine almost nothing meanwhile."""

from __future__ import annotations

from pathlib import Path

#: rounds of all-reduce, one every half second, until the nodes change; it ends in the first round
#: after a failure's restart (TORCHELASTIC_RESTART_COUNT counts those, not a node joining) in which
#: all of MAX_NODES nodes are back, so it cannot end before the lost node joins again
ROUNDS = """
import datetime, os, time
import torch
import torch.distributed as dist

timeout = datetime.timedelta(seconds=float(os.environ.get("DDPCTL_COLLECTIVE_TIMEOUT_S", "60")))
dist.init_process_group("gloo", timeout=timeout)
rank, world = dist.get_rank(), dist.get_world_size()
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
full = int(os.environ.get("MAX_NODES", "3"))
if rank == 0:
    print(f"round {restart}: {world} ranks", flush=True)
step = 0
while True:  # every rank stops at the same step (a new node's agent counts its restarts from 0)
    done = torch.tensor([float(restart > 0 and world == full and step >= 3)])
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
    if done.item():
        break
    step += 1
    time.sleep(0.5)
if rank == 0:
    print(f"done: {world} ranks after {restart} restart(s)", flush=True)
dist.destroy_process_group()
"""


def write_rounds(folder: Path) -> Path:
    """ROUNDS as a user's script in a project folder of its own (ddpctl ships the script's folder)."""
    job = folder / "rounds" / "rounds.py"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(ROUNDS)
    return job
