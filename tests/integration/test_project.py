"""A user's project (issue 17): `ddpctl run ./train.py` runs the script from its project, whose
files remote nodes get a copy of (.gitignore honoured, copied again only when the content
changes). The copy over SSH is tested on the test cluster (tests/integration/test_onprem.py); here the
project's rules and a real local run of a script that imports a sibling module and reads a data
file relative to where it starts.

Its pure tests (no process beyond Python) are in tests/unit/test_project.py.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from ddpctl.infra.launch.project import LARGE_BYTES, pack, scan
from tests.support.cli import ddpctl
from tests.support.project import make_project


def test_a_project_script_runs_from_its_directory(home: Path, tmp_path: Path) -> None:
    script = make_project(tmp_path / "proj")
    result = ddpctl("run", str(script), "--nodes", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert f"rank {rank}: hello from helpers: 3 words" in result.stdout


def test_files_outside_git_skip_hidden_and_caches(tmp_path: Path) -> None:
    script = make_project(tmp_path / "p")
    (tmp_path / "p" / ".secret").write_text("x")
    (tmp_path / "p" / "__pycache__").mkdir()
    (tmp_path / "p" / "__pycache__" / "helpers.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "p" / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / "p" / ".venv" / "lib" / "big.so").write_bytes(b"\0")
    project = scan(script)
    assert project.files == ("data/words.txt", "helpers.py", "train.py")
    sizes = [(tmp_path / "p" / name).stat().st_size for name in project.files]
    assert project.script == "train.py" and project.size == sum(sizes)


def test_git_projects_honour_gitignore(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    script = make_project(root / "src")
    (root / ".gitignore").write_text("data/\ncheckpoints/\n")
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "big.pt").write_bytes(b"\0" * 100)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "src/train.py"], check=True)  # tracked and untracked alike
    project = scan(script, root)
    assert project.files == (".gitignore", "src/helpers.py", "src/train.py")  # src/data/ is ignored
    assert project.script == "src/train.py"


def test_the_digest_follows_the_content(tmp_path: Path) -> None:
    script = make_project(tmp_path / "p")
    first = scan(script)
    assert scan(script).digest == first.digest
    (tmp_path / "p" / "helpers.py").write_text("def greeting():\n    return 'changed'\n")
    assert scan(script).digest != first.digest
    assert pack(scan(script)) == pack(scan(script))  # the same bytes: no times, no owners


def test_the_archive_holds_the_files(tmp_path: Path) -> None:
    script = make_project(tmp_path / "p")
    script.chmod(0o755)
    with tarfile.open(fileobj=io.BytesIO(pack(scan(script)))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["data/words.txt", "helpers.py", "train.py"]
        assert members["train.py"].mode == 0o755 and members["helpers.py"].mode == 0o644
        assert tar.extractfile("data/words.txt").read() == b"one two three\n"


def test_a_large_project_is_named_with_its_size(tmp_path: Path) -> None:
    """Above LARGE_BYTES (100 MB) `run` warns before copying: the size, the files, what to do."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    with open(tmp_path / "data.bin", "wb") as f:  # sparse: 101 MB of zeros, no disk
        f.truncate(101 * 2**20)
    project = scan(tmp_path / "train.py")
    assert project.size > LARGE_BYTES
    assert project.size_warning() == (
        f"warning: the project {tmp_path} is 101 MB (2 files), copied to every node when it changes: "
        "leave data out (.gitignore) or give --workdir"
    )
