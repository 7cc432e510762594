"""Inventory parity with Ansible (issue 15), on the test cluster: with the same inventory, every host
that `ansible all -m ping` reaches, ddpctl reaches, and the refused ones are refused by both (the
oracle is Ansible itself, run on each inventory); and a cluster behind a bastion, where node1 and
node2 answer only through node0 (`-J`), taken through up -> run message-passing -> check -> ssh -> down.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ddpctl.infra.hosts.connections import connect
from ddpctl.infra.hosts.inventory import load_inventory
from ddpctl.infra.model.errors import DdpctlError
from tests.support import REPO
from tests.support.cli import ddpctl, tree
from tests.support.testbed.cluster import GROUP_VARS, NODE_VARS, Testbed, run_procs

pytestmark = pytest.mark.slow


def write_inventory(testbed: Testbed, path: Path, host_vars: Callable[[str, str], str], group_vars: list[str]) -> Path:
    lines = ["[ddp_nodes]"]
    lines += [f"{name} {host_vars(name, ip)} ddpctl_node_dir={testbed.node_dir(name)}" for name, ip in testbed.nodes]
    lines += ["", "[ddp_nodes:vars]", *group_vars, *(f"{k}={v}" for k, v in {**NODE_VARS, **GROUP_VARS}.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible_reaches(inventory: Path, home: Path) -> set[str]:
    """The oracle: the hosts `ansible all -i INVENTORY -m ping` reaches (with ddpctl's ansible.cfg:
    host keys checked)."""
    # a control socket of its own: ansible.cfg's ControlPersist would otherwise let a later
    # inventory ride on an earlier one's open connection (a wrong key would "reach" every host)
    control = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(home),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
    }
    exe = Path(sys.executable).with_name("ansible")
    out = subprocess.run(
        [str(exe), "all", "-i", str(inventory), "-m", "ping", "-o"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    subprocess.run(["pkill", "-f", f"ssh: {control}"], check=False)  # the masters ControlPersist keeps
    shutil.rmtree(control, ignore_errors=True)
    return set(re.findall(r"^(\S+) \| SUCCESS", out, re.MULTILINE))


def ddpctl_reaches(inventory: Path) -> tuple[set[str], list[str]]:
    """The hosts ddpctl's own connections reach, and its refusals (one line each)."""
    reached, refusals = set(), []
    for host in load_inventory(str(inventory)):
        try:
            connect(host, timeout=10).close()
        except DdpctlError as exc:
            refusals.append(str(exc))
            continue
        reached.add(host.name)
    return reached, refusals


@dataclass
class Style:
    """An inventory as users write it: per-host variables, group variables, and the environment
    both Ansible and ddpctl run in (an ssh-agent's socket)."""

    host_vars: Callable[[str, str], str]
    group_vars: list[str]
    env: dict[str, str] = field(default_factory=dict)


