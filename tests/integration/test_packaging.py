"""The wheel, installed into a fresh venv outside the repository, carries everything ddpctl needs.

Its pure tests (no process beyond Python) are in tests/unit/test_packaging.py.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # from a copy of the tracked files, as a fresh clone would build it (no egg-info, no caches)
    src = out / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        dest = src / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            dest.write_bytes((REPO / name).read_bytes())
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert "Package would be ignored" not in build.stdout + build.stderr  # a folder not declared
    return next(out.glob("ddpctl-*.whl"))


def test_the_wheel_carries_the_playbooks_and_the_training_bundle(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "playbooks", "training"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    missing = {t for t in tracked if f"ddpctl/{t}" not in names and not t.endswith(".gitignore")}
    assert missing == set()


def test_the_wheel_leaves_out_the_tests_and_the_benchmarks(wheel: Path):
    """tests/ and bench/ are packages (their helpers import as `tests.support`), but not ddpctl's."""
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith(("tests/", "bench/", "ddpctl/tests/", "ddpctl/bench/"))] == []


def test_the_installed_wheel_runs_outside_the_repository(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # ddpctl's dependencies from this venv (a path in a .pth: its own .pth files, among them the
    # editable install of the repository, are not read), ddpctl itself from the wheel
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DDPCTL_"))}
    env["HOME"] = str(tmp_path)

    def ddpctl(*args: str) -> subprocess.CompletedProcess:
        code = "import sys; from ddpctl.main import cli; sys.exit(cli())"
        return subprocess.run(
            [str(venv / "bin" / "python"), "-c", code, *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from ddpctl.infra.hosts import ansible; from ddpctl.infra.runs import jobs; print(ansible.PLAYBOOKS); print(jobs.BUNDLE_DIR)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    playbooks, bundle = map(Path, where.stdout.split())
    assert playbooks.is_relative_to(site) and (playbooks / "site.yml").is_file()
    assert (playbooks / "roles" / "nvidia" / "meta" / "argument_specs.yml").is_file()
    assert (bundle / "mnist.py").is_file() and (bundle / "data" / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file()
    result = ddpctl("--help")
    assert result.returncode == 0 and "Usage:" in result.stdout, result.stderr
    result = ddpctl("up", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    result = ddpctl("playbooks")  # where a wheel's user finds the playbooks, for ansible-playbook on their own
    assert result.returncode == 0 and Path(result.stdout.strip()) == playbooks, result.stderr
    result = ddpctl("configure", "--tags", "nope")
    assert result.returncode == 2 and f"give roles of {playbooks / 'site.yml'}" in result.stderr  # the real path


def test_the_license_goes_with_the_wheel(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata


def test_the_sdist_ships_no_half_test_suite(wheel: Path):
    """The sdist is built from the same files; its tests would need the repository, so it has none."""
    src, out = wheel.parent / "src", wheel.parent / "sdist"
    build = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"],
        cwd=src,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    with tarfile.open(next(out.glob("ddpctl-*.tar.gz"))) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    assert "LICENSE" in names and "pyproject.toml" in names
    assert [n for n in names if n.startswith(("tests/", "bench/", ".ci/")) or n == "dev"] == []


def python_floor() -> str | None:
    """The oldest Python pyproject.toml admits (3.10), as pyenv or the system has it."""
    from ddpctl.config_file import tomllib

    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"].removeprefix(">=")
    candidates = sorted(Path(os.path.expanduser("~/.pyenv/versions")).glob(f"{floor}.*/bin/python{floor}"))
    found = shutil.which(f"python{floor}")
    for exe in [*map(str, candidates), *([found] if found else [])]:
        if subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:  # not a pyenv shim of another
            return exe
    return None


def test_the_wheel_works_on_the_oldest_python_it_admits(wheel: Path, tmp_path: Path):
    """requires-python says 3.10: the wheel and its dependencies (ansible-core 2.17 there, tomli for
    tomllib) install from the index into a 3.10 venv, and the commands that read ddpctl.toml work."""
    python = python_floor()
    if python is None:
        pytest.skip("no python3.10 here (pyenv install 3.10) for the requires-python floor")
    venv = tmp_path / "venv310"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    (tmp_path / "ddpctl.toml").write_text("[cluster]\nnodes = 3\n\n[run]\nepochs = 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DDPCTL_"))}
    env.update(HOME=str(tmp_path), DDPCTL_HOME=str(tmp_path / "home"))

    def ddpctl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(venv / "bin" / "ddpctl"), *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    version = subprocess.run([str(venv / "bin" / "python"), "-V"], capture_output=True, text=True).stdout
    assert version.startswith("Python 3.10"), version
    assert ddpctl("--help").returncode == 0
    dry = ddpctl("up", "--dry-run", "--json")  # ddpctl.toml read (tomli on 3.10)
    assert dry.returncode == 0, dry.stderr
    assert len(json.loads(dry.stdout)["cluster"]["nodes"]) == 3
    status = ddpctl("status")
    assert status.returncode == 0 and "no clusters under" in status.stderr, status.stderr
    bad = ddpctl("up", "--provider", "onprem", "-i", "missing.ini")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def test_the_metadata_is_ready_for_an_index(wheel: Path):
    """What an index shows and checks: valid core metadata (packaging's own validation), a README
    as the long description, the author, keywords and classifiers."""
    from packaging.metadata import Metadata

    with zipfile.ZipFile(wheel) as zf:
        raw = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")))
    meta = Metadata.from_email(raw, validate=True)
    assert meta.name == "ddpctl" and str(meta.requires_python) == ">=3.10"
    assert meta.description_content_type == "text/markdown" and meta.description.startswith("# ddpctl")
    assert meta.author and meta.keywords and "pytorch" in meta.keywords
    assert "Programming Language :: Python :: 3.10" in meta.classifiers
    assert {e for e in meta.provides_extra} >= {"train", "pcluster"}


def test_the_sdist_builds_the_same_wheel(wheel: Path, tmp_path: Path):
    """The sdist is complete: unpacked, it builds a wheel with the files of the one built from the
    tracked files (which the tests above install and run)."""
    src = wheel.parent / "src"
    build = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(tmp_path)!r})"],
        cwd=src,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    with tarfile.open(next(tmp_path.glob("ddpctl-*.tar.gz"))) as sdist:
        sdist.extractall(tmp_path / "unpacked", filter="data")
    unpacked = next((tmp_path / "unpacked").iterdir())
    out = tmp_path / "wheel"
    made = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(unpacked)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout + made.stderr

    def files(path: Path) -> set[str]:
        return {n for n in zipfile.ZipFile(path).namelist() if not n.endswith("RECORD")}

    assert files(next(out.glob("ddpctl-*.whl"))) == files(wheel)


def test_installed_from_git_the_hint_installs_from_git(wheel: Path, tmp_path: Path):
    """`pip install 'ddpctl @ git+URL@REV'`, as a user without a checkout would: a missing torch's
    hint then names that URL and revision with the extra (pip's direct_url.json, PEP 610)."""
    repo = tmp_path / "repo"
    shutil.copytree(wheel.parent / "src", repo)
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "release"], ["tag", "v0.1.0"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env={**os.environ, **git})
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # pip, setuptools, the dependencies
    url = f"git+{repo.as_uri()}@v0.1.0"
    install = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            f"ddpctl @ {url}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DDPCTL_"))}
    env.update(HOME=str(tmp_path), DDPCTL_HOME=str(tmp_path / "home"))
    code = "import sys; from ddpctl.main import cli; sys.exit(cli())"
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, "run", "mnist", "--python", str(fake)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2, result.stderr
    assert f"run `{fake} -m pip install 'ddpctl[train] @ {url}'`" in result.stderr, result.stderr
