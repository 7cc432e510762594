"""What nvidia-smi and the kernel log say of a node's GPUs, read into typed values (pure).

The node program ``gpu_health`` (``infra/node_programs/gpu_health.py``) runs, on each node:

    nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,ecc.errors.uncorrected.volatile.total,\
ecc.errors.uncorrected.aggregate.total,clocks_event_reasons.active --format=csv,noheader

(``clocks_throttle_reasons.active`` where the driver predates the clocks-event names, before 535), and
the NVIDIA driver's Xid lines of the kernel log (``dmesg``), and prints them back tagged; this module
reads them. A query line reads ``0, GPU-1b7c..., NVIDIA H100 80GB HBM3, 00000000:18:00.0, 0, 0,
0x0000000000000001``; a value the GPU does not report is ``[N/A]`` or ``[Not Supported]``. An Xid line
reads ``NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.``
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the query's fields, in its order (the node program asks for exactly these)
FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "clocks_event_reasons.active",
)
#: the same before driver 535 named them clocks events (the old name is still accepted by new drivers)
OLD_FIELDS = (*FIELDS[:-1], "clocks_throttle_reasons.active")

#: NVML's clocks event (throttle) reason bits, with the names ``nvidia-smi -q`` prints for them
REASONS = (
    (0x1, "Idle"),
    (0x2, "Applications Clocks Setting"),
    (0x4, "SW Power Cap"),
    (0x8, "HW Slowdown"),
    (0x10, "Sync Boost"),
    (0x20, "SW Thermal Slowdown"),
    (0x40, "HW Thermal Slowdown"),
    (0x80, "HW Power Brake Slowdown"),
    (0x100, "Display Clock Setting"),
)
#: the reasons that mean a sick or overheating GPU; the others are a GPU at rest, a power cap it is
#: held to by design, or a setting
BAD_REASONS = frozenset({"HW Slowdown", "SW Thermal Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown"})

#: Xids that are most often the application's own fault (NVIDIA's Xid catalog: a graphics engine
#: exception, a memory page fault, a stopped or preempted channel): named, but a node is not judged by them
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 69})
#: an Xid that says the GPU handled an error (63: a row remapping or page retirement recorded): named only
HANDLED_XIDS = frozenset({63})

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:, (?P<rest>.*))?")
NOT_REPORTED = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "")


@dataclass(frozen=True)
class GpuStatus:
    """One GPU as the query reports it; a count or mask the GPU does not report is None."""

    index: int
    uuid: str
    name: str
    pci: str  # bus id as the kernel log writes it: 0000:18:00 (domain:bus:device), lower case
    ecc_volatile: int | None
    ecc_aggregate: int | None
    reasons_mask: int | None

    @property
    def reasons(self) -> tuple[str, ...]:
        """The active clocks event (throttle) reasons, by nvidia-smi's names."""
        mask = self.reasons_mask or 0
        return tuple(name for bit, name in REASONS if mask & bit)

    @property
    def bad_reasons(self) -> tuple[str, ...]:
        return tuple(r for r in self.reasons if r in BAD_REASONS)


@dataclass(frozen=True)
class Xid:
    """One Xid event of the kernel log: its code, the GPU's PCI address, and the driver's words."""

    code: int
    pci: str
    text: str

    @property
    def application(self) -> bool:
        return self.code in APPLICATION_XIDS

    @property
    def note(self) -> str:
        """Why this Xid is only named ("": it makes its node unhealthy)."""
        if self.code in APPLICATION_XIDS:
            return "most often the application's own error"
        if self.code in HANDLED_XIDS:
            return "an error the GPU handled (a row remapping or page retirement recorded)"
        return ""


def bus_id(text: str) -> str:
    """A PCI address as the kernel log writes it (``0000:18:00``) from nvidia-smi's
    (``00000000:18:00.0``) or the log's own."""
    parts = text.strip().lower().split(".")[0].split(":")
    if len(parts) < 3:
        return text.strip().lower()
    domain, bus, device = parts[-3:]
    return f"{int(domain, 16):04x}:{bus}:{device}" if domain else f"{bus}:{device}"


def _count(value: str) -> int | None:
    value = value.strip()
    if value in NOT_REPORTED or value.startswith("["):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _mask(value: str) -> int | None:
    value = value.strip()
    if not value.lower().startswith("0x"):
        return None
    try:
        return int(value, 16)
    except ValueError:
        return None


class QueryError(ValueError):
    """A query output that is not the fields asked for, with the line that is not."""


def parse_query(text: str) -> list[GpuStatus]:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader``'s lines, one GPU each. A GPU's name may
    hold no comma (nvidia-smi's names do not), so a line splits on ", " into exactly ``FIELDS``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(FIELDS) or not values[0].isdigit():
            raise QueryError(f"not a line of {len(FIELDS)} fields: {line.strip()[:120]}")
        index, uuid, name, pci, volatile, aggregate, reasons = values
        gpus.append(
            GpuStatus(
                index=int(index),
                uuid=uuid,
                name=name,
                pci=bus_id(pci),
                ecc_volatile=_count(volatile),
                ecc_aggregate=_count(aggregate),
                reasons_mask=_mask(reasons),
            )
        )
    return gpus


def parse_xids(lines: list[str]) -> list[Xid]:
    """The NVIDIA driver's Xid events among the kernel log's ``lines`` (``dmesg``'s, with or without
    its time stamps), in their order."""
    found = []
    for line in lines:
        m = XID_LINE.search(line)
        if m:
            found.append(Xid(int(m["code"]), bus_id(m["pci"]), (m["rest"] or "").strip()))
    return found


def gpu_of(xid: Xid, gpus: list[GpuStatus]) -> str:
    """The GPU an Xid names, as ``GPU 3`` where the query listed its address, else its address."""
    for gpu in gpus:
        if gpu.pci == xid.pci:
            return f"GPU {gpu.index}"
    return f"PCI {xid.pci}"
