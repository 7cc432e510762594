"""Without root (issue 41): an on-prem cluster with Slurm where the user has no sudo, on the test cluster.

The account is ``ddpuser`` (``Testbed.user``: no sudo, no group of root's), which the nodes share
with this machine, as a cluster's nodes share their directory and home. Its Python is a venv of the
nodes' ``/usr/bin/python3`` in its own home, with this checkout's torch on its path (the nodes have
no network: ``python_env_mode=existing``, as a lab's own env). With ``ddpctl_become=false`` in the
inventory: ``ddpctl up --provider onprem`` configures the nodes into ``~/.ddpctl-node/<node>``,
nothing outside the user's home changes (the nodes' /etc/hosts, no /opt/ddpctl, no file of the
user's elsewhere); a message-passing run over SSH; an sbatch run with a secret (``run -e TOKEN``)
whose value reaches the ranks' environment while it is on no process's command line and in no file
left behind (the user's home, the test cluster's Slurm state and spool, ddpctl's state home); `down`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.cli import ddpctl
from tests.support.clusters import UpCluster, onprem_up
from tests.support.testbed.cluster import Testbed

pytestmark = pytest.mark.slow

USER = "ddpuser"
SECRET = "s3cr3t-" + uuid.uuid4().hex
#: where a user's files may land outside its home, were anything to write them there
ELSEWHERE = ("/opt", "/etc", "/tmp", "/var/tmp", "/dev/shm", "/run")


def user_venv(home: Path) -> Path:
    """A venv of the nodes' Python in the user's home whose path goes on to this checkout's torch."""
    venv = home / "venv"
    subprocess.run(
        ["runuser", "-u", USER, "--", "/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True
    )
    torch = importlib.util.find_spec("torch")
    assert torch is not None and torch.origin is not None
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "zz_torch.pth").write_text(str(Path(torch.origin).parent.parent) + "\n")
    return venv


