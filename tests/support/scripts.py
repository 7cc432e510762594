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
