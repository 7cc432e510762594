"""The state home on disk (``~/.ddpctl``, or ``$DDPCTL_HOME``): ``StateStore`` (the clusters' state
files, the runs' folders, the home's id), ``DownStore`` (the store as ``down`` uses it) and
``atomic_write`` (temp file + ``os.replace``)."""

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
from dataclasses import replace
from pathlib import Path

from .errors import ClusterNotFound, DdpctlError, UsageError
from .schema import SchemaError
from .spec import NAME_RE, PROVIDERS, RUN_ID_RE, check_cluster_name, check_run_id
from .state import (
    ClusterState,
    DamagedState,
    Salvage,
    read_key,
)

#: A temp file of an interrupted write (``atomic_write``) this old is left over, not being written.
STALE_TMP_S = 60.0
#: The state home's own id (``StateStore.home_id``), in this file under the home.
HOME_ID_FILE = "home-id"
HOME_ID_PATTERN = r"[0-9a-f]{16}"


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
        it): the only paths ``down`` removes. The cluster's folder must itself be a folder of this
        home's ``clusters/``, not a link out of it (a link there could point at anything)."""
        candidate = Path(path)
        if not candidate.is_absolute():
            return False
        own = self.cluster_dir(name)
        if own.is_symlink() or Path(os.path.realpath(own)).parent != Path(os.path.realpath(self.clusters_dir)):
            return False
        root = Path(os.path.realpath(own))
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
        """A cluster's state file. Every path of a cluster under this home is made here or in
        ``cluster_dir`` from a name checked here (``check_cluster_name``), whichever door the name
        came through (a flag, the Python API, a record read back): ``../x`` never reaches a path."""
        check_cluster_name(name)
        return self.clusters_dir / f"{name}.json"

    def cluster_dir(self, name: str) -> Path:
        """Where a provider keeps a cluster's local files (node dirs, keys)."""
        check_cluster_name(name)
        return self.clusters_dir / name

    def lock_path(self, name: str, suffix: str = "") -> Path:
        """``clusters/.NAME{suffix}.lock``: the cluster's lock files (``model/locks.py``)."""
        check_cluster_name(name)
        return self.clusters_dir / f".{name}{suffix}.lock"

    def run_dir(self, run_id: str) -> Path:
        """A run's record folder (its id checked, as a cluster's name is)."""
        check_run_id(run_id, "run id")
        return self.home / "runs" / run_id

    def run_dirs(self) -> list[Path]:
        """The runs' record folders, by name (a folder whose name no ddpctl gave is not a run's)."""
        runs = self.home / "runs"
        if not runs.is_dir():
            return []
        return sorted(p for p in runs.iterdir() if RUN_ID_RE.fullmatch(p.name) and p.is_dir())

    def refuse_links(self, path: Path) -> None:
        """``path`` (under this home) and every folder between it and the home are its own, not
        symbolic links: what ddpctl replaces or removes there is never what a link points to."""
        path = Path(os.path.abspath(path))
        for part in (path, *path.parents):
            if part == self.home or self.home not in part.parents:
                break
            if part.is_symlink():
                raise DdpctlError(
                    f"{part} is a symbolic link (to {os.readlink(part)}): ddpctl writes there only into a folder "
                    "of its own; remove the link (what it points to stays), or give another folder"
                )

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
        # not locks (.NAME.lock), nor a file no ddpctl named (not a cluster name: never a path of ours)
        return sorted(p.stem for p in self.clusters_dir.glob("*.json") if NAME_RE.fullmatch(p.stem))

    def exists(self, name: str) -> bool:
        """A cluster of that name is recorded here (a name no cluster can have never is)."""
        return isinstance(name, str) and bool(NAME_RE.fullmatch(name)) and self.path(name).is_file()

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
        except SchemaError as exc:  # every field is checked there: this names the one that is wrong
            raise DamagedState(name, path, str(exc)) from None
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
        found = Salvage(reason, *(read_key(text, key) for key in keys))
        # a provider no ddpctl has is not one to clean up with: `down` asks which (--provider)
        return found if found.provider in (None, *PROVIDERS) else replace(found, provider=None)

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
