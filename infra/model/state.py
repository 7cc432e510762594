"""Cluster state under the state home (``~/.ddpctl``, or ``$DDPCTL_HOME``).

Each cluster is one JSON file, written atomically (temp file + ``os.replace``). A provider records
every resource as ``planned`` *before* it creates it and marks it ``created`` after, so ``ddpctl down``
can clean up after a crash at any point: whatever is recorded may exist, whatever is not was never made.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import DdpctlError, UsageError
from .host import Host
from .schema import Doc, SchemaError, shown
from .spec import MAX_NODES, MAX_NPROC, PROVIDERS, ClusterSpec
from .words import Word

#: 2: a node's ``ssh`` is null where version 1 wrote {} (both are read).
#: 3: a resource's ``detail`` holds every field of its kind's typed record (``details.py``) where
#: version 2 held only those known so far (both are read: a missing field is its default).
#: 4: a provider's own options (aws: region, instance_type, ...) are in the spec's ``options``, where
#: versions 1 to 3 had every provider's as keys of the spec itself (``_spec`` moves them).
STATE_VERSION = 4


class ClusterPhase(Word):
    """Where a cluster is in its life: the ``status`` of its state file, ``status --json`` and the table.

    planned -> creating -> configuring -> up -> deleting -> deleted. ``configuring``: its resources
    exist and site.yml was under way (``ddpctl configure`` finishes it)."""

    PLANNED = "planned"
    CREATING = "creating"
    CONFIGURING = "configuring"
    UP = "up"
    DELETING = "deleting"
    DELETED = "deleted"


class ResourcePhase(Word):
    """Where one recorded resource is: recorded before it is made (``planned``), made (``created``),
    not needed after all (``skipped``, e.g. a VPC the user brought), gone (``deleted``)."""

    PLANNED = "planned"
    CREATED = "created"
    SKIPPED = "skipped"
    DELETED = "deleted"


class LaunchKind(Word):
    """How ``run`` starts a job on a cluster (``--launcher``): torchrun on every node over SSH, or one
    sbatch job. (What carries a run out, whatever the kind, is ``launch/launcher.Launcher``.)"""

    TORCHRUN = "torchrun"
    SBATCH = "sbatch"


class DamagedState(DdpctlError):
    """A cluster's state file exists but cannot be read (truncated, garbled, not ddpctl's shape)."""

    def __init__(self, name: str, path: Path, reason: str) -> None:
        self.name, self.path, self.reason = name, path, reason
        # the command that works as written: `down` needs --provider where the file no longer says
        try:
            says = read_key(path.read_bytes().decode(errors="replace"), "provider") in PROVIDERS
        except OSError:
            says = False
        down = f"ddpctl down --name {name}" + ("" if says else " --provider PROVIDER")
        super().__init__(
            f"the state file of cluster {name!r} ({path}) is damaged ({reason}): `{down}` cleans up what it can find"
        )


def read_key(text: str, key: str) -> str | None:
    """A string value of ``key`` in what is left of a state file's JSON text (it may be cut anywhere)."""
    m = re.search(rf'"{key}"\s*:\s*"((?:[^"\\]|\\.)*)"', text)
    try:
        return json.loads(f'"{m.group(1)}"') if m else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Salvage:
    """What could still be read from a damaged state file (None: not readable)."""

    reason: str
    provider: str | None = None
    region: str | None = None
    cluster_id: str | None = None
    inventory: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Resource:
    """One thing a provider creates (a directory, an instance, a security group...)."""

    kind: str
    id: str
    status: ResourcePhase = ResourcePhase.PLANNED

    def __post_init__(self) -> None:
        self.status = ResourcePhase(self.status)  # a state file's word; an unknown one is a damaged file

    #: what the provider records of it: read and written only through its kind's typed record, a
    #: ``details.Detail`` of the provider that makes it (``aws/details.py``, ``pcluster/details.py``)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInfo:
    """A node as the launcher sees it. The head node (rendezvous host) is always listed first."""

    name: str
    host: str  # address the other nodes reach it at
    workdir: str  # per-node directory (a variable: nodes may share one filesystem)
    cpus: int = 1
    #: GPUs: what the nvidia role counted at up/configure (``nvidia-smi -L``), before that the instance
    #: type's (aws, pcluster); a run's default is one process per GPU (runs/ranks.node_nprocs)
    gpus: int = 0
    ifname: str | None = None  # interface that routes to the head node, when known
    python: str = ""  # the node's Python with torch ("" -> the cluster spec's)
    env_file: str = ""  # KEY=VALUE file the launcher sources first (written by the nccl_env role)
    bundle_dir: str = ""  # where the training bundle is on the node ("" -> this machine's copy)
    ssh: Host | None = None  # how to reach it over SSH (None: it is this machine)
    torch: str = ""  # the node's torch version as configure found it ("": not known, as on local nodes)
    #: processes (ranks) this node runs when `run` gives no --nproc-per-node; 0: the cluster's count, else
    #: one per GPU (onprem: the inventory's ddpctl_nproc_per_node host variable)
    nproc: int = 0
    #: the node's SSH client config for the cluster's mesh (the ssh_mesh role's; "": the user's own)
    ssh_config: str = ""
    #: the GPUs this node's ranks see, as CUDA_VISIBLE_DEVICES lists them ("": not set, every GPU of its
    #: host): local nodes share one machine's GPUs, each its own (providers/local.split_gpus)
    devices: str = ""
    #: the Python of ddpctl's own environment on the node (the head_controller role's: the head of an aws
    #: cluster with ``--head-instance-profile``, where a lost node is replaced from); "": none
    controller: str = ""


