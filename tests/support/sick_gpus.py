"""GPUs in any state a test wants (issue 38, `check`'s health): a stand-in ``nvidia-smi`` that lists them
(``-L``) and answers `check`'s query (``--query-gpu=`` its fields, narrowed by ``--id`` as a local node's
share asks) from a CSV file beside it, and a stand-in ``dmesg`` whose kernel log holds the Xid lines a
test gives. Put first on a node's PATH (the test cluster's node ``bin/``), or this machine's."""

from __future__ import annotations

from pathlib import Path

from ddpctl.infra.runs import nvidia_smi

SMI = """#!/bin/sh
# a stand-in nvidia-smi (tests/support/sick_gpus.py): the GPUs of gpus.csv beside it
here=$(dirname "$0"); ids=""
for a in "$@"; do case "$a" in --id=*) ids=${{a#--id=}};; esac; done
case "$1" in
  -L) awk -F', ' '{{print "GPU " $1 ": " $3 " (UUID: " $2 ")"}}' "$here/gpus.csv" ;;
  --query-gpu={fields}|--query-gpu={old_fields})
    awk -F', ' -v ids="$ids" 'BEGIN {{ n = split(ids, a, ","); for (i = 1; i <= n; i++) w[a[i]] = 1 }}
      ids == "" || ($1 in w)' "$here/gpus.csv" ;;
  *) echo "stand-in nvidia-smi: $* not answered" >&2; exit 9 ;;
esac
"""
DMESG = """#!/bin/sh
# a stand-in dmesg (tests/support/sick_gpus.py): the kernel log of kernel.log beside it
cat "$(dirname "$0")/kernel.log"
"""
IDLE, THERMAL = "0x0000000000000001", "0x0000000000000041"  # Idle; Idle + HW Thermal Slowdown


def gpu(index: int, *, ecc: int = 0, reasons: str = IDLE, name: str = "NVIDIA A10G") -> str:
    """One GPU's line of the query, as nvidia-smi writes it."""
    return f"{index}, GPU-stand-in-{index:04d}, {name}, 00000000:{0x18 + index:02X}:00.0, {ecc}, {ecc}, {reasons}"


def xid(index: int, code: int, words: str) -> str:
    """A kernel log line of the driver's for an Xid of GPU ``index`` (its address as ``gpu`` gives it)."""
    return f"[ 8123.331702] NVRM: Xid (PCI:0000:{0x18 + index:02x}:00): {code}, pid=4242, name=python, {words}"


def install(bin_dir: Path, gpus: list[str], kernel_log: list[str] | None = None) -> None:
    """The stand-ins in ``bin_dir``: nvidia-smi listing ``gpus`` (lines of ``gpu``), and, given a
    ``kernel_log``, dmesg printing it (else none: the node's own dmesg)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "gpus.csv").write_text("".join(f"{line}\n" for line in gpus))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI.format(fields=",".join(nvidia_smi.FIELDS), old_fields=",".join(nvidia_smi.OLD_FIELDS)))
    smi.chmod(0o755)
    dmesg = bin_dir / "dmesg"
    if kernel_log is None:
        dmesg.unlink(missing_ok=True)
        return
    (bin_dir / "kernel.log").write_text("".join(f"{line}\n" for line in kernel_log))
    dmesg.write_text(DMESG)
    dmesg.chmod(0o755)
