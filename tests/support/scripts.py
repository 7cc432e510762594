"""Training scripts that tests run through ddpctl."""

#: every rank joins the group, then rank 1 raises: the run fails on one rank, the others wait at the barrier
FAIL = """\
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("rank 1 fails on purpose")
dist.barrier()
dist.destroy_process_group()
"""

#: every rank says it started, sleeps SLEEP_S (default 6), waits for GO_FILE to exist where one is named,
#: exits 3 if it is FAIL_RANK, else meets the others and says it is done: a run that lasts long enough
#: to be killed, stopped or cut off
SLOW = """\
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"started rank {rank}", flush=True)
time.sleep(float(os.environ.get("SLEEP_S", "6")))
while not os.path.exists(os.environ.get("GO_FILE", "/")):  # held until the test lets it end
    time.sleep(0.2)
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    sys.exit(3)
dist.barrier()
print(f"done rank {rank}", flush=True)
dist.destroy_process_group()
"""

#: SLOW without torch: every rank says it started, sleeps SLEEP_S (default 6), waits for GO_FILE where one
#: is named, exits 3 if it is FAIL_RANK, else says it is done. For tests that follow a run (its lines, its
#: end, its stop, its lock), not a process group: no rank imports torch or joins a group.
SLEEPER = """\
import os, sys, time
rank = int(os.environ["RANK"])
print(f"started rank {rank}", flush=True)
time.sleep(float(os.environ.get("SLEEP_S", "6")))
while not os.path.exists(os.environ.get("GO_FILE", "/")):  # held until the test lets it end
    time.sleep(0.2)
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    sys.exit(3)
print(f"done rank {rank}", flush=True)
"""
