"""A user's script that falls sick on cue, for the tests of a run that hangs or slows (launch/watch.py).

It beats each step with ``training/metrics.py`` copied next to it, as a user would (``SICK_BEAT=0``: it
never beats, a script without the helper). Each step "computes" (a sleep: no CPU of the test machine,
and a process stopped from outside measures its stop as compute time), then all-reduces a flag that
ends the run everywhere once the file ``SICK_DONE`` exists. ``SICK=stop``: rank 1 stops itself
(SIGSTOP) at step ``SICK_AT`` (once, where ``SICK_ONCE`` names a file to mark it); ``SICK=skip``: rank 1 skips that step's all-reduce and waits for a
message rank 0 never sends (a deadlock, as a rank that skipped a collective makes).
"""

from __future__ import annotations

import shutil
from pathlib import Path

SCRIPT = """
import os, signal, time
import torch
import torch.distributed as dist
from metrics import beat

dist.init_process_group("gloo")
rank = dist.get_rank()
sick, at = os.environ.get("SICK", ""), int(os.environ.get("SICK_AT", "20"))
done_file, beats = os.environ.get("SICK_DONE", ""), os.environ.get("SICK_BEAT", "1") == "1"
once = os.environ.get("SICK_ONCE", "")  # a file: sick only the first time (an elastic run goes on)
if rank == 0:
    print("training", flush=True)
step = 0
while True:
    step += 1
    start = time.perf_counter()
    time.sleep(0.02)
    compute = time.perf_counter() - start
    if sick == "stop" and rank == 1 and step == at and not (once and os.path.exists(once)):
        if once:
            open(once, "w").close()
        os.kill(os.getpid(), signal.SIGSTOP)
    if sick == "skip" and rank == 1 and step == at:
        dist.recv(torch.zeros(1), src=0)  # SKIPPED: the all-reduce below, never reached
    flag = torch.tensor([float(bool(done_file) and os.path.exists(done_file))])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # STEP'S ALL-REDUCE
    if beats:
        beat(step, compute_s=compute)
    if flag.item():
        break
if rank == 0:
    print(f"done after {step} steps", flush=True)
dist.destroy_process_group()
"""

#: where each rank waits in SCRIPT's deadlock, as its stack says: rank 1, and the others
SKIPPED_LINE = next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if "SKIPPED" in line)
ALL_REDUCE_LINE = next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if "STEP'S ALL-REDUCE" in line)


def write_sick(folder: Path) -> Path:
    """SCRIPT as ``sick/train.py``, with training/metrics.py beside it (a project of its own)."""
    job = folder / "sick" / "train.py"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(SCRIPT)
    shutil.copy(Path(__file__).resolve().parents[2] / "training" / "metrics.py", job.parent / "metrics.py")
    return job
