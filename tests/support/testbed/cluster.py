"""The test cluster: N "nodes" as network namespaces on this machine, each with a real sshd
(up.sh / down.sh beside this file). Used by the tests' fixtures and by bench/onprem.py."""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ddpctl.infra.tools.procs import STORE_KEY

HERE = Path(__file__).resolve().parent
TESTBED_DIR = Path(os.environ.get("TESTBED", "/tmp/ddpctl-tb"))
TESTBED_NEEDS = ("ip", "unshare", "/usr/sbin/sshd", "ssh", "ssh-keygen")
#: Inventory variables every run of the playbooks on this cluster needs: the nodes share this
#: machine's root filesystem, so the host's name, /root/.ssh and sshd host keys stay out of it, and
#: root's PATH (pyenv shims) must not pick the nodes' Python.
NODE_VARS = {
    "ansible_python_interpreter": "/usr/bin/python3",
    "common_hostname_file": "{{ ddpctl_node_dir }}/hostname",
    "ssh_mesh_ssh_dir": "{{ ddpctl_node_dir }}/home/.ssh",
    "ssh_mesh_host_key_file": "{{ ddpctl_node_dir }}/ssh_host_ed25519_key.pub",
}
#: Inventory variables of an on-prem cluster on the test cluster: the nodes are air-gapped and share
#: this machine's filesystem, so python_env verifies the controller's own venv.
GROUP_VARS = {
    "python_env_mode": "existing",
    "python_env_path": str(Path(sys.executable).parent.parent),
}


BRIDGE, CONTROLLER = "ddpbr0", "10.77.0.1/24"  # as up.sh makes them