@dataclass
class ClusterState:
    spec: ClusterSpec
    cluster_id: str
    status: ClusterPhase = ClusterPhase.CREATING
    shared_dir: str = ""  # a directory every node can read and write (snapshots)
    nodes: list[NodeInfo] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    ephemeral: bool = False  # brought up by `run` for one run, taken down after it
    launcher: LaunchKind = LaunchKind.TORCHRUN  # how `run` launches here by default
    #: when autodown (``spec.autodown_s``) was last set on the nodes (epoch seconds; 0: never)
    autodown_at: float = 0.0

    def __post_init__(self) -> None:
        self.status, self.launcher = ClusterPhase(self.status), LaunchKind(self.launcher)  # words from a file too

    @property
    def name(self) -> str:
        return self.spec.name

    def resource(self, kind: str, id: str) -> Resource:
        for res in self.resources:
            if res.kind == kind and res.id == id:
                return res
        raise KeyError((kind, id))

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: object) -> ClusterState:
        """A state file's JSON, every field checked (``schema.py``): ``SchemaError`` names the first
        field that is not what ddpctl writes there."""
        doc = Doc(data)
        version = doc.count("version", 1, low=1, high=STATE_VERSION)
        spec = _spec(doc.doc("spec"), version)
        made_by = spec.provider if spec.provider in MAKE_NODES else ""
        state = cls(
            spec=spec,
            cluster_id=doc.text("cluster_id"),
            status=doc.word("status", ClusterPhase, ClusterPhase.CREATING),
            shared_dir=doc.text("shared_dir", ""),
            nodes=[_node(n, made_by) for n in doc.docs("nodes", [])],
            resources=[_resource(r) for r in doc.docs("resources", [])],
            created_at=doc.time("created_at", time.time()),  # as a file of version 1 or 2 leaves it out
            ephemeral=doc.flag("ephemeral", False),
            launcher=doc.word("launcher", LaunchKind, LaunchKind.TORCHRUN),
            autodown_at=doc.time("autodown_at", 0.0),
        )
        doc.done()
        return state


#: The provider options that state files before version 4 kept as keys of the spec, with their empty
#: values, and the providers that took each: the format's history, frozen (an option added since is a
#: new state version with its own step here, not a change to this table).
_FLAT_OPTIONS: dict[str, Any] = {
    **dict.fromkeys(("region", "az", "instance_type", "ami", "ssh_cidr", "vpc_id", "subnet_id", "ssh_user"), ""),
    **{"volume_gb": 0, "spot": False, "private_ip": False, "iam_instance_profile": "", "tags": {}, "configure": True},
}
_FLAT_TAKEN = {"aws": set(_FLAT_OPTIONS), "pcluster": set(_FLAT_OPTIONS) - {"iam_instance_profile"}}


