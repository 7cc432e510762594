"""One node's part of ``ddpctl check``'s health: what nvidia-smi says of its GPUs, and the NVIDIA
driver's Xid lines of its kernel log, printed back as they are, tagged (read in ``infra/runs/nvidia_smi.py``).

argv: none. Where ``CUDA_VISIBLE_DEVICES`` is set (a local node's share of its host's GPUs), only
those GPUs are asked about. Prints:

- ``GPUHEALTH gpu LINE``: a line of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader``;
- ``GPUHEALTH smi missing``: no nvidia-smi on PATH (a node without GPUs);
- ``GPUHEALTH smi failed REASON``: nvidia-smi failed or did not answer (a GPU fallen off the bus hangs it);
- ``GPUHEALTH xid LINE``: a kernel log line with an Xid (``dmesg``, else ``journalctl -k``), where
  nvidia-smi is there;
- ``GPUHEALTH log unreadable REASON``: neither could be read (``kernel.dmesg_restrict``, no journal);
- ``GPUHEALTH done`` last. Exits 0: the verdict is the controller's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

FIELDS = (
    "index,uuid,name,pci.bus_id,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,clocks_event_reasons.active"
)
# before driver 535 the reasons were "throttle" reasons: the same mask, another name
OLD_FIELDS = FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons")
TIMEOUT_S = 30


def say(kind: str, text: str) -> None:
    print(f"GPUHEALTH {kind} {text}".rstrip(), flush=True)


def run(argv: list[str]) -> tuple[int, str]:
    """Exit status and output (both streams) of ``argv``; 124 when it did not answer in time."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, errors="replace")
    except subprocess.TimeoutExpired:
        return 124, f"did not answer in {TIMEOUT_S} s"
    except OSError as exc:
        return 127, exc.strerror or str(exc)
    return done.returncode, done.stdout + done.stderr


def query(smi: str) -> None:
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    chosen = [f"--id={devices}"] if devices and devices != "-1" else []
    for fields in (FIELDS, OLD_FIELDS):
        rc, out = run([smi, f"--query-gpu={fields}", "--format=csv,noheader", *chosen])
        if rc == 0:
            for line in out.splitlines():
                if line.strip():
                    say("gpu", line.strip())
            return
        if "is not a valid field" not in out:
            break
    first = next((line.strip() for line in out.splitlines() if line.strip()), "")
    say("smi", f"failed exit {rc}: {first[:200]}")


def kernel_log() -> None:
    reasons = []
    for argv in (["dmesg"], ["journalctl", "-k", "-b", "-q", "--no-pager"]):
        if not shutil.which(argv[0]):
            reasons.append(f"no {argv[0]}")
            continue
        rc, out = run(argv)
        if rc == 0:
            for line in out.splitlines():
                if "Xid" in line:
                    say("xid", line.strip())
            return
        first = next((line.strip() for line in out.splitlines() if line.strip()), f"exit {rc}")
        reasons.append(f"{argv[0]}: {first[:120]}")
    say("log", "unreadable " + "; ".join(reasons))


def main(argv: list[str] | None = None) -> int:
    smi = shutil.which("nvidia-smi")
    if smi:
        query(smi)
        kernel_log()
    else:
        say("smi", "missing")  # no GPU: nothing of the kernel log to read either
    say("done", "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
