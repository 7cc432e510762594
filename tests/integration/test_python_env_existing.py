"""python_env_mode=existing on an environment without torch (issue 37): the role fails in one line
that names the environment and says torch is missing, not in Ansible's own words about a template.

A real ansible-playbook of ``playbooks/site.yml --tags python_env`` on this machine (a local
connection), against a venv with no torch in it: no test cluster needed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import REPO

VENV_BIN = Path(sys.prefix) / "bin"


def test_existing_env_without_torch_is_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "no-torch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[ddp_nodes]\n"
        f"node0 ansible_connection=local ddpctl_node_dir={tmp_path / 'node0'}\n\n"
        "[ddp_nodes:vars]\n"
        f"ansible_python_interpreter={sys.executable}\n"
        "python_env_mode=existing\n"
        f"python_env_path={venv}\n"
    )
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
        "ANSIBLE_NOCOLOR": "1",
    }
    result = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "playbooks/site.yml", "--tags", "python_env"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    shown = f"rc {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    assert result.returncode != 0, shown
    failed = re.search(r'fatal: \[node0\]: FAILED! => \{.*?"msg": "([^"]*)"', result.stdout, re.DOTALL)
    assert failed, shown
    msg = failed.group(1)
    assert msg.startswith(f"{venv}: torch is not installed there;"), msg
    assert "Error while resolving" not in result.stdout and "has no attribute" not in result.stdout, shown
    assert "\\n" not in msg, msg  # one line
