"""Cluster state under the state home (``~/.ddpctl``, or ``$DDPCTL_HOME``).

Each cluster is one JSON file, written atomically (temp file + ``os.replace``). A provider records
every resource as ``planned`` *before* it creates it and marks it ``created`` after, so ``ddpctl down``
can clean up after a crash at any point: whatever is recorded may exist, whatever is not was never made.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import ClusterNotFound, UsageError
from .inventory import Host
from .spec import ClusterSpec

#: 2: a node's ``ssh`` is null where version 1 wrote {} (both are read).
STATE_VERSION = 2


@dataclass
class Resource:
    """One thing a provider creates (a directory, an instance, a security group...)."""

    kind: str
    id: str
    status: str = "planned"  # planned -> created -> deleted
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeInfo:
    """A node as the launcher sees it. The head node (rendezvous host) is always listed first."""

    name: str
    host: str  # address the other nodes reach it at
    workdir: str  # per-node directory (a variable: nodes may share one filesystem)
    cpus: int = 1
    gpus: int = 0
    ifname: str | None = None  # interface that routes to the head node, when known
    python: str = ""  # the node's Python with torch ("" -> the cluster spec's)
    env_file: str = ""  # KEY=VALUE file the launcher sources first (written by the nccl_env role)
    bundle_dir: str = ""  # where the training bundle is on the node ("" -> this machine's copy)
    ssh: Host | None = None  # how to reach it over SSH (None: it is this machine)
    #: processes (ranks) this node runs when `run` gives no --nproc-per-node; 0: the cluster's count
    #: (onprem: the inventory's ddpctl_nproc_per_node host variable, e.g. the host's GPU count)
    nproc: int = 0


@dataclass
class ClusterState:
    spec: ClusterSpec
    cluster_id: str
    status: str = "creating"  # creating -> up -> deleting; failed
    shared_dir: str = ""  # a directory every node can read and write (snapshots)
    nodes: list[NodeInfo] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    ephemeral: bool = False  # brought up by `run` for one run, taken down after it
    launcher: str = "torchrun"  # how `run` launches here by default: torchrun (over SSH) or sbatch

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
    def from_dict(cls, data: dict[str, Any]) -> ClusterState:
        data = dict(data)
        data.pop("version", None)
        return cls(
            spec=ClusterSpec(**data.pop("spec")),
            nodes=[_node(n) for n in data.pop("nodes")],
            resources=[Resource(**r) for r in data.pop("resources")],
            **data,
        )


def _node(data: dict[str, Any]) -> NodeInfo:
    ssh = data.get("ssh")  # version 1 wrote {} for "none"
    return NodeInfo(**{**data, "ssh": Host(**ssh) if ssh else None})


def default_home() -> Path:
    return Path(os.environ.get("DDPCTL_HOME") or Path.home() / ".ddpctl").expanduser()


class StateStore:
    """Reads and writes cluster state files under one state home."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home) if home is not None else default_home()

    @property
    def clusters_dir(self) -> Path:
        return self.home / "clusters"

    def path(self, name: str) -> Path:
        return self.clusters_dir / f"{name}.json"

    def cluster_dir(self, name: str) -> Path:
        """Where a provider keeps a cluster's local files (node dirs, keys)."""
        return self.clusters_dir / name

    def run_dir(self, run_id: str) -> Path:
        return self.home / "runs" / run_id

    def check_writable(self) -> None:
        """Refuse a state home that cannot be created or written, before anything is created."""
        probe = self.home
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise UsageError(
                f"state home {self.home} is not writable ({probe} is not a writable directory): "
                "set DDPCTL_HOME to a writable directory"
            )

    def names(self) -> list[str]:
        if not self.clusters_dir.is_dir():
            return []
        return sorted(p.stem for p in self.clusters_dir.glob("*.json") if not p.name.startswith("."))  # not locks

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def load(self, name: str) -> ClusterState:
        try:
            data = json.loads(self.path(name).read_text())
        except FileNotFoundError:
            known = ", ".join(self.names()) or "none"
            raise ClusterNotFound(
                f"no cluster named {name!r} under {self.home} (clusters: {known}); `ddpctl status` lists them"
            ) from None
        return ClusterState.from_dict(data)

    def save(self, state: ClusterState) -> None:
        self.check_writable()
        self.clusters_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path(state.name), json.dumps(state.to_dict(), indent=2) + "\n")

    def delete(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