def styles(testbed: Testbed, tmp: Path, agent: dict[str, str]) -> dict[str, Style]:
    empty = tmp / "empty_known_hosts"
    empty.write_text("")
    known = f"-o UserKnownHostsFile={testbed.known_hosts} -o GlobalKnownHostsFile=/dev/null"
    key = f"ansible_ssh_private_key_file={testbed.key}"
    config = tmp / "aliases_config"  # a user's ssh config: aliases, their key, user and known hosts
    config.write_text(
        "".join(f"Host box-{name}\n  HostName {ip}\n" for name, ip in testbed.nodes)
        + f"Host *\n  User root\n  IdentityFile {testbed.key}\n  IdentitiesOnly yes\n"
        + f"  UserKnownHostsFile {testbed.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
    )
    wrong_key = tmp / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
    through_node0 = f"ssh -F {testbed.ssh_config} -W %h:%p node0"

    def behind_node0(extra: str) -> Callable[[str, str], str]:
        return lambda n, ip: f"ansible_host={ip}" + (f" ansible_ssh_extra_args='{extra}'" if n != "node0" else "")

    return {
        "ansible's own variables": Style(
            lambda n, ip: f"ansible_host={ip}", ["ansible_user=root", key, f"ansible_ssh_common_args='{known}'"]
        ),
        "ssh config aliases (-F)": Style(
            lambda n, ip: f"ansible_host=box-{n}", [f"ansible_ssh_common_args='-F {config}'"]
        ),
        "the user's ~/.ssh/config (aliases, ProxyJump)": Style(lambda n, ip: f"ansible_host=user-{n}", []),
        "-o options only": Style(
            lambda n, ip: f"ansible_host={ip}",
            [f"ansible_ssh_common_args='{known} -o User=root -o IdentityFile={testbed.key} -o IdentitiesOnly=yes'"],
        ),
        "-i and -p in extra args": Style(
            lambda n, ip: f"ansible_host={ip}",
            [
                "ansible_user=root",
                f"ansible_ssh_common_args='{known}'",
                f"ansible_ssh_extra_args='-i {testbed.key} -p 22'",
            ],
        ),
        "-J in extra args": Style(
            behind_node0("-J node0"), ["ansible_user=root", key, f"ansible_ssh_common_args='-F {testbed.ssh_config}'"]
        ),
        "a ProxyCommand": Style(
            behind_node0(f'-o ProxyCommand="{through_node0}"'),
            ["ansible_user=root", key, f"ansible_ssh_common_args='{known}'"],
        ),
        "keys in ssh-agent": Style(
            lambda n, ip: f"ansible_host={ip}", ["ansible_user=root", f"ansible_ssh_common_args='{known}'"], agent
        ),
        "no key at all (both refuse)": Style(
            lambda n, ip: f"ansible_host={ip}", ["ansible_user=root", f"ansible_ssh_common_args='{known}'"]
        ),
        "a wrong key (both refuse)": Style(
            lambda n, ip: f"ansible_host={ip}",
            ["ansible_user=root", f"ansible_ssh_private_key_file={wrong_key}", f"ansible_ssh_common_args='{known}'"],
        ),
        "an unknown host key (both refuse)": Style(
            lambda n, ip: f"ansible_host={ip}",
            [
                "ansible_user=root",
                key,
                f"ansible_ssh_common_args='-o UserKnownHostsFile={empty} -o GlobalKnownHostsFile=/dev/null'",
            ],
        ),
    }


@pytest.fixture
def ssh_agent(testbed: Testbed) -> Iterator[dict[str, str]]:
    """An ssh-agent holding the test cluster's key; its environment (SSH_AUTH_SOCK)."""
    out = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    env = dict(re.findall(r"(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]+);", out))
    try:
        subprocess.run(["ssh-add", "-q", str(testbed.key)], env={**os.environ, **env}, check=True)
        yield {"SSH_AUTH_SOCK": env["SSH_AUTH_SOCK"]}
    finally:
        os.kill(int(env["SSH_AGENT_PID"]), signal.SIGTERM)


@pytest.fixture
def user_ssh_config(testbed: Testbed) -> Iterator[Path]:
    """The user's own ~/.ssh/config (OpenSSH reads the home in the password database, not $HOME):
    aliases user-nodeN, node1 and node2 by ProxyJump through user-node0. Whatever was there is
    put back afterwards."""
    ssh_dir = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"
    config, backup = ssh_dir / "config", ssh_dir / "config.ddpctl-test-backup"
    made_dir = not ssh_dir.exists()
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    if config.exists():
        config.rename(backup)
    config.write_text(
        "".join(
            f"Host user-{name}\n  HostName {ip}\n" + ("  ProxyJump user-node0\n" if name != "node0" else "")
            for name, ip in testbed.nodes
        )
        + f"Host user-*\n  User root\n  IdentityFile {testbed.key}\n"
        + f"  UserKnownHostsFile {testbed.known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
    )
    try:
        yield config
    finally:
        config.unlink()
        if backup.exists():
            backup.rename(config)
        if made_dir:
            shutil.rmtree(ssh_dir)


