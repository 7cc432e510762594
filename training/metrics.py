"""Metric lines for `ddpctl metrics`: one JSON object a line in $DDPCTL_SNAPSHOT_DIR/metrics.jsonl.

Standard library only, so that any training script can use it (copy this file next to yours):

    from metrics import log_metrics
    log_metrics(step=step, epoch=epoch, loss=loss.item(), accuracy=acc)

Only global rank 0 writes ($RANK, as torchrun sets it); every value must be JSON (numbers, strings).
The folder is the one ddpctl gives the run (else $DDPCTL_SHARED_DIR, else "."); ddpctl copies the
file into the run's record when the run ends. Keys ddpctl knows: step, epoch, loss, accuracy,
samples_per_s, tokens_per_s, mfu, gpu_mem_gb; any other key is kept and shown as it is.
"""

import json
import os
import time


def metrics_path():
    """Where the lines go: <dir>/metrics.jsonl, <dir> as for the jobs' snapshots (not s3://: "." then)."""
    where = os.environ.get("DDPCTL_SNAPSHOT_DIR") or os.environ.get("DDPCTL_SHARED_DIR") or "."
    return os.path.join("." if where.startswith("s3://") else where, "metrics.jsonl")


def log_metrics(**values):
    """Append one line {"time": epoch seconds, **values} to metrics_path(); rank 0 only, others do nothing."""
    write_line(metrics_path(), values)


def write_line(path, values):
    """Append {"time": epoch seconds, **values} to the file at path, on global rank 0 only."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps({"time": round(time.time(), 3), **values}) + "\n")
