"""Metric lines for `ddpctl metrics`: one JSON object a line in $DDPCTL_SNAPSHOT_DIR/metrics.jsonl.

Standard library only, so that any training script can use it (copy this file next to yours):

    from metrics import log_metrics
    log_metrics(step=step, epoch=epoch, loss=loss.item(), accuracy=acc)

Only global rank 0 writes ($RANK, as torchrun sets it); every value must be JSON (numbers, strings).
The folder is the one ddpctl gives the run (else $DDPCTL_SHARED_DIR, else "."); ddpctl copies the
file into the run's record when the run ends. Keys ddpctl knows: step, epoch, loss, accuracy,
samples_per_s, tokens_per_s, mfu, gpu_mem_gb; any other key is kept and shown as it is.

A heartbeat, so that ddpctl can tell a rank that stopped progressing (and a slow node) within minutes:

    from metrics import beat
    for step, batch in enumerate(loader):
        t0 = time.perf_counter(); loss = loss_fn(model(x), y); t1 = time.perf_counter()
        ...
        beat(step, compute_s=t1 - t0)   # every rank, every step: it prints at most every few seconds

Every rank calls it. Under ddpctl (where $DDPCTL_RUN_ID is set; elsewhere it does nothing) it prints one line "DDPCTL_BEAT {json}" on stdout at most every
$DDPCTL_BEAT_EVERY_S seconds (default 5; the first call at once), with the step, the mean step time
and the mean compute time (time outside collectives, as the caller measures it) since its last line.
compute_s may also be a function, called only when a line goes out, whose value is taken as a sample
(on a GPU: a CUDA event pair's elapsed time, read with no sync at every step).
ddpctl reads these lines and does not show them. The first call also makes SIGUSR1 print the rank's
Python stack on stderr (faulthandler): ddpctl asks for it when the run hangs.
"""

import faulthandler
import json
import os
import signal
import sys
import time

BEAT_MARK = "DDPCTL_BEAT"


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


class Heartbeat:
    """A rank's throttled heartbeat (``beat`` uses one per process): ``beat(step, compute_s)`` every
    step, a line at most every ``every_s`` seconds."""

    def __init__(self, every_s=None, out=None, clock=time.monotonic, on=None):
        self.on = "DDPCTL_RUN_ID" in os.environ if on is None else on  # plain torchrun: no lines
        self.every_s = float(every_s if every_s is not None else os.environ.get("DDPCTL_BEAT_EVERY_S", "5"))
        self.out, self.clock = out, clock
        self.last = None  # when the last line went out (None: none yet)
        self.steps, self.compute, self.computed = 0, 0.0, 0

    def beat(self, step, compute_s=None):
        if not self.on:
            return
        now = self.clock()
        self.steps += 1
        if compute_s is not None and not callable(compute_s):
            self.compute, self.computed = self.compute + float(compute_s), self.computed + 1
        if self.last is None:
            _stack_on_sigusr1()
        elif now - self.last < self.every_s:
            return
        values = {"step": int(step), "steps": self.steps}
        if self.last is not None:
            values["step_s"] = round((now - self.last) / self.steps, 6)
        if callable(compute_s):
            values["compute_s"] = round(float(compute_s()), 6)
        elif self.computed:
            values["compute_s"] = round(self.compute / self.computed, 6)
        out = self.out or sys.stdout
        out.write(BEAT_MARK + " " + json.dumps(values) + "\n")
        out.flush()
        self.last, self.steps, self.compute, self.computed = now, 0, 0.0, 0


_HEART = []  # the process's one Heartbeat, made by the first beat()


def beat(step, compute_s=None):
    """This rank's heartbeat: call it every step, on every rank (see the module's text)."""
    if not _HEART:
        _HEART.append(Heartbeat())
    _HEART[0].beat(step, compute_s)


def _stack_on_sigusr1():
    """SIGUSR1 prints every thread's Python stack on stderr, even while the rank waits in C (a collective)."""
    if hasattr(signal, "SIGUSR1"):
        try:
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        except (ValueError, RuntimeError, OSError):  # not the main interpreter, or stderr has no file
            pass