def test_ddpctl_reaches_what_ansible_reaches(
    testbed: Testbed, tmp_path: Path, ssh_agent: dict[str, str], user_ssh_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each inventory style, with Ansible as the oracle: the same hosts reached, the same refused,
    and every refusal one line that names the host and what to fix."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    verdicts, refusals = {}, {}
    for i, (name, style) in enumerate(styles(testbed, tmp_path, ssh_agent).items()):
        inventory = write_inventory(testbed, tmp_path / f"{i}.ini", style.host_vars, style.group_vars)
        with monkeypatch.context() as m:
            for key, value in style.env.items():
                m.setenv(key, value)
            oracle = ansible_reaches(inventory, tmp_path / "ansible-home")
            ours, refusals[name] = ddpctl_reaches(inventory)
        verdicts[name] = (oracle, ours)
    for name, (oracle, ours) in verdicts.items():
        assert ours == oracle, f"{name}: ansible reaches {sorted(oracle)}, ddpctl {sorted(ours)}"
        # the oracle is not vacuous either way
        assert oracle == (set() if "both refuse" in name else {"node0", "node1", "node2"}), name
    fixes = {
        "no key at all (both refuse)": "no key to offer: set ansible_ssh_private_key_file, add the key to ssh-agent",
        "a wrong key (both refuse)": "check ansible_user and ansible_ssh_private_key_file",
        "an unknown host key (both refuse)": "add the host's key to known_hosts",
    }
    for name, fix in fixes.items():
        assert len(refusals[name]) == 3, refusals[name]
        for node, line in zip(("node0", "node1", "node2"), refusals[name]):
            assert line.startswith(f"{node} (root@10.77.0.") and fix in line and "\n" not in line, line


@pytest.fixture
def bastion(testbed: Testbed) -> Iterator[Testbed]:
    """From here only node0 answers; node1 and node2 only through it (as hosts behind a bastion)."""
    with testbed.behind_bastion():
        yield testbed


def test_a_cluster_behind_a_bastion(bastion: Testbed, tmp_path: Path) -> None:
    testbed = bastion
    direct = subprocess.run(["ssh", "-F", str(testbed.ssh_config), "node1", "true"], capture_output=True, timeout=30)
    assert direct.returncode != 0  # honest: no way to node1 but through node0
    jump = "-J node0"
    inventory = write_inventory(
        testbed,
        tmp_path / "hosts.ini",
        lambda n, ip: f"ansible_host={ip}" + (f" ansible_ssh_extra_args='{jump}'" if n != "node0" else ""),
        [
            "ansible_user=root",
            f"ansible_ssh_private_key_file={testbed.key}",
            f"ansible_ssh_common_args='-F {testbed.ssh_config}'",
        ],
    )
    env = {**os.environ, "DDPCTL_HOME": str(tmp_path / "home"), "ANSIBLE_HOME": str(tmp_path / "ansible-home")}
    up = ddpctl("up", "--provider", "onprem", "-i", str(inventory), "--json", env=env, timeout=600)
    assert up.returncode == 0, up.stderr
    try:
        nodes = json.loads(up.stdout)["cluster"]["nodes"]
        # every rank through the jump (what is tested is the reach, not learning: onprem's tests train)
        result = ddpctl("run", "message-passing", "--nodes", "3", env=env, timeout=600)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("all_reduce OK (6.0 == 6.0)") == 3, result.stdout
        check = ddpctl("check", "--json", "--no-bandwidth", env=env, timeout=300)
        assert check.returncode == 0 and json.loads(check.stdout)["ok"], check.stderr
        far = ddpctl("ssh", "node2", "--", "sh", "-c", "echo $SSH_CONNECTION", env=env, timeout=60)
        assert far.returncode == 0 and far.stdout.split()[2] == "10.77.0.12", far.stderr
        logs = json.loads(ddpctl("logs", "--node", "node2", "--json", env=env).stdout)
        assert logs["lines"] and {line["node"] for line in logs["lines"]} == {"node2"}  # from the run's record
        assert {line["rank"] for line in logs["lines"]} <= {None, 2}  # node2's agent and its rank 2
    finally:
        down = ddpctl("down", env=env, timeout=300)
        assert down.returncode == 0, down.stderr
    for node in nodes:
        assert not Path(node["workdir"]).exists() and run_procs(testbed, node["name"]) == []
    assert tree(tmp_path / "home" / "clusters") == []
