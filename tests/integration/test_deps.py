"""A run's own packages (issue 37), for real on the local provider: a project's requirements.txt
names a wheel made on the fly in the project, installed offline (``PIP_NO_INDEX``: the user's pip
config) into an environment layered on the nodes' Python; every rank imports it; a second run
reuses the environment (no pip); a bad requirement is one line naming the node and pip's last error,
and no rank starts. Over SSH: tests/integration/test_onprem.py. Pure parts: tests/unit/test_deps.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ddpctl.infra.node_programs import source
from tests.support.cli import ddpctl
from tests.support.wheels import make_project, make_wheel


def offline() -> dict[str, str]:
    """This environment (the test's state home) with pip told to use no index, as a user's pip config would."""
    return {**os.environ, "PIP_NO_INDEX": "1"}


def test_every_rank_imports_the_projects_package_and_a_second_run_reuses_it(home: Path, tmp_path: Path) -> None:
    script = make_project(tmp_path / "proj")
    first = ddpctl("run", str(script), "--nodes", "2", cwd=tmp_path, env=offline())
    assert first.returncode == 0, first.stderr
    assert "the run's packages (requirements.txt) installed in" in first.stderr
    for rank in (0, 1):
        assert f"rank {rank}: tinypkg says hello" in first.stdout
    envs = list((home / "envs").iterdir())
    again = ddpctl("run", str(script), "--nodes", "2", cwd=tmp_path, env=offline())
    assert again.returncode == 0, again.stderr
    assert "the run's packages (requirements.txt) reused in" in again.stderr
    assert "rank 1: tinypkg says hello" in again.stdout
    assert list((home / "envs").iterdir()) == envs  # nothing new


def test_a_bad_requirement_is_one_line_and_nothing_starts(home: Path, tmp_path: Path) -> None:
    script = make_project(tmp_path / "proj", requirements="ddpctl-tinypkg==0.1\nddpctl-no-such-package==9\n")
    result = ddpctl("run", str(script), "--nodes", "2", cwd=tmp_path, env=offline())
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "Error: node0: pip: No matching distribution found for ddpctl-no-such-package==9: "
        "nothing of the run was started"
    )
    assert "rank" not in result.stdout and "tinypkg says" not in result.stdout


def test_requirements_none_runs_without_the_step(home: Path, tmp_path: Path) -> None:
    script = make_project(tmp_path / "proj")
    (tmp_path / "proj" / "train.py").write_text("print('plain', flush=True)\n")
    result = ddpctl("run", str(script), "--requirements", "none", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "packages on" not in result.stdout


def test_wheels_gitignore_leaves_out_are_shipped_with_the_project(tmp_path: Path) -> None:
    """A project's wheels are often ignored by git: the run ships them all the same (and the files
    the requirements include)."""
    from ddpctl.infra.launch import deps
    from ddpctl.infra.launch.project import scan

    script = make_project(tmp_path / "p")
    (tmp_path / "p" / ".gitignore").write_text("wheels/\n")
    subprocess.run(["git", "init", "-q", str(tmp_path / "p")], check=True)
    req = deps.find(tmp_path / "p", None)
    wheel = "wheels/ddpctl_tinypkg-0.1-py3-none-any.whl"
    assert wheel in req.files and wheel not in scan(script).files  # git leaves it out
    assert set(req.files) <= set(scan(script, extra=req.files).files)  # the run ships it


def test_the_layer_sees_the_nodes_packages_and_is_made_once(tmp_path: Path) -> None:
    """The node program alone, with this Python as the node's: its packages (click here, torch on a
    node) import in the layer; the same folder again is reused; a changed wheel is the planner's
    business (a new hash, a new folder)."""
    make_wheel(tmp_path / "wheels", word="layered")
    env_dir = str(tmp_path / "envs" / "e1")
    argv = [sys.executable, "-c", source("deps"), env_dir, "ddpctl-tinypkg==0.1\n", "", str(tmp_path / "wheels")]
    first = subprocess.run(argv, capture_output=True, text=True, env=offline(), timeout=300)
    assert first.returncode == 0 and first.stdout.strip() == f"installed {env_dir}", first.stderr
    probe = "import click, ddpctl_tinypkg; print(ddpctl_tinypkg.WORD, ddpctl_tinypkg.__file__)"
    seen = subprocess.run([f"{env_dir}/bin/python", "-c", probe], capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    word, path = seen.stdout.split()
    assert word == "layered" and path.startswith(env_dir)  # into the layer, not the node's Python
    again = subprocess.run(argv, capture_output=True, text=True, env=offline(), timeout=300)
    assert again.stdout.strip() == f"reused {env_dir}"


def test_a_file_the_requirements_include_is_read_beside_it(tmp_path: Path) -> None:
    """Given the file's place on the node, pip reads `-r base.txt` next to it (the project's copy)."""
    make_wheel(tmp_path / "wheels")
    (tmp_path / "base.txt").write_text("ddpctl-tinypkg==0.1\n")
    (tmp_path / "requirements.txt").write_text("-r base.txt\n")
    env_dir = str(tmp_path / "envs" / "e2")
    req = str(tmp_path / "requirements.txt")
    argv = [sys.executable, "-c", source("deps"), env_dir, "-r base.txt\n", req, str(tmp_path / "wheels")]
    done = subprocess.run(argv, capture_output=True, text=True, env=offline(), timeout=300, cwd="/")
    assert done.returncode == 0 and done.stdout.strip() == f"installed {env_dir}", done.stdout + done.stderr
    assert list(Path(env_dir).glob("lib/python*/site-packages/ddpctl_tinypkg/__init__.py"))


def test_the_python_api_takes_a_requirements_file(home: Path, tmp_path: Path, monkeypatch) -> None:
    """`ddpctl.run(script, requirements=FILE)`: a file of another name in the project, as `--requirements`."""
    import ddpctl as api

    script = make_project(tmp_path / "proj")
    (tmp_path / "proj" / "requirements.txt").rename(tmp_path / "proj" / "train-reqs.txt")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    lines, said = [], []
    result = api.run(
        str(script),
        nodes=1,
        requirements=tmp_path / "proj" / "train-reqs.txt",
        on_line=lines.append,
        progress=said.append,
    )
    assert result.ok, said
    assert any("the run's packages (train-reqs.txt) installed in" in line for line in said)
    assert any("rank 0: tinypkg says hello" in line.text for line in lines)
