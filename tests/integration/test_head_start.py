"""How the run's supervisor is started on the head node (``head.start_line``): a systemd user unit
where the account's user manager lingers, else ``setsid nohup``. Run with bash and stand-ins for
``loginctl``, ``systemctl``, ``systemd-run`` and ``python3`` that record how they were called (the
test cluster's nodes run no systemd)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ddpctl.infra.launch import head

STAND_INS = {
    "loginctl": 'echo "$LINGER"',
    "systemctl": "exit 0",
    "systemd-run": 'printf "%s\\n" "$@" > "$RECORD"',
    "python3": 'printf "%s\\n" "$PWD" "$DDPCTL_CLUSTER_ID" "$@" > "$RECORD"',
}


def start(tmp_path: Path, linger: str) -> list[str]:
    bin_dir, folder, record = tmp_path / "bin", tmp_path / "head-runs" / "r1", tmp_path / "record"
    bin_dir.mkdir()
    folder.mkdir(parents=True)
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LINGER": linger, "RECORD": str(record)}
    line = f"cd {folder} && {head.start_line('c-1 2', 'r1')}"
    subprocess.run(["bash", "-c", line], env=env, check=True, timeout=30)
    deadline = time.monotonic() + 10  # the nohup branch returns at once, its child a moment later
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return record.read_text().splitlines()


def test_a_lingering_user_manager_gets_a_systemd_unit(tmp_path: Path) -> None:
    argv = start(tmp_path, "yes")
    folder = tmp_path / "head-runs" / "r1"
    assert argv[-2:] == ["head.pyz", "."] and "--unit=ddpctl-r1" in argv and "--collect" in argv
    assert f"--working-directory={folder}" in argv and "--setenv=DDPCTL_CLUSTER_ID=c-1 2" in argv
    assert f"StandardOutput=append:{folder}/supervisor.log" in argv


@pytest.mark.parametrize("linger", ["no", ""])  # not lingering, or no logind to ask
def test_without_a_lingering_user_manager_it_is_a_session_of_its_own(tmp_path: Path, linger: str) -> None:
    assert start(tmp_path, linger) == [str(tmp_path / "head-runs" / "r1"), "c-1 2", "head.pyz", "."]


def test_the_bundle_holds_every_module_the_supervisor_imports(tmp_path: Path) -> None:
    """The zip sent to the head (``head.bundle``) imports whole in a bare ``python3 -I`` (no ddpctl
    on its path): a module moved or added without its place in ``head.MODULES`` fails here, not on
    a cluster's head node."""
    zipped = tmp_path / "head.zip"
    zipped.write_bytes(head.bundle())
    imports = "; ".join(f"import ddpctl_head.{m.replace('/', '.')}" for m in head.MODULES)
    result = subprocess.run(
        ["python3", "-I", "-c", f"import sys; sys.path.insert(0, {str(zipped)!r}); {imports}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
