"""A machine with GPUs it does not have, for local runs (issue 37): a stand-in ``nvidia-smi`` first
on PATH, as the test cluster's nodes have one; the ranks run on the CPU. Its GPUs are healthy to
`check`'s query (``tests/support/sick_gpus.py``, which sick ones come from)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.sick_gpus import gpu, install


def machine(tmp_path: Path, gpus: int | None, **extra: str) -> dict[str, str]:
    """The environment of a machine with ``gpus`` GPUs (None: no nvidia-smi; -1: one that fails)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if gpus is not None:
        if gpus >= 0:  # the ranks run on CPU with gloo
            install(bin_dir, [gpu(i, name="NVIDIA H200") for i in range(gpus)])
        else:
            smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n")
            smi.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **extra}
    if gpus is None:  # whatever this machine has, hidden: only PATH entries without an nvidia-smi
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    if "CUDA_VISIBLE_DEVICES" not in extra:  # the test's own shell may have one
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return env
