"""A user's project, shipped to remote nodes for ``ddpctl run SCRIPT``: the script's directory (or
``--workdir``), the files git would track there (``.gitignore`` honoured; outside a git work tree,
every file but hidden ones and caches), identified by a content hash so that an unchanged project
is not copied again.

``scan`` reads the files and hashes them (the plan needs the hash: the nodes' copy is named by it);
``pack`` writes the archive the SSH executor uploads. Both run on this machine only.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import UsageError

#: Above this, `run` says the project is large (every node gets a copy when it changes).
LARGE_BYTES = 100 * 1024 * 1024
#: Skipped outside a git work tree (where .gitignore decides).
SKIPPED_DIRS = {"__pycache__", "node_modules", ".venv", "venv", ".git", ".mypy_cache", ".pytest_cache"}


@dataclass(frozen=True)
class Project:
    root: str  # the directory on this machine
    script: str  # the script, relative to root
    files: tuple[str, ...]  # relative to root, sorted
    digest: str  # of the names and contents: the nodes' copy is projects/<digest>
    size: int  # bytes

    def to_dict(self) -> dict:
        return {"root": self.root, "script": self.script, "files": len(self.files), "digest": self.digest}

    def size_warning(self) -> str:
        """What ``run`` says of a project above ``LARGE_BYTES``."""
        return (
            f"warning: the project {self.root} is {self.size / 2**20:,.0f} MB ({len(self.files)} files), "
            "copied to every node when it changes: leave data out (.gitignore) or give --workdir"
        )


def locate(script: Path, workdir: Path | None = None) -> Project:
    """The project ``script`` belongs to (``workdir``, else the script's directory), not read: what
    this machine's nodes need (they run it in place)."""
    root = (workdir or script.parent).resolve()
    if not root.is_dir():
        raise UsageError(f"--workdir {workdir}: not a directory: give the directory of your project")
    if not script.resolve().is_relative_to(root):
        raise UsageError(f"--workdir {root} does not contain {script}: give the directory your script is in, or above")
    return Project(str(root), str(script.resolve().relative_to(root)), (), "", 0)


def scan(script: Path, workdir: Path | None = None, extra: tuple[str, ...] = ()) -> Project:
    """The project with its files and their hash: what remote nodes get a copy of (``extra``:
    files of it they need whatever .gitignore says, the run's requirements and wheels)."""
    root = Path(locate(script, workdir).root)
    files = _git_files(root)
    if files is None:
        files = _walk(root)
    rel_script = str(script.resolve().relative_to(root))
    if not {rel_script, *extra} <= set(files):  # an ignored script still runs
        files = sorted({*files, rel_script, *extra})
    digest, size = hashlib.sha256(), 0
    for name in files:
        data = (root / name).read_bytes()
        size += len(data)
        digest.update(f"{name}\0{len(data)}\0{os.access(root / name, os.X_OK)}\0".encode())
        digest.update(data)
    return Project(str(root), rel_script, tuple(files), digest.hexdigest()[:16], size)


def _git_files(root: Path) -> list[str] | None:
    """What git would track under ``root`` (tracked and untracked, not ignored); None: not in a work tree."""
    try:
        found = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            capture_output=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    names = [n for n in found.stdout.decode(errors="surrogateescape").split("\0") if n]
    return sorted(n for n in names if (root / n).is_file())  # not deleted ones, not submodules


def _walk(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith(".")]
        for name in filenames:
            path = Path(dirpath) / name
            if not name.startswith(".") and path.is_file() and not name.endswith(".pyc"):
                out.append(str(path.relative_to(root)))
    return sorted(out)


def pack(project: Project) -> bytes:
    """The project as a gzipped tar, the same bytes for the same files (no times, no owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name in project.files:
            path = Path(project.root) / name
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
