"""Built-in facts about instance types: hourly price, vCPUs, GPUs, vCPU quota, placement support.

With AWS credentials, prices come from AWS (``prices.py``: the Price List API for on-demand, EC2's
spot price history for spot, in the cluster's region). Without (a dry run before an account, no
``pricing:GetProducts`` permission, an endpoint without the API, as moto's), this table answers:
us-east-1 Linux on-demand list prices, dated. Other regions cost somewhat more or less; spot prices
vary by the hour and are usually well below these. ``describe_instance_types`` is preferred for
vCPUs and GPUs when it answers; ``TYPES`` covers the table's types when it does not.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICE_REGION = "us-east-1"
#: The date of the sources the figures below come from (the newest that gives each one), not the
#: day they were written down: AWS changes list prices (it cut P4 and P5 by up to 45% in June 2025).
PRICES_AS_OF = "2026-09-24"
#: Figures whose newest source is older than PRICES_AS_OF, and that source's date.
OLDER_PRICES: dict[str, str] = {"p3dn.24xlarge": "2026-01-21"}

# USD per instance-hour, on-demand, Linux, shared tenancy, us-east-1. Where each figure comes from:
#  [PL] github.com/getnable/finopsmcp src/finops/aws_prices.py, EC2_HOURLY: "Hourly on-demand list,
#       us-east-1, Linux, shared tenancy [...] Checked entry by entry against the public AWS Price
#       List (AmazonEC2 [...] us-east-1 offer files, version 20260924211011)", i.e. of 2026-09-24;
#       it leaves p5e.48xlarge out: "no us-east-1 on-demand listing".
#  [V]  instances.vantage.sh's data as github.com/tsaol/aws-gpu data/all_gpu_instances.js has it
#       ("Auto-generated from instances.vantage.sh data", "Last updated: 2026-01-21", commit 7412fd2):
#       the same figures as [PL] for every type both list; p5e.48xlarge has no price there either.
#  [D]  p5en.48xlarge's $63.296 in us-east-1 also in `dstack offer` output of 2026-08-06
#       (github.com/dstackai/dstack pull 4110) and in a pricing.json "as_of" 2026-09-01
#       (github.com/aarora79/agentic-coding-harness-benchmarks), with g6e.12xlarge's $10.493.
# p4d.24xlarge was $32.7726 and p5.48xlarge $98.32 before AWS's June 2025 cut (SkyPilot's AWS
# catalog, github.com/skypilot-org/skypilot-catalog catalogs/v7/aws/vms.csv, before the cut).
# p5e.48xlarge is left out: no source lists an on-demand price for it (Capacity Blocks only), so
# the plan says "unknown" rather than a guess.
#: USD per instance-hour, on-demand, Linux, us-east-1, as of PRICES_AS_OF (OLDER_PRICES: earlier).
ON_DEMAND_USD_PER_HOUR: dict[str, float] = {
    # V100: [PL], [V]; p3dn.24xlarge [V] only (2026-01-21)
    "p3.2xlarge": 3.06,
    "p3.8xlarge": 12.24,
    "p3.16xlarge": 24.48,
    "p3dn.24xlarge": 31.212,
    # A100, H100, H200: after the June 2025 cut; [PL], [V]; p5en.48xlarge also [D]
    "p4d.24xlarge": 21.957642,
    "p4de.24xlarge": 27.44705,
    "p5.48xlarge": 55.04,
    "p5en.48xlarge": 63.296,
    # T4, A10G, L4, L40S: [PL], [V]; g6e.12xlarge also [D]
    "g4dn.xlarge": 0.526,
    "g4dn.12xlarge": 3.912,
    "g5.xlarge": 1.006,
    "g5.2xlarge": 1.212,
    "g5.12xlarge": 5.672,
    "g5.48xlarge": 16.288,
    "g6.xlarge": 0.8048,
    "g6.12xlarge": 4.6016,
    "g6.48xlarge": 13.3504,
    "g6e.xlarge": 1.861,
    "g6e.12xlarge": 10.49264,
    "g6e.48xlarge": 30.13118,
    # no GPU (ParallelCluster's head node, tests): [PL]
    "c5.xlarge": 0.17,
    "m5.xlarge": 0.192,
    "t3.micro": 0.0104,
    "t3.large": 0.0832,
}


def price_date(instance_type: str) -> str:
    """The date of the table's figure for ``instance_type`` (its source's)."""
    return OLDER_PRICES.get(instance_type, PRICES_AS_OF)


def table_text(instance_type: str, region: str, spot: bool) -> str:
    """What the table's price is, in words: the us-east-1 on-demand list price of its date, saying
    so where the cluster is in another region or on spot (or that the table does not list it)."""
    date = price_date(instance_type)
    if instance_type not in ON_DEMAND_USD_PER_HOUR:
        return f"ddpctl's price table (of {date}) does not list {instance_type}"
    text = f"the {PRICE_REGION} on-demand list price of {date}, from ddpctl's table"
    if region != PRICE_REGION:
        text += f", not {region}'s"
    if spot:
        text += ", not a spot price (spot is usually less)"
    return text


@dataclass(frozen=True)
class TypeFacts:
    """What ddpctl needs to know about an instance type."""

    vcpus: int
    gpus: int
    arch: str = "x86_64"
    #: EFA interfaces the type takes, one per network card (EC2's ``NetworkInfo``); 0: no EFA, or a
    #: type EC2 did not describe (``TYPES`` says nothing about EFA)
    efa_interfaces: int = 0


@dataclass(frozen=True)
class Gpu:
    """The NVIDIA GPU of an instance family, and what drives it."""

    model: str
    architecture: str

    @property
    def open_modules(self) -> bool:
        """NVIDIA's open kernel modules drive it (Turing and newer); older GPUs need the proprietary
        ones (Maxwell, Pascal, Volta: driver branch 580 at the newest, and CUDA 12.x)."""
        return self.architecture not in PROPRIETARY_ONLY and self.architecture not in NO_CURRENT_DRIVER

    @property
    def current_driver(self) -> bool:
        """A driver branch still supports it (Kepler's last was 470)."""
        return self.architecture not in NO_CURRENT_DRIVER


#: Architectures that only NVIDIA's proprietary kernel modules drive (the open ones start at
#: Turing); branch 580 is the last driver branch and CUDA 12 the last CUDA major for them.
PROPRIETARY_ONLY = ("Maxwell", "Pascal", "Volta")
#: Architectures no current driver branch supports.
NO_CURRENT_DRIVER = ("Kepler",)

#: The GPU of each NVIDIA GPU instance family: its architecture decides the image and the driver
#: (describe_instance_types names the model, not the architecture).
GPUS: dict[str, Gpu] = {
    "p2": Gpu("K80", "Kepler"),
    "g3": Gpu("M60", "Maxwell"),
    "g3s": Gpu("M60", "Maxwell"),
    "p3": Gpu("V100", "Volta"),
    "p3dn": Gpu("V100", "Volta"),
    "g4dn": Gpu("T4", "Turing"),
    "g5g": Gpu("T4G", "Turing"),
    "g5": Gpu("A10G", "Ampere"),
    "p4d": Gpu("A100", "Ampere"),
    "p4de": Gpu("A100", "Ampere"),
    "g6": Gpu("L4", "Ada"),
    "gr6": Gpu("L4", "Ada"),
    "g6e": Gpu("L40S", "Ada"),
    "p5": Gpu("H100", "Hopper"),
    "p5e": Gpu("H200", "Hopper"),
    "p5en": Gpu("H200", "Hopper"),
    "p6-b200": Gpu("B200", "Blackwell"),
}


def gpu(instance_type: str) -> Gpu | None:
    """The NVIDIA GPU of ``instance_type``'s family, or None (no GPU, or a family not listed)."""
    return GPUS.get(instance_type.split(".", 1)[0])


def is_volta(instance_type: str) -> bool:
    """V100s (compute capability 7.0): p3, p3dn."""
    found = gpu(instance_type)
    return found is not None and found.architecture == "Volta"


#: Used when describe_instance_types does not know the type (moto has no p3.2xlarge): every type of
#: the price table, and p5e.48xlarge (no on-demand price), as [V] above has them.
TYPES: dict[str, TypeFacts] = {
    "p3.2xlarge": TypeFacts(8, 1),
    "p3.8xlarge": TypeFacts(32, 4),
    "p3.16xlarge": TypeFacts(64, 8),
    "p3dn.24xlarge": TypeFacts(96, 8),
    "p4d.24xlarge": TypeFacts(96, 8),
    "p4de.24xlarge": TypeFacts(96, 8),
    "p5.48xlarge": TypeFacts(192, 8),
    "p5e.48xlarge": TypeFacts(192, 8),
    "p5en.48xlarge": TypeFacts(192, 8),
    "g4dn.xlarge": TypeFacts(4, 1),
    "g4dn.12xlarge": TypeFacts(48, 4),
    "g5.xlarge": TypeFacts(4, 1),
    "g5.2xlarge": TypeFacts(8, 1),
    "g5.12xlarge": TypeFacts(48, 4),
    "g5.48xlarge": TypeFacts(192, 8),
    "g6.xlarge": TypeFacts(4, 1),
    "g6.12xlarge": TypeFacts(48, 4),
    "g6.48xlarge": TypeFacts(192, 8),
    "g6e.xlarge": TypeFacts(4, 1),
    "g6e.12xlarge": TypeFacts(48, 4),
    "g6e.48xlarge": TypeFacts(192, 8),
    "c5.xlarge": TypeFacts(4, 0),
    "m5.xlarge": TypeFacts(4, 0),
    "t3.micro": TypeFacts(2, 0),
    "t3.large": TypeFacts(2, 0),
}


@dataclass(frozen=True)
class Quota:
    code: str
    name: str


# EC2 vCPU quotas by instance family letter (Service Quotas, service code "ec2").
_ON_DEMAND = {
    "p": Quota("L-417A185B", "Running On-Demand P instances"),
    "g": Quota("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "vt": Quota("L-DB2E81BA", "Running On-Demand G and VT instances"),
}
_SPOT = {
    "p": Quota("L-7212CCBC", "All P Spot Instance Requests"),
    "g": Quota("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "vt": Quota("L-3819A6DF", "All G and VT Spot Instance Requests"),
}
_STANDARD = Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
_STANDARD_SPOT = Quota("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests")

# Cluster placement groups are not offered for burstable and Mac instances.
_NO_CLUSTER_PLACEMENT = ("t2.", "t3.", "t3a.", "t4g.", "mac1.", "mac2.")


def hourly_usd(instance_type: str, count: int) -> float | None:
    price = ON_DEMAND_USD_PER_HOUR.get(instance_type)
    return None if price is None else round(price * count, 4)


def family(instance_type: str) -> str:
    """'p3.2xlarge' -> 'p'; 'vt1.3xlarge' -> 'vt'."""
    head = instance_type.split(".", 1)[0]
    letters = ""
    for ch in head:
        if not ch.isalpha():
            break
        letters += ch
    return "vt" if letters.startswith("vt") else letters[:1]


def vcpu_quota(instance_type: str, spot: bool) -> Quota:
    table = _SPOT if spot else _ON_DEMAND
    return table.get(family(instance_type), _STANDARD_SPOT if spot else _STANDARD)


def supports_cluster_placement(instance_type: str) -> bool:
    return not instance_type.startswith(_NO_CLUSTER_PLACEMENT)


def format_usd(value: float | None) -> str:
    return "unknown (not in ddpctl's price table)" if value is None else f"${value:,.2f}/h"
