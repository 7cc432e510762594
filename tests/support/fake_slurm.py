"""Just enough of Slurm, on this machine, to run a generated sbatch script with bash: ``scontrol show
hostnames`` and ``srun`` (a step on one named node runs its command once; the job's step runs it
once per node of ``SLURM_JOB_NODELIST``, its output in ``--output`` with ``%j``/``%N`` filled in,
and ``--kill-on-bad-exit`` stops the others when one fails). Every "node" is this machine.

Not the test cluster's Slurm (``tests/support/testbed``): no namespaces, no daemons, no root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import spawn

SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] || { echo "fake scontrol: $*" >&2; exit 2; }
echo "$3" | tr , '\\n'
"""

SRUN = """#!{python}
import os, signal, subprocess, sys, time

args = sys.argv[1:]
cmd, opts = args[-1], args[: args.index("bash")]
if "-w" in opts:  # one task on the named node: this machine
    os.execvp("bash", ["bash", "-c", cmd])
out = next(o.split("=", 1)[1] for o in opts if o.startswith("--output="))
tasks = []
for node in os.environ["SLURM_JOB_NODELIST"].split(","):
    path = out.replace("%j", os.environ["SLURM_JOB_ID"]).replace("%N", node)
    with open(path, "w") as f:
        tasks.append(subprocess.Popen(["bash", "-c", cmd], stdout=f, stderr=subprocess.STDOUT))


def stop(*_):
    for t in tasks:
        if t.poll() is None:
            t.terminate()


signal.signal(signal.SIGTERM, lambda *_: (stop(), sys.exit(143)))
while any(t.poll() is None for t in tasks):
    if "--kill-on-bad-exit=1" in opts and any(t.poll() not in (None, 0) for t in tasks):
        stop()
    time.sleep(0.1)
sys.exit(max(abs(t.returncode) for t in tasks))
"""


def fake_slurm_bin(folder: Path) -> Path:
    """A folder with the fake ``scontrol`` and ``srun``, to put first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN.format(python=sys.executable))):
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)
    return folder


def start_batch(script: str, folder: Path, job_id: int, nodes: list[str], cwd: Path) -> subprocess.Popen:
    """The batch script under bash as sbatch would start it on the first node (``spawn``: a test may
    signal it), with the fake Slurm first on PATH; its own output (the job's) on a pipe."""
    env = {
        **os.environ,
        "PATH": f"{fake_slurm_bin(folder)}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NODELIST": ",".join(nodes),
    }
    return spawn(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
