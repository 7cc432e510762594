"""What the user asked for, as typed values: the cluster spec and the run spec.

Both are built from flags (and optionally ``ddpctl.toml``) by the CLI and validated here, so that bad
input is refused before anything is created.
"""

from __future__ import annotations

import posixpath
import re
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any

from .env_vars import check_env_names
from .errors import UsageError

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_PORT = 29500
#: Every provider's name, as --provider and a state file's ``spec.provider`` give it (the registry,
#: ``providers/__init__.py``, has a module for each)
PROVIDERS = ("local", "onprem", "aws", "pcluster")
#: Upper bounds, each with the reason the message gives.
MAX_NODES = 1024
MAX_NODES_WHY = "ddpctl starts and watches one agent per node from this machine, one SSH session each"
MAX_NPROC = 1024
MAX_NPROC_WHY = "one process per GPU or CPU core of a node"


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster to provision: where, how many nodes, how many processes each runs."""

    name: str = "default"
    provider: str = "local"
    nodes: int = 1
    #: processes per node for runs that give no --nproc-per-node; 0 (not given): each node's own
    #: (its inventory's ddpctl_nproc_per_node, else one per GPU, else 1: runs/ranks.node_nprocs)
    nproc_per_node: int = 0
    #: c10d rendezvous port on the head node; None picks a free one at launch (local provider).
    port: int | None = None
    #: Extra environment for every rank (NCCL_DEBUG=INFO, ...); a user's value always wins.
    env: dict[str, str] = field(default_factory=dict)
    #: The Python that runs torchrun on the nodes (local: this interpreter).
    python: str = sys.executable
    #: onprem: the Ansible inventory (INI or YAML) that lists the hosts.
    inventory: str = ""
    #: onprem, aws, pcluster: variables for playbooks/site.yml (e.g. nvidia_cuda_version=12.8); they
    #: win over the inventory's, as ansible-playbook's --extra-vars do
    playbook_vars: dict[str, str] = field(default_factory=dict)
    #: The options this provider takes beyond those above (aws: region, instance_type, tags...), as
    #: it declares them (``providers/<name>/options.py``): every one, given or at its empty value
    #: ("", 0, False: the provider's default, which its plan fills in), once ``providers.checked_spec``
    #: has checked them; given another provider's option, that refuses it by its flag.
    options: dict[str, Any] = field(default_factory=dict)
    #: seconds without an active run after which the cluster takes itself down (``--autodown``,
    #: ``ddpctl autodown``; infra/hosts/autodown.py); 0: off. Only providers with ``Provider.autodown``.
    autodown_s: int = 0

    def __post_init__(self) -> None:
        """What holds for every provider; what this provider takes is checked where the cluster is
        planned (``providers.checked_spec``, from ``lifecycle.clusters.plan_up``)."""
        check_cluster_name(self.name)
        check_count("--nodes", self.nodes, MAX_NODES, MAX_NODES_WHY)
        if self.nproc_per_node != 0:
            check_count("--nproc-per-node", self.nproc_per_node, MAX_NPROC, MAX_NPROC_WHY)
        if self.port is not None and (isinstance(self.port, bool) or not 1024 <= self.port <= 65535):
            raise UsageError(f"--port {self.port} is out of range: choose a port from 1024 to 65535")
        check_env_names(self.env)
        if isinstance(self.autodown_s, bool) or not isinstance(self.autodown_s, int) or self.autodown_s < 0:
            raise UsageError(f"--autodown {self.autodown_s!r} is not a duration: give e.g. 30m, 2h or 1h30m (or off)")
        check_playbook_vars(self)


#: ``run --hang-timeout``'s default, in seconds: a script that prints nothing for 10 minutes is hung
HANG_TIMEOUT_S = 600
MIN_HANG_TIMEOUT_S = 5
#: ``run --health-every``'s default, in seconds: the health query (nvidia-smi, seconds) on the run's nodes
#: with GPUs this often while it goes (``runs/health_in_runs.LiveLook``)
HEALTH_EVERY_S = 600
MIN_HEALTH_EVERY_S = 10


def check_seconds(flag: str, seconds: object, least: int) -> None:
    """A run's period or timeout in whole seconds: ``least`` or more, or 0 for off."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or (0 < seconds < least) or seconds < 0:
        raise UsageError(f"{flag} {seconds!r} is not a time in seconds: give {least} or more (e.g. 600), or 0 for off")