def _spec(doc: Doc, version: int) -> ClusterSpec:
    """Before version 4, a provider's options were keys of the spec: they move into ``options``
    (another provider's are dropped, a missing one is its empty value)."""
    provider = doc.choice("provider", PROVIDERS, "local")
    if version < 4:
        own = {f.name for f in fields(ClusterSpec)}
        flat = {key: doc.raw(key) for key in list(doc.data) if key not in own}
        taken = _FLAT_TAKEN.get(provider, set())
        options = {key: flat.get(key, _FLAT_OPTIONS[key]) for key in _FLAT_OPTIONS if key in taken}
        doc.raw("options", {})  # replaced by the flat keys, as versions 1 to 3 meant
    else:
        options = doc.obj("options", {})
    for key, value in options.items():  # of the kinds a provider's option takes (providers/options.KINDS)
        table = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        if not (isinstance(value, (str, int, bool)) or table):
            raise SchemaError(
                f"{doc.at('options')}.{key}", f"{shown(value)}, not text, a whole number, true/false or a table of text"
            )
    values = dict(
        name=doc.text("name", "default"),
        provider=provider,
        nodes=doc.count("nodes", 1, low=1, high=MAX_NODES),
        nproc_per_node=doc.count("nproc_per_node", 0, high=MAX_NPROC),
        port=doc.count("port", None, low=1, high=65535),
        env=doc.strings("env", {}),
        python=doc.text("python", ClusterSpec.python),
        inventory=doc.text("inventory", ""),
        playbook_vars=doc.strings("playbook_vars", {}),
        options=options,
        autodown_s=doc.count("autodown_s", 0),
    )
    doc.done()
    try:
        return ClusterSpec(**values)
    except UsageError as exc:  # the spec's own checks (a name, an environment variable's)
        raise SchemaError(doc.where, str(exc)) from None


#: The providers that make their nodes (no inventory of the user's names them): a node's ``made_by``
#: where a state file written before it was recorded leaves it out (an SSH failure's hint, AD-2).
MAKE_NODES = frozenset({"aws", "pcluster"})


def _node(doc: Doc, made_by: str = "") -> NodeInfo:
    ssh = doc.raw("ssh", None)  # version 1 wrote {} for "none"
    node = NodeInfo(
        name=doc.text("name"),
        host=doc.text("host"),
        workdir=doc.text("workdir"),
        cpus=doc.count("cpus", 1, low=1),
        gpus=doc.count("gpus", 0),
        ifname=doc.text("ifname", None),
        python=doc.text("python", ""),
        env_file=doc.text("env_file", ""),
        bundle_dir=doc.text("bundle_dir", ""),
        ssh=_host(Doc(ssh, doc.at("ssh")), made_by) if ssh else None,
        torch=doc.text("torch", ""),
        nproc=doc.count("nproc", 0, high=MAX_NPROC),
        ssh_config=doc.text("ssh_config", ""),
        devices=doc.text("devices", ""),
        controller=doc.text("controller", ""),
    )
    doc.done()
    return node


def _host(doc: Doc, made_by: str = "") -> Host:
    host = Host(
        name=doc.text("name"),
        address=doc.text("address"),
        user=doc.text("user", None),
        port=doc.count("port", 22, low=1, high=65535),
        key_file=doc.text("key_file", None),
        ssh_config=doc.text("ssh_config", None),
        ssh_args=doc.texts("ssh_args", ()),  # JSON has lists
        vars=doc.obj("vars", {}),
        made_by=doc.text("made_by", made_by),  # "": the user's inventory
    )
    doc.done()
    return host


def _resource(doc: Doc) -> Resource:
    resource = Resource(
        kind=doc.text("kind"),
        id=doc.text("id"),
        status=doc.word("status", ResourcePhase, ResourcePhase.PLANNED),
        detail=doc.obj("detail", {}),
    )
    doc.done()
    return resource
