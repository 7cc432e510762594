"""Nothing deleted that is not ours, round 3 (issue 42): the three deletions of the turn-4 audit
(../shared/audits/reliability-turn4.md X1-X3), each through real processes with a decoy folder that
must survive, and ``download``'s folders that cannot be written (B8, B9, B14, B21, P48)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, tree

RID = "rkept1"


def _api(code: str, home: Path) -> subprocess.CompletedProcess:
    """``python -c CODE`` with ``import ddpctl`` first, in state home ``home``."""
    env = {**os.environ, "DDPCTL_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", f"import ddpctl\n{code}"], env=env, capture_output=True, text=True, timeout=120
    )


def _decoy(folder: Path) -> Path:
    folder.mkdir(parents=True)
    precious = folder / "precious.txt"
    precious.write_text("not ddpctl's\n")
    return precious


@pytest.mark.parametrize("call", ["down", "status", "check"])
def test_the_apis_name_never_reaches_a_folder_outside_the_home(tmp_path: Path, call: str) -> None:
    """X3: ``ddpctl.down(name="../../victimdir")`` beside a ``victimdir.json`` that says "local"
    removed the folder. Now the name is refused where every path of a cluster is made."""
    precious = _decoy(tmp_path / "victimdir")
    (tmp_path / "victimdir.json").write_text('{"provider": "local"}\n')
    home = tmp_path / "a" / "home"
    result = _api(f"ddpctl.{call}(name='../../victimdir')", home)
    assert result.returncode == 1, result.stderr
    assert "UsageError: invalid cluster name '../../victimdir'" in result.stderr.splitlines()[-1]
    assert precious.read_text() == "not ddpctl's\n"
    assert (tmp_path / "victimdir.json").is_file()
    assert not home.exists()  # nothing made: not even the lock's folder


def test_the_apis_down_never_takes_down_another_homes_cluster(tmp_path: Path) -> None:
    """X2: from home h2, ``ddpctl.down(name="../../h1/clusters/x")`` took h1's cluster x down."""
    h1, h2 = tmp_path / "h1", tmp_path / "h2"
    up = ddpctl("up", "--name", "x", "--nodes", "2", env={**os.environ, "DDPCTL_HOME": str(h1)})
    assert up.returncode == 0, up.stderr
    precious = h1 / "clusters" / "x" / "shared" / "precious.txt"
    precious.write_text("h1's\n")
    try:
        result = _api("ddpctl.down(name='../../h1/clusters/x')", h2)
        assert result.returncode == 1 and "invalid cluster name" in result.stderr.splitlines()[-1], result.stderr
        assert precious.read_text() == "h1's\n"
        assert json.loads((h1 / "clusters" / "x.json").read_text())["status"] == "up"
        assert not h2.exists()
    finally:
        assert ddpctl("down", "--name", "x", env={**os.environ, "DDPCTL_HOME": str(h1)}).returncode == 0


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state home with a local cluster up and run RID on it (its outputs on the cluster)."""
    tmp = tmp_path_factory.mktemp("kept")
    home = tmp / "home"
    env = {**os.environ, "DDPCTL_HOME": str(home)}
    script = tmp / "snap.py"  # rank 0 leaves a file in the run's snapshot folder, as a trainer would
    script.write_text(
        "import os, pathlib\n"
        "if os.environ['RANK'] == '0':\n"
        "    d = pathlib.Path(os.environ['DDPCTL_SNAPSHOT_DIR']); d.mkdir(parents=True, exist_ok=True)\n"
        "    (d / 'snap.txt').write_text('weights')\n"
    )
    assert ddpctl("up", "--nodes", "2", env=env).returncode == 0
    run = ddpctl("run", str(script), "--nodes", "2", "--run-id", RID, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    yield home
    ddpctl("down", "--no-keep-outputs", env=env)


def test_download_never_empties_the_folder_a_linked_outputs_points_to(kept: Path, tmp_path: Path) -> None:
    """X1: ``runs/RID/outputs`` a symbolic link to a folder of the user's: ``download RID`` resolved
    it, skipped its "already exists" refusal and replaced the folder's contents. Now refused in one
    line, and `down` (which would keep the outputs there) refuses the same way."""
    env = {**os.environ, "DDPCTL_HOME": str(kept)}
    precious = _decoy(tmp_path / "keep")
    outputs = kept / "runs" / RID / "outputs"
    outputs.symlink_to(tmp_path / "keep")
    try:
        result = ddpctl("download", RID, env=env)
        assert result.returncode == 1, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("Error: ") and "is a symbolic link" in lines[-1], result.stderr
        assert tree(tmp_path / "keep") == ["precious.txt"] and precious.read_text() == "not ddpctl's\n"
        down = ddpctl("down", "-y", env=env)  # keeping the outputs would write through the link
        assert down.returncode == 1 and "is a symbolic link" in down.stderr, down.stderr
        assert tree(tmp_path / "keep") == ["precious.txt"]
        assert (kept / "clusters" / "default.json").is_file()  # still up: nothing half-done
    finally:
        outputs.unlink()
    # and with the link gone, the run's outputs come as before
    got = ddpctl("download", RID, "--to", str(tmp_path / "got"), env=env)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "got" / RID).is_dir()


@pytest.mark.parametrize("to", ["/proc", "/sys/kernel", "/dev/null", "/proc/self/fd"])
def test_download_into_a_folder_that_cannot_be_written_is_one_line(kept: Path, to: str) -> None:
    """B8, B9, B14, B21: a traceback each; now one line, exit 2, and nothing left there."""
    env = {**os.environ, "DDPCTL_HOME": str(kept)}
    result = ddpctl("download", RID, "--to", to, env=env)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert lines[-1].startswith("Error: ") and "Traceback" not in result.stderr, result.stderr
    assert "--to" in lines[-1]
    assert not list(Path(to).glob(f".{RID}.*")) if Path(to).is_dir() else True


def test_the_apis_download_into_proc_raises_usage_error(kept: Path) -> None:
    """P48: ``ddpctl.download(RID, to="/proc")`` raised FileNotFoundError."""
    result = _api(f"ddpctl.download({RID!r}, to='/proc')", kept)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("ddpctl.infra.model.errors.UsageError: "), result.stderr
