"""Bad input (issue 16): every row is one line on stderr ("Error: ..." saying what to change), exit 2,
and nothing created under the state home. Rows may write files first (an inventory, a ddpctl.toml,
a script) into the directory the command runs in.
Its pure tests (no process beyond Python) are in tests/unit/test_bad_input.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpctl.infra.model.errors import UsageError
from tests.support.bad_input import CASES
from tests.support.cli import ddpctl, tree


@pytest.mark.parametrize("args,files,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(home: Path, tmp_path: Path, args: list[str], files: dict[str, str | bytes], message: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, content in files.items():
        path = cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        if path.read_bytes().startswith(b"#!"):
            path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DDPCTL_CONFIG"}
    result = ddpctl(*args, cwd=cwd, env=env, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert message in lines[0]
    assert tree(home) == []


def test_host_without_a_key_file_is_one_line(home: Path, tmp_path: Path) -> None:
    """No ansible_ssh_private_key_file (the agent's keys or ~/.ssh/id_*): an unreachable host is a
    failure to reach it (exit 1, one Error line after the progress line), not fabric's TypeError."""
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[ddp_nodes]\nn1 ansible_host=127.0.0.1 ansible_port=1\n")
    result = ddpctl("up", "--provider", "onprem", "-i", str(hosts), timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: cannot reach 1 of 1 host(s) over SSH, nothing was changed: n1 (")
    assert "127.0.0.1:1)" in last
    assert tree(home) == []


def test_python_is_checked_by_what_it_prints(tmp_path: Path) -> None:
    """An interpreter that exits 0 without importing torch is refused; the real one gives its version."""
    from ddpctl.infra.providers.local import check_local_python

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    with pytest.raises(UsageError, match="is not a Python that imports torch"):
        check_local_python(str(fake))
    assert check_local_python(sys.executable)  # the test venv has torch


def test_run_python_must_match_the_cluster(home: Path) -> None:
    """A cluster that is up runs with the Python it was brought up with: a different --python is refused."""
    assert ddpctl("up").returncode == 0
    try:
        result = ddpctl("run", "mnist", "--python", "/usr/bin/python3", "--dry-run")
        assert result.returncode == 2, result.stderr
        assert "cluster 'default' is up with" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    finally:
        assert ddpctl("down").returncode == 0


def test_help_lists_the_bounds() -> None:
    out = subprocess.run([sys.executable, "-m", "ddpctl", "check", "--help"], capture_output=True, text=True).stdout
    assert "at most 8192" in out
