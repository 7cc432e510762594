"""A run's own packages (``requirements.txt``) on every node, planned: which file, its hash, the
environment each node's ranks start with, and the step that makes it there.

A user's project whose root holds ``requirements.txt`` (or ``run --requirements FILE``) gets, on
every node, an environment of the cluster's own layered on the node's Python (the one with torch):
``node_programs/deps.py`` makes it, once per hash, and the ranks then start with its Python. The
environment is named by the hash of the requirements, the wheels shipped beside them and the node's
Python: a later run with the same ones reuses it, a changed file makes a new one. Pure: files are
read here, nothing is run.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import DdpctlError, UsageError
from ..node_programs import argv as program_argv
from ..node_programs import shown

#: found in a project's root without ``--requirements``
REQUIREMENTS = "requirements.txt"
#: folders of a project (beside the requirements file, or these under the project's root) whose
#: wheels and source archives pip may install from (``--find-links``)
WHEEL_FOLDERS = ("wheels", "wheelhouse")


@dataclass(frozen=True)
class Requirements:
    """A run's requirements file, read on this machine."""

    path: str  # relative to the project's root (absolute: a bundled job's --requirements)
    text: str
    #: folders of wheels pip may use, relative to the project's root ("." the root itself)
    find_links: tuple[str, ...]
    digest: str  # of the text, the files it includes and the wheels in ``find_links`` (names and contents)
    #: what the nodes need of the project, relative to its root: the file, the files it includes
    #: (``-r``, ``-c``), the wheels (shipped even where .gitignore leaves them out)
    files: tuple[str, ...] = ()

    def env_name(self, python: str) -> str:
        """The environment's folder name on a node whose Python is ``python``."""
        return hashlib.sha256(f"{self.digest}\0{python}".encode()).hexdigest()[:16]


#: the lines of a requirements file that name another file (pip reads it relative to the including one)
INCLUDES = ("-r", "--requirement", "-c", "--constraint")


def _included(path: Path, text: str) -> list[Path]:
    found = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].replace("=", " ", 1).split() if line.startswith("-") else []
        if len(words) >= 2 and words[0] in INCLUDES:
            found.append((path.parent / words[1]).resolve())
    return found


def _read(path: Path, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--requirements {shown}: cannot read {path} ({exc}): give a readable text file") from None


def find(root: Path | None, given: str | None) -> Requirements | None:
    """The run's requirements: ``given`` (``--requirements``: a file; "" or None: the project's
    ``requirements.txt`` if it has one; ``none``: no packages), relative to this machine's cwd."""
    if given == "none":
        return None
    if given:
        path = Path(given).resolve()
        if not path.is_file():
            raise UsageError(f"--requirements {given}: no such file: give your project's requirements.txt")
    elif root is not None and (root / REQUIREMENTS).is_file():
        path = root / REQUIREMENTS
    else:
        return None
    text = _read(path, str(given or path))
    inside = root is not None and path.is_relative_to(root)
    if given and root is not None and not inside:
        raise UsageError(
            f"--requirements {given}: not in the project {root} (only the project reaches the nodes): "
            "move it into the project, or give --workdir above it"
        )
    base = root if inside and root is not None else path.parent
    digest = hashlib.sha256(text.encode())
    files, pending = [path], _included(path, text)
    while pending:  # the files it includes, and theirs: in the hash, and shipped
        more = pending.pop()
        if more in files or not more.is_file():
            continue  # pip says what is missing
        files.append(more)
        more_text = _read(more, str(given or path))
        digest.update(f"\0{more}\0{more_text}".encode())
        pending += _included(more, more_text)
    folders = [path.parent, base, *(base / name for name in WHEEL_FOLDERS)]
    links: list[str] = []
    for folder in folders:
        rel = str(folder.relative_to(base)) if inside else str(folder)
        if not folder.is_dir() or rel in links:
            continue
        archives = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".whl", ".tar.gz", ".zip")))
        if folder != base and not archives and folder.name in WHEEL_FOLDERS:
            continue
        links.append(rel)
        files += archives
        for archive in archives:
            digest.update(f"\0{rel}/{archive.name}\0".encode())
            digest.update(archive.read_bytes())
    shown = str(path.relative_to(base)) if inside else str(path)
    shipped = tuple(str(f.relative_to(base)) for f in files if inside and f.is_relative_to(base))
    return Requirements(shown, text, tuple(links), digest.hexdigest()[:16], shipped)


@dataclass(frozen=True)
class DepsStep:
    """Making (or finding) a run's environment on one node, before anything of the run starts there."""

    node: str
    host: str
    env_dir: str
    #: the node's Python, -c, the program, ENV_DIR, the requirements' text, the file on the node ("": none), find-links folders
    argv: tuple[str, ...]
    cwd: str  # where relative paths of the requirements resolve: the project's copy
    requirements: str = REQUIREMENTS  # the file, as the run's messages name it

    @property
    def python(self) -> str:
        """The environment's Python: the ranks' (and their agent's)."""
        return f"{self.env_dir}/bin/python"

    def shell(self) -> str:
        return f"cd {shlex.quote(self.cwd)} && {shlex.join(self.argv)}"

    def dry_run_lines(self) -> list[str]:
        argv = shown(self.argv)
        text = argv.index("deps") + 2  # after the environment's folder: the requirements' text
        argv[text] = f"<{self.requirements}: {len(argv[text].splitlines())} line(s)>"
        return [
            f"  packages on {self.node} ({self.host}), before the run:",
            f"    cwd:  {self.cwd}",
            f"    argv: {shlex.join(argv)}",
        ]

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "host": self.host,
            "env_dir": self.env_dir,
            "cwd": self.cwd,
            "requirements": self.requirements,
        }


def step(
    req: Requirements, *, node: str, host: str, python: str, envs: str, project_dir: str, workdir: str, local: bool
) -> DepsStep:
    """The step on one node: its ``python`` (with torch), its folder of environments ``envs``, where
    the project is there (``project_dir``; "": a bundled job's, none), its work folder; ``local``:
    a node of this machine (a bundled job's requirements' folders are found there as they are)."""
    env_dir = f"{envs}/{req.env_name(python)}"
    if project_dir:
        links = [posixpath.normpath(posixpath.join(project_dir, rel)) for rel in req.find_links]
        path = posixpath.join(project_dir, req.path)
    else:  # a bundled job's --requirements: its folders are this machine's
        links = list(req.find_links) if local else []
        path = req.path if local else ""  # remote: its text alone
    cwd = project_dir or (links[0] if links else workdir)
    argv = program_argv(python, "deps", env_dir, req.text, path, *links)
    return DepsStep(node, host, env_dir, argv, cwd, req.path)


def outcome(steps: Sequence[DepsStep], said: Sequence[tuple[bool, str]]) -> list[str]:
    """What the executors say of the steps that ran, each ``(ok, its output)``: a progress line per
    node (``node0: the run's packages (requirements.txt) reused in ENV``); raises one ``DdpctlError`` line
    naming every node whose step failed with what it said (``node1: pip: <pip's last error line>``)."""
    lines, failed = [], []
    for deps, (ok, output) in zip(steps, said):
        found = [line.strip() for line in output.splitlines() if line.strip()]
        last = found[-1] if found else "the package step failed and said nothing"
        if not ok:
            failed.append(f"{deps.node}: {last}")
        else:
            how = "reused" if last.startswith("reused ") else "installed"
            lines.append(f"{deps.node}: the run's packages ({deps.requirements}) {how} in {deps.env_dir}")
    if failed:
        raise DdpctlError(f"{'; '.join(failed)}: nothing of the run was started")
    return lines
