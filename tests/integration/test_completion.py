"""Shell completion (issue 17): Click's, completing job names, recorded cluster names and run ids
from the state home, through the real `ddpctl` entry point as bash and zsh call it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def complete(words: str, home: Path, shell: str = "bash") -> list[str]:
    """What `ddpctl` offers for the last of ``words`` (bash: "type,value" lines)."""
    env = {
        **os.environ,
        "DDPCTL_HOME": str(home),
        "_DDPCTL_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    exe = shutil.which("ddpctl", path=str(Path(sys.executable).parent))
    assert exe, "the ddpctl entry point is installed beside this interpreter"
    out = subprocess.run([exe], env=env, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def test_job_names(home: Path) -> None:
    assert complete("ddpctl run m", home) == ["plain,message-passing", "plain,mnist", "plain,mingpt", "file,m"]
    assert complete("ddpctl run ./tra", home) == ["file,./tra"]  # a path: the shell completes files


def test_cluster_names_and_run_ids(home: Path) -> None:
    (home / "clusters").mkdir(parents=True)
    for name in ("lab", "lab2", "prod"):
        (home / "clusters" / f"{name}.json").write_text("{}")
    for run_id in ("rabc000001", "rabd000002"):
        (home / "runs" / run_id).mkdir(parents=True)
        (home / "runs" / run_id / "options.json").write_text('{"options": {"job": "mnist"}, "cluster": "lab"}')
    assert complete("ddpctl down --name la", home) == ["plain,lab", "plain,lab2"]
    assert complete("ddpctl status --name ", home) == ["plain,lab", "plain,lab2", "plain,prod"]
    assert sorted(complete("ddpctl logs rab", home)) == ["plain,rabc000001", "plain,rabd000002"]
    assert sorted(complete("ddpctl run --resume rabc", home)) == ["plain,rabc000001"]
    assert complete("ddpctl run --run-id r", home) == []  # a new id: nothing to offer


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_scripts_load(shell: str, home: Path) -> None:
    env = {**os.environ, "_DDPCTL_COMPLETE": f"{shell}_source"}
    exe = shutil.which("ddpctl", path=str(Path(sys.executable).parent))
    script = subprocess.run([exe], env=env, capture_output=True, text=True, check=True).stdout
    assert "_DDPCTL_COMPLETE" in script