def inventory(testbed: Testbed, path: Path, venv: Path) -> Path:
    """Two nodes reached as the user, with ddpctl_become=false and nothing else of the root tests' own."""
    lines = ["[ddp_nodes]", *(f"{name} ansible_host={ip}" for name, ip in testbed.nodes[:2]), "", "[ddp_nodes:vars]"]
    lines += [
        f"ansible_user={USER}",
        f"ansible_ssh_private_key_file={testbed.key}",
        f"ansible_ssh_common_args='-F {testbed.ssh_config}'",
        "ansible_python_interpreter=/usr/bin/python3",
        "ddpctl_become=false",
        # the nodes share this machine's /etc/ssh: each node's own sshd host key is in its folder
        f"ssh_mesh_host_key_file={testbed.root}/nodes/{{{{ inventory_hostname }}}}/ssh_host_ed25519_key.pub",
        "python_env_mode=existing",
        f"python_env_path={venv}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def users_files_elsewhere(testbed: Testbed) -> list[str]:
    """The user's files outside its home (slurmd's spool, the nodes' system folder, left out)."""
    spool = f"{testbed.root}/nodes/*/slurmd-spool"
    found = subprocess.run(
        ["find", *ELSEWHERE, "-xdev", "-path", spool, "-prune", "-o", "-user", USER, "-print"],
        capture_output=True,
        text=True,
    )
    return found.stdout.split()


@pytest.fixture(scope="module")
def cluster(slurm_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    tmp = tmp_path_factory.mktemp("noroot")
    home = slurm_testbed.user(USER)
    venv = user_venv(home)
    hosts = {n: (slurm_testbed.node_dir(n) / "hosts").read_text() for n, _ in slurm_testbed.nodes}
    opt = Path("/opt/ddpctl").exists()
    before = users_files_elsewhere(slurm_testbed)  # another test's user of the same uid may have left some
    env = {**os.environ, "DDPCTL_HOME": str(tmp / "home"), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    hosts_ini = inventory(slurm_testbed, tmp / "hosts.ini", venv)
    up = onprem_up(hosts_ini, env)
    yield UpCluster(env=env, up=up, tmp=tmp, inventory=hosts_ini)
    down = ddpctl("down", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    for node in json.loads(up.stdout)["cluster"]["nodes"]:
        assert not Path(node["workdir"]).exists()  # the cluster's own work folder, in the user's home
    # nothing outside the user's home changed on any node
    assert {n: (slurm_testbed.node_dir(n) / "hosts").read_text() for n, _ in slurm_testbed.nodes} == hosts
    assert Path("/opt/ddpctl").exists() == opt
    assert set(users_files_elsewhere(slurm_testbed)) - set(before) == set()


def test_up_configures_the_nodes_in_the_users_home(cluster: UpCluster) -> None:
    doc = json.loads(cluster.up.stdout)["cluster"]
    home = pwd.getpwnam(USER).pw_dir
    for node in doc["nodes"]:
        own = f"{home}/.ddpctl-node/{node['name']}"
        assert node["workdir"].startswith(f"{own}/work/") and node["env_file"] == f"{own}/ddpctl.env"
        assert node["bundle_dir"] == f"{own}/training" and node["python"] == f"{home}/venv/bin/python"
        assert Path(node["env_file"]).stat().st_uid == pwd.getpwnam(USER).pw_uid
    assert doc["launcher"] == "sbatch"  # Slurm answers the user too


def test_message_passing_over_ssh(cluster: UpCluster) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "2", "--launcher", "torchrun", env=cluster.env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[node1 r1] rank 1 received 42.0 from rank 0" in result.stdout
    assert result.stdout.count("all_reduce OK (3.0 == 3.0)") == 2


def test_what_an_admin_must_install_is_one_failure_naming_it(cluster: UpCluster) -> None:
    """node0 lacks a base package, node1 has a GPU (a stand-in PCI tree) that no driver drives:
    without root neither is installed; each node's play fails, saying what an admin must install."""
    assert cluster.inventory is not None
    tmp = cluster.tmp / "admin"
    (tmp / "host_vars").mkdir(parents=True)
    inventory = Path(shutil.copy(cluster.inventory, tmp / "hosts.ini"))
    pci = Path(pwd.getpwnam(USER).pw_dir) / "stand-in-pci" / "0000:65:00.0"  # where the user can read it
    pci.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2237")):  # an A10G
        (pci / name).write_text(value + "\n")
    (tmp / "host_vars" / "node0.yml").write_text("common_packages: [procps, ddpctl-no-such-package]\n")
    (tmp / "host_vars" / "node1.yml").write_text(f"nvidia_pci_devices_dir: {pci.parent}\n")
    env = {**cluster.env, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    playbook = Path(sys.executable).with_name("ansible-playbook")
    args = [str(playbook), "-i", str(inventory), "playbooks/site.yml", "--tags", "common,nvidia"]
    try:
        result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(pci.parent)
    out = result.stdout
    assert result.returncode != 0, out
    assert (
        "node0: ddpctl-no-such-package not installed, and without root (ddpctl_become=false) nothing is installed: "
        "ask an admin to install it (apt-get install ddpctl-no-such-package)"
    ) in out, out
    assert (
        "node1: NVIDIA GPU(s) 0000:65:00.0 that no loaded driver drives, and without root (ddpctl_become=false) no "
        "driver is installed: ask an admin to install one"
    ) in out, out


class Watch:
    """Every process's command line and, for the user's ranks, their environment, while a run goes on."""

    def __init__(self, uid: int) -> None:
        self.uid, self.stop = uid, threading.Event()
        self.on_a_command_line: list[str] = []
        self.ranks_with_it: set[int] = set()  # the pids of the workers (not the agents) that had it
        self.thread = threading.Thread(target=self.look, daemon=True)

    def look(self) -> None:
        while not self.stop.wait(0.1):
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    if SECRET in cmdline:
                        self.on_a_command_line.append(cmdline)
                    worker = "message_passing.py" in cmdline and "torch.distributed.run" not in cmdline
                    mine = worker and proc.stat().st_uid == self.uid
                    if mine and f"\0TOKEN={SECRET}\0".encode() in b"\0" + (proc / "environ").read_bytes():
                        self.ranks_with_it.add(int(proc.name))
                except OSError:
                    continue


def test_sbatch_with_a_secret(cluster: UpCluster, slurm_testbed: Testbed) -> None:
    watch = Watch(pwd.getpwnam(USER).pw_uid)
    watch.thread.start()
    try:
        result = ddpctl("run", "message-passing", "--nodes", "2", "-e", "TOKEN", env={**cluster.env, "TOKEN": SECRET})
    finally:
        watch.stop.set()
        watch.thread.join()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "through sbatch" in result.stderr and result.stdout.count("all_reduce OK (3.0 == 3.0)") == 2
    assert watch.on_a_command_line == []
    assert len(watch.ranks_with_it) >= 2, "the secret did not reach both ranks' environment"  # (one per node)
    home = Path(pwd.getpwnam(USER).pw_dir)
    assert list(home.rglob("*.secrets")) == []  # read and removed by the job
    for top in (home, slurm_testbed.root / "slurm", slurm_testbed.root / "nodes", cluster.home):
        for path in top.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert SECRET.encode() not in path.read_bytes(), path