@dataclass(frozen=True)
class RunSpec:
    """One launch of a job on a cluster."""

    job: str
    args: tuple[str, ...] = ()
    nodes: int = 1
    #: one count for every node, or one per node (heterogeneous nodes: ``(2, 1)``)
    nproc_per_node: int | tuple[int, ...] = 1
    #: None: 0, or 3 for an elastic run (whose survivors restart their workers when a node is lost)
    max_restarts: int | None = None
    run_id: str = ""
    env: dict[str, str] = field(default_factory=dict)
    #: names in ``env`` whose values are secrets: never recorded or shown (``run_env``)
    secret_env: frozenset[str] = frozenset()
    #: elastic (``--nodes MIN:MAX``): the run goes on while at least this many nodes remain; 0: not elastic
    min_nodes: int = 0
    #: where the jobs keep their snapshot (DDPCTL_SNAPSHOT_DIR): an absolute directory or s3://bucket/prefix;
    #: "" = a folder of the run's own in the cluster's shared directory (``torchrun.run_snapshot_dir``)
    snapshot_dir: str = ""
    #: where the nodes find a snapshot to start from, another run's (``run --resume-from``); "": none
    resume_from: str = ""
    #: no progress (a heartbeat or a line) from any rank for this long is a hang (launch/watch.py): the
    #: ranks are looked at and the run ended; ranks that beat are judged by their own pace. 0: off
    hang_timeout_s: int = HANG_TIMEOUT_S
    #: the health query on the run's nodes with GPUs this often while it goes (``health_in_runs.LiveLook``); 0: off
    health_every_s: int = HEALTH_EVERY_S

    def __post_init__(self) -> None:
        check_count("--nodes", self.nodes, MAX_NODES, MAX_NODES_WHY)
        check_snapshot_dir(self.snapshot_dir)
        check_seconds("--hang-timeout", self.hang_timeout_s, MIN_HANG_TIMEOUT_S)
        check_seconds("--health-every", self.health_every_s, MIN_HEALTH_EVERY_S)
        check_env_names(self.env)
        if self.min_nodes and not 1 <= self.min_nodes <= self.nodes:
            raise UsageError(
                f"--nodes {self.min_nodes}:{self.nodes}: MIN must be from 1 to MAX, e.g. --nodes 2:{max(self.nodes, 2)}"
            )
        if self.max_restarts is None:
            object.__setattr__(self, "max_restarts", 3 if self.elastic else 0)
        if isinstance(self.nproc_per_node, tuple):
            if len(self.nproc_per_node) != self.nodes:
                given = ",".join(map(str, self.nproc_per_node))
                raise UsageError(
                    f"--nproc-per-node {given} gives {len(self.nproc_per_node)} value(s) for --nodes {self.nodes}: "
                    "give one value, or one per node"
                )
            for n in self.nproc_per_node:
                check_count("--nproc-per-node", n, MAX_NPROC, MAX_NPROC_WHY)
        else:
            check_count("--nproc-per-node", self.nproc_per_node, MAX_NPROC, MAX_NPROC_WHY)
        if self.max_restarts < 0:
            raise UsageError(f"--max-restarts {self.max_restarts} is negative: use 0 or more")
        if not self.run_id:
            object.__setattr__(self, "run_id", new_run_id())
        else:
            check_run_id(self.run_id)

    @property
    def elastic(self) -> bool:
        return 0 < self.min_nodes < self.nodes

    @property
    def node_snapshot_dir(self) -> str:
        """``snapshot_dir`` when it is a directory on the nodes (what they must be able to write); "" for
        s3:// or none given."""
        return "" if self.snapshot_dir.startswith("s3://") else self.snapshot_dir

    def nprocs(self) -> tuple[int, ...]:
        """Processes on each node, in node order."""
        if isinstance(self.nproc_per_node, tuple):
            return self.nproc_per_node
        return (self.nproc_per_node,) * self.nodes


