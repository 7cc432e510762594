"""Cluster state under the state home (``~/.ddpctl``, or ``$DDPCTL_HOME``).

Each cluster is one JSON file, written atomically (temp file + ``os.replace``). A provider records
every resource as ``planned`` *before* it creates it and marks it ``created`` after, so ``ddpctl down``
can clean up after a crash at any point: whatever is recorded may exist, whatever is not was never made.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ClusterNotFound, DdpctlError, UsageError
from .host import Host
from .spec import ClusterSpec
from .words import Word

#: 2: a node's ``ssh`` is null where version 1 wrote {} (both are read).
#: 3: a resource's ``detail`` holds every field of its kind's typed record (``details.py``) where
#: version 2 held only those known so far (both are read: a missing field is its default).
#: 4: a provider's own options (aws: region, instance_type, ...) are in the spec's ``options``, where
#: versions 1 to 3 had every provider's as keys of the spec itself (``_spec`` moves them).
STATE_VERSION = 4
#: A temp file of an interrupted write (``atomic_write``) this old is left over, not being written.
STALE_TMP_S = 60.0
#: The state home's own id (``StateStore.home_id``), in this file under the home.
HOME_ID_FILE = "home-id"
HOME_ID_PATTERN = r"[0-9a-f]{16}"


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


class Launcher(Word):
    """How ``run`` starts a job on a cluster: torchrun on every node over SSH, or one sbatch job."""

    TORCHRUN = "torchrun"
    SBATCH = "sbatch"


class DamagedState(DdpctlError):
    """A cluster's state file exists but cannot be read (truncated, garbled, not ddpctl's shape)."""

    def __init__(self, name: str, path: Path, reason: str) -> None:
        self.name, self.path, self.reason = name, path, reason
        # the command that works as written: `down` needs --provider where the file no longer says
        try:
            says = _read_key(path.read_bytes().decode(errors="replace"), "provider") is not None
        except OSError:
            says = False
        down = f"ddpctl down --name {name}" + ("" if says else " --provider PROVIDER")
        super().__init__(
            f"the state file of cluster {name!r} ({path}) is damaged ({reason}): `{down}` cleans up what it can find"
        )


def _read_key(text: str, key: str) -> str | None:
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
    #: type's (aws, pcluster); a run's default is one process per GPU (run_prepare.node_nprocs)
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
    launcher: Launcher = Launcher.TORCHRUN  # how `run` launches here by default
    #: when autodown (``spec.autodown_s``) was last set on the nodes (epoch seconds; 0: never)
    autodown_at: float = 0.0

    def __post_init__(self) -> None:
        self.status, self.launcher = ClusterPhase(self.status), Launcher(self.launcher)  # words from a file too

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
        version = data.pop("version", 1)
        return cls(
            spec=_spec(data.pop("spec"), version),
            nodes=[_node(n) for n in data.pop("nodes")],
            resources=[Resource(**r) for r in data.pop("resources")],
            **data,
        )


#: The provider options that state files before version 4 kept as keys of the spec, with their empty
#: values, and the providers that took each: the format's history, frozen (an option added since is a
#: new state version with its own step here, not a change to this table).
_FLAT_OPTIONS: dict[str, Any] = {
    **dict.fromkeys(("region", "az", "instance_type", "ami", "ssh_cidr", "vpc_id", "subnet_id", "ssh_user"), ""),
    **{"volume_gb": 0, "spot": False, "private_ip": False, "iam_instance_profile": "", "tags": {}, "configure": True},
}
_FLAT_TAKEN = {"aws": set(_FLAT_OPTIONS), "pcluster": set(_FLAT_OPTIONS) - {"iam_instance_profile"}}


def _spec(data: dict[str, Any], version: int) -> ClusterSpec:
    """Before version 4, a provider's options were keys of the spec: they move into ``options``
    (another provider's are dropped, a missing one is its empty value)."""
    data = dict(data)
    if version < 4:
        own = {f.name for f in fields(ClusterSpec)}
        flat = {key: data.pop(key) for key in list(data) if key not in own}
        taken = _FLAT_TAKEN.get(data.get("provider", "local"), set())
        data["options"] = {key: flat.get(key, _FLAT_OPTIONS[key]) for key in _FLAT_OPTIONS if key in taken}
    return ClusterSpec(**data)


def _node(data: dict[str, Any]) -> NodeInfo:
    ssh = data.get("ssh")  # version 1 wrote {} for "none"
    host = Host(**{**ssh, "ssh_args": tuple(ssh.get("ssh_args", ()))}) if ssh else None  # JSON has lists
    return NodeInfo(**{**data, "ssh": host})


def default_home() -> Path:
    return Path(os.environ.get("DDPCTL_HOME") or Path.home() / ".ddpctl").expanduser()


class StateStore:
    """Reads and writes cluster state files under one state home.

    The home is made absolute here, once: every path recorded under it is then absolute, so a
    later command from another directory means the same files (a relative ``DDPCTL_HOME`` recorded
    as given made ``down`` delete a folder of that name under the current directory).
    """

    def __init__(self, home: Path | None = None, *, acting_for: str = "") -> None:
        self.home = Path(os.path.abspath(Path(home) if home is not None else default_home()))
        #: another state home's id this store answers ``home_id`` with: ``down --home-id`` of a lost home
        self.acting_for = acting_for

    def check_home(self) -> None:
        """A state home that exists must be a directory (a file there is one line, not "no cluster")."""
        if self.home.exists() and not self.home.is_dir():
            what = "DDPCTL_HOME" if os.environ.get("DDPCTL_HOME") else "the state home"
            raise UsageError(
                f"{what} {self.home} is not a directory: set DDPCTL_HOME to a directory (or remove the file)"
            )

    def owns(self, name: str, path: str | Path) -> bool:
        """``path`` is absolute and lies inside cluster ``name``'s own folder under this home (or is
        it): the only paths ``down`` removes."""
        candidate = Path(path)
        if not candidate.is_absolute():
            return False
        root = Path(os.path.realpath(self.cluster_dir(name)))
        found = Path(os.path.realpath(candidate))
        return found == root or root in found.parents

    def remove_tree(self, name: str, path: str | Path) -> bool:
        """Remove ``path`` if this home's cluster ``name`` owns it (``owns``); False: left as it is."""
        if not self.owns(name, path):
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True

    @property
    def home_id_path(self) -> Path:
        return self.home / HOME_ID_FILE

    def home_id(self) -> str:
        """This state home's id ("": none made yet, as in a home whose clusters an older ddpctl made).
        Cloud resources carry it as a tag (aws: ``ddpctl:home``), so that ``down`` from this home
        deletes only what this home made, never a same-named cluster of another home."""
        if self.acting_for:
            return self.acting_for
        try:
            text = self.home_id_path.read_text().strip()
        except FileNotFoundError:
            return ""
        except (OSError, UnicodeDecodeError) as exc:
            raise DdpctlError(f"the state home's id {self.home_id_path} cannot be read ({exc})") from None
        if not re.fullmatch(HOME_ID_PATTERN, text):
            raise DdpctlError(
                f"the state home's id {self.home_id_path} is damaged (not 16 hex digits): put back the id of "
                "this home (it tags the cloud resources it made), or remove the file if this home made none"
            )
        return text

    def make_home_id(self) -> str:
        """This home's id, made once (random) if it has none: written whole to a temp file, then linked
        into place, which only one of two racing commands can do (the other reads the winner's)."""
        found = self.home_id()
        if found:
            return found
        self.check_writable()
        self.private_dirs()
        fd, tmp = tempfile.mkstemp(dir=self.home, prefix=f".{HOME_ID_FILE}.", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(8) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.home_id_path)  # fails if it exists (as O_EXCL would), never half-written
            except FileExistsError:
                pass
        finally:
            Path(tmp).unlink(missing_ok=True)
        return self.home_id()

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
        """The cluster's state; ``DamagedState`` if its file cannot be read as one."""
        path = self.path(name)
        try:
            data = json.loads(path.read_bytes().decode())
        except FileNotFoundError:
            known = ", ".join(self.names()) or "none"
            raise ClusterNotFound(
                f"no cluster named {name!r} under {self.home} (clusters: {known}); `ddpctl status` lists them"
            ) from None
        except UnicodeDecodeError:
            raise DamagedState(name, path, "not UTF-8 text") from None
        except ValueError as exc:
            raise DamagedState(name, path, f"not JSON: {exc}") from None
        try:
            state = ClusterState.from_dict(data)
        except (TypeError, KeyError, AttributeError, ValueError, UsageError) as exc:
            raise DamagedState(name, path, f"not a ddpctl cluster state: {type(exc).__name__}: {exc}") from None
        if state.name != name:
            raise DamagedState(name, path, f"it records a cluster named {state.name!r}")
        return state

    def salvage(self, name: str) -> Salvage:
        """What ``down`` can still learn from a damaged state file: the provider, region, cluster
        id and inventory, read as text (the file may be cut anywhere)."""
        path = self.path(name)
        try:
            self.load(name)
            return Salvage(reason="readable")
        except DamagedState as exc:
            reason = exc.reason
        text = path.read_bytes().decode(errors="replace")
        keys = ("provider", "region", "cluster_id", "inventory")
        return Salvage(reason, *(_read_key(text, key) for key in keys))

    def save(self, state: ClusterState) -> None:
        self.check_writable()
        self.private_dirs()
        atomic_write(self.path(state.name), json.dumps(state.to_dict(), indent=2) + "\n")
        self._remove_stale_tmp(state.name, STALE_TMP_S)

    def delete(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)
        self._remove_stale_tmp(name, 0.0)

    def _remove_stale_tmp(self, name: str, age_s: float) -> None:
        """Temp files that an interrupted ``atomic_write`` left beside the state file."""
        now = time.time()
        for tmp in self.clusters_dir.glob(f".{glob.escape(name)}.json.*.tmp"):
            try:
                if now - tmp.stat().st_mtime >= age_s:
                    tmp.unlink()
            except FileNotFoundError:
                pass

    def private_dirs(self) -> None:
        """The state home's folders, readable by this user only (run logs, keys, node dirs)."""
        if not self.home.exists():
            self.home.mkdir(parents=True, exist_ok=True, mode=0o700)  # two commands may race to make it
        for sub in (self.clusters_dir, self.home / "runs"):
            sub.mkdir(exist_ok=True, mode=0o700)
            if sub.stat().st_mode & 0o077:
                sub.chmod(0o700)

    def make_run_dir(self, run_id: str) -> Path:
        self.private_dirs()
        path = self.run_dir(run_id)
        path.mkdir(exist_ok=True, mode=0o700)
        return path


class DownStore(StateStore):
    """The store as ``down`` uses it: a state write that fails for want of space is skipped, with a
    warning (``down`` deletes what the state records either way, and removes the file at the end)."""

    def __init__(self, home: Path, progress: Callable[[str], None]) -> None:
        super().__init__(home)
        self._progress, self._warned = progress, False

    def save(self, state: ClusterState) -> None:
        try:
            super().save(state)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if not self._warned:
                self._progress(f"warning: no space left to record progress in {self.path(state.name)}: going on")
                self._warned = True


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