class Testbed:
    """N nodes (node0.. at 10.77.0.10+i) reachable over SSH with the testbed's key and known_hosts."""

    __test__ = False  # not a test class

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        self.nodes = [(f"node{i}", f"10.77.0.{10 + i}") for i in range(n)]
        self.ssh_config = root / "ssh" / "ssh_config"
        self.key = root / "ssh" / "id_ed25519"
        self.known_hosts = root / "ssh" / "known_hosts"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def inventory(self, path: Path, n: int | None = None, **group_vars: str) -> Path:
        """An Ansible INI inventory of the first ``n`` nodes, as a user would write it (plus NODE_VARS)."""
        lines = ["[ddp_nodes]"]
        for name, ip in self.nodes[: n or len(self.nodes)]:
            lines.append(f"{name} ansible_host={ip} ddpctl_node_dir={self.node_dir(name)}")
        lines += [
            "",
            "[ddp_nodes:vars]",
            "ansible_user=root",
            f"ansible_ssh_private_key_file={self.key}",
            f"ansible_ssh_common_args='-F {self.ssh_config}'",
        ]
        lines += [f"{k}={v}" for k, v in {**NODE_VARS, **group_vars}.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def ssh(self, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", "-F", str(self.ssh_config), node, command], capture_output=True, text=True, timeout=timeout
        )

    @contextmanager
    def behind_bastion(self) -> Iterator[Testbed]:
        """From this machine only node0 answers while the block runs; the other nodes only through it
        (``ip route add prohibit``), as hosts behind a bastion or a ParallelCluster's compute nodes."""
        behind = [ip for _, ip in self.nodes[1:]]
        for ip in behind:
            subprocess.run(["ip", "route", "add", "prohibit", f"{ip}/32"], check=True)
        try:
            yield self
        finally:
            for ip in behind:
                subprocess.run(["ip", "route", "del", "prohibit", f"{ip}/32"], check=False)

    @contextmanager
    def route_cut(self) -> Iterator[None]:
        """This machine (the controller) cut off from the nodes, as a laptop that sleeps or moves to
        another network: its address on the bridge removed, the nodes' traffic between them untouched;
        back on leaving. (Routes through the bridge, as the twin's, are not put back.)"""
        subprocess.run(["ip", "addr", "del", CONTROLLER, "dev", BRIDGE], check=True)
        try:
            yield
        finally:
            subprocess.run(["ip", "addr", "add", CONTROLLER, "dev", BRIDGE], check=True)

    def user(self, name: str) -> Path:
        """An account without sudo on every node (the nodes share this machine's /etc/passwd and /home,
        as a cluster's nodes share their directory and home), logging in with the test cluster's key:
        made where missing, its home emptied, the key in its ``~/.ssh/authorized_keys`` (up.sh's sshd
        reads that file for users other than root). Its home."""
        if subprocess.run(["id", "-u", name], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
        subprocess.run(["usermod", "-p", "*", name], check=True)  # no password, not locked: sshd takes its key
        entry = pwd.getpwnam(name)
        home = Path(entry.pw_dir)
        shutil.rmtree(home, ignore_errors=True)
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        shutil.copy(self.key.with_name("id_ed25519.pub"), home / ".ssh" / "authorized_keys")
        for path in (home, home / ".ssh", home / ".ssh" / "authorized_keys"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        home.chmod(0o750)
        return home

    def netns_pids(self, node: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", node], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def worker_pid(testbed: Testbed, node: str, script: str = "mnist.py", timeout: float = 180) -> int:
    """The pid of a training worker of ``script`` (not its torchrun agent) in ``node``'s namespace."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in run_procs(testbed, node):
            if script in entry and "torch.distributed.run" not in entry:
                return int(entry.split(":")[0])
        time.sleep(0.3)
    raise AssertionError(f"no worker on {node}")


def run_procs(testbed: Testbed, node: str, *, but_store: bool = False) -> list[str]:
    """Command lines of torchrun/python processes inside ``node``'s namespace ("PID: CMDLINE");
    ``but_store``: not a run's rendezvous store, nor its supervisor on the head node and the SSH
    sessions it holds to every node (its agent and workers only)."""
    found = []
    for pid in testbed.netns_pids(node):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            store = but_store and f"\0{STORE_KEY}=".encode() in b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        supervisor = but_store and ("head.pyz" in cmd or cmd.startswith("ssh "))
        if state != "Z" and ("torch" in cmd or "python" in cmd) and not store and not supervisor:
            found.append(f"{pid}: {cmd}")
    return found


def testbed_missing() -> str | None:
    if os.environ.get("DDPCTL_TESTBED") == "off":  # a quick run of everything else (docs/testing.md)
        return "DDPCTL_TESTBED=off"
    if os.geteuid() != 0:
        return "the test cluster needs root (network namespaces, sshd)"
    missing = [t for t in TESTBED_NEEDS if not shutil.which(t)]
    if missing:
        return f"the test cluster needs {', '.join(missing)} (apt-get install openssh-server iproute2)"
    return None


def _env(nodes: int, slurm_nodes: int) -> dict[str, str]:
    return {**os.environ, "TESTBED": str(TESTBED_DIR), "NODES": str(nodes), "SLURM_NODES": str(slurm_nodes)}


#: Held while a test cluster is up: it is one per machine (fixed namespace names, one bridge, global
#: routes), so a second suite or benchmark on the same machine waits for it instead of tearing down
#: the nodes under the first one's tests.
LOCK_PATH = Path("/tmp/ddpctl-testbed.lock")


@contextmanager
def exclusive() -> Iterator[None]:
    """The test cluster to this process alone, for as long as the block runs (waits for it)."""
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def testbed_up(nodes: int = 3, slurm_nodes: int = 0) -> Testbed:
    """Bring the cluster up (after tearing down any leftover); raise with the script's output if it fails."""
    env = _env(nodes, slurm_nodes)
    subprocess.run([HERE / "down.sh"], env=env, check=False, capture_output=True)
    up = subprocess.run([HERE / "up.sh"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        subprocess.run([HERE / "down.sh"], env=env, check=False, capture_output=True)
        raise RuntimeError(f"test cluster did not come up:\n{up.stdout}\n{up.stderr}")
    return Testbed(TESTBED_DIR, nodes)


def testbed_down() -> None:
    subprocess.run([HERE / "down.sh"], env=_env(0, 0), check=False, capture_output=True)