def check_snapshot_dir(value: str) -> None:
    """``--snapshot-dir``: an absolute directory (as the nodes see it) or s3://BUCKET[/PREFIX]."""
    if not value:
        return
    if value.startswith("s3://"):
        bucket = value.removeprefix("s3://").partition("/")[0]
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            what = f"bucket name {bucket!r} is not valid" if bucket else "has no bucket"
            raise UsageError(f"--snapshot-dir {value}: {what}: give s3://BUCKET/PREFIX, e.g. s3://my-bucket/runs/mnist")
    elif "://" in value or not value.startswith("/"):
        raise UsageError(
            f"--snapshot-dir {value}: give an absolute directory every node can read (e.g. /fsx/snapshots) "
            "or s3://BUCKET/PREFIX"
        )
    else:
        top = "/" + posixpath.normpath(value).lstrip("/").partition("/")[0]
        if top in KERNEL_FILESYSTEMS:  # root may create files there that vanish, or write to devices
            raise UsageError(
                f"--snapshot-dir {value} is under {top}, the kernel's, not storage: give a directory on a disk "
                "every node can read (e.g. /fsx/snapshots) or s3://BUCKET/PREFIX"
            )


#: top-level folders of kernel filesystems: no place for a snapshot (whoever runs the job)
KERNEL_FILESYSTEMS = ("/proc", "/sys", "/dev")


#: Set by ddpctl itself for every site.yml run (infra/hosts/site_play.py).
RESERVED_PLAYBOOK_VARS = ("ssh_mesh_controller_key_dir", "nccl_env_master_addr")
#: Ansible's connection variables (and every ansible_ssh_*): as extra vars they would beat the inventory
CONNECTION_VARS = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_connection",
    "ansible_password",
    "ansible_private_key_file",
)


def check_playbook_vars(spec: ClusterSpec) -> None:
    """The variables' names (whether the provider runs playbooks at all: ``Provider.check_spec``)."""
    for key in spec.playbook_vars:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", key):
            raise UsageError(f"invalid --playbook-var name {key!r}: an Ansible variable, e.g. nvidia_cuda_version=12.8")
        if key in RESERVED_PLAYBOOK_VARS:
            raise UsageError(f"--playbook-var {key} is set by ddpctl itself: leave it out")
        if key in CONNECTION_VARS or key.startswith("ansible_ssh_"):
            raise UsageError(
                f"--playbook-var {key} would override every host's connection in the playbooks, while ddpctl's "
                "own SSH follows the inventory: set it in the inventory, per host or group"
            )


def check_cluster_name(name: str) -> None:
    """A cluster name: also a file name under the state home and part of AWS resource names."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise UsageError(
            f"invalid cluster name {name!r}: use lowercase letters, digits and '-', "
            "starting with a letter (at most 39 characters)"
        )


def check_run_id(run_id: str, flag: str = "--run-id") -> None:
    """A run id: torchrun's --rdzv-id and a directory name under the state home's runs/."""
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(
            f"invalid {flag} {run_id!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit "
            "(at most 64 characters)"
        )


def check_positive(flag: str, value: int) -> None:
    if value < 1:
        raise UsageError(f"{flag} {value} is not allowed: use 1 or more")


def check_count(flag: str, value: int, maximum: int, why: str) -> None:
    """A whole count from 1 to ``maximum`` (``why``: the reason for the bound, said in the message)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{flag} {value!r} is not a whole number: use 1 or more")
    check_positive(flag, value)
    if value > maximum:
        raise UsageError(f"{flag} {value} is too many: at most {maximum} ({why})")


def new_run_id() -> str:
    """A run id that is unique per run (it is also torchrun's --rdzv-id)."""
    return "r" + secrets.token_hex(5)
