"""playbooks/site.yml on the 3-node test cluster, run the way an admin would run it by hand:

    ANSIBLE_CONFIG=ansible.cfg ansible-playbook -i INVENTORY playbooks/site.yml

The nodes are air-gapped network namespaces that share this machine's filesystem, so every per-node
path is a variable under the node's own dir (``ddpctl_node_dir``) and the Python env is the
controller's own venv (``python_env_mode=existing``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.testbed.cluster import TESTBED_DIR, Testbed

VENV = Path(sys.prefix)  # the venv running the tests: ansible, ansible-lint and torch
VENV_BIN = VENV / "bin"
NODES = ["node0", "node1", "node2"]
ADDRESSES = {"node0": "10.77.0.10", "node1": "10.77.0.11", "node2": "10.77.0.12"}
BUNDLE_EXCLUDE = (".pyc", ".pyo")  # and .gitignore: the bundle role's default bundle_exclude
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)
# What each node gets in the test cluster; everything the roles write on a node lands here.
NODE_ARTIFACTS = (
    "home/.ssh",
    "training",
    "work",
    "ansible-tmp",
    "venv",
    "wheels",
    "ddpctl.env",
    "explicit.env",
    "hostname",
)


def ansible_env(tmp: Path) -> dict[str, str]:
    """The environment an admin's shell would have: the repo's ansible.cfg, nothing in ~/.ansible."""
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        # tests/support/testbed/down.sh closes the SSH control masters it finds here
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(TESTBED_DIR / "ansible-cp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "XDG_CACHE_HOME": str(tmp / "cache"),
    }


def playbook(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), *args],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def recap(result: subprocess.CompletedProcess) -> dict[str, dict[str, int]]:
    text = result.stdout.split("PLAY RECAP", 1)[-1]
    return {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"} for m in RECAP.finditer(text)}


def show(result: subprocess.CompletedProcess) -> str:
    return f"rc {result.returncode}\n--- stdout (tail)\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-3000:]}"


def clean_nodes(testbed: Testbed) -> None:
    for node in NODES:
        for rel in NODE_ARTIFACTS:
            path = testbed.node_dir(node) / rel
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()


def inventory_vars(tmp: Path) -> dict[str, str]:
    """Group vars for the test cluster: per-node paths under each node's dir, the air-gapped env."""
    return {
        "ansible_python_interpreter": "/usr/bin/python3",  # root's PATH on the nodes starts with pyenv shims
        "common_hostname_file": "{{ ddpctl_node_dir }}/hostname",
        "ssh_mesh_ssh_dir": "{{ ddpctl_node_dir }}/home/.ssh",
        "ssh_mesh_host_key_file": "{{ ddpctl_node_dir }}/ssh_host_ed25519_key.pub",
        "ssh_mesh_controller_key_dir": str(tmp / "keys"),
        "python_env_mode": "existing",
        "python_env_path": str(VENV),
        "bundle_extra_files": f'["{tmp / "user" / "my_train.py"}"]',
    }


def repo_bundle() -> dict[str, str]:
    """sha256 of every file of the repo's training/ that the bundle carries, by relative path."""
    root = REPO / "training"
    sums = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix not in BUNDLE_EXCLUDE and path.name != ".gitignore":
            sums[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return sums


def node_sums(testbed: Testbed, node: str, directory: Path, names: list[str]) -> dict[str, str]:
    quoted = " ".join(f"'{n}'" for n in names)
    out = testbed.ssh(node, f"cd '{directory}' && sha256sum -- {quoted}")
    assert out.returncode == 0, out.stderr
    return {line.split(None, 1)[1].strip(): line.split()[0] for line in out.stdout.splitlines()}


def fake_wheel(directory: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal pure-Python wheel: pip installs it offline like the real one."""
    dist = f"{name}-{version.split('+')[0]}"
    entries = dict(files)
    entries[f"{dist}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    entries[f"{dist}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: ddpctl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    entries[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in entries.items():
            zf.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
def site(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory):
    """site.yml run twice with the same inventory (the idempotence check), as an admin would."""
    tmp = tmp_path_factory.mktemp("playbooks")
    (tmp / "user").mkdir()
    (tmp / "user" / "my_train.py").write_text('print("the user\'s own training script")\n')
    inventory = testbed.inventory(tmp / "hosts.ini", **inventory_vars(tmp))
    env = ansible_env(tmp)
    clean_nodes(testbed)
    bundle = repo_bundle()  # training/ as the play copies it (the repo may be edited meanwhile)
    runs, seconds = [], []
    for _ in range(2):
        start = time.monotonic()
        runs.append(playbook(env, "-i", str(inventory), "playbooks/site.yml"))
        seconds.append(time.monotonic() - start)
        if runs[-1].returncode != 0:
            break
    print("\nsite.yml on 3 nodes: " + ", ".join(f"run {i + 1} {s:.1f} s" for i, s in enumerate(seconds)))
    yield {"tmp": tmp, "inventory": inventory, "env": env, "runs": runs, "seconds": seconds, "bundle": bundle}
    clean_nodes(testbed)


@pytest.fixture(scope="module")
def local_nodes(tmp_path_factory: pytest.TempPathFactory):
    """Inventory hosts (by default three named like the test cluster's nodes), all this machine (a
    local connection, each with a directory of its own): for the --check runs of the nvidia and
    python_env roles, which only read (stand-in PCI and /proc trees, nvidia-smi) and plan, so they
    need no test cluster and run beside it."""
    tmp = tmp_path_factory.mktemp("check-mode")
    (tmp / "user").mkdir()
    (tmp / "user" / "my_train.py").write_text('print("the user\'s own training script")\n')

    def inventory(path: Path, hosts: list[str] = NODES, **group_vars: str) -> Path:
        lines = ["[ddp_nodes]"]
        for node in hosts:
            (tmp / "nodes" / node).mkdir(parents=True, exist_ok=True)
            lines.append(f"{node} ansible_connection=local ddpctl_node_dir={tmp / 'nodes' / node}")
        lines += ["", "[ddp_nodes:vars]", *(f"{k}={v}" for k, v in group_vars.items())]
        path.write_text("\n".join(lines) + "\n")
        return path

    return {"tmp": tmp, "env": ansible_env(tmp), "inventory": inventory, "node_dir": lambda n: tmp / "nodes" / n}


def test_ansible_lint_production_profile(tmp_path: Path) -> None:
    lint = VENV_BIN / "ansible-lint"
    assert lint.exists(), f"{lint} missing: install the test extra (pip install -e '.[test]')"
    result = subprocess.run(
        [str(lint), "--offline", "--profile", "production", "--nocolor"],
        check=False,
        cwd=REPO,
        env=ansible_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr


@pytest.mark.slow
def test_site_converges_then_changes_nothing(site) -> None:
    first, *rest = site["runs"]
    assert first.returncode == 0, show(first)
    stats = recap(first)
    assert sorted(stats) == NODES
    assert all(s["failed"] == 0 and s["unreachable"] == 0 for s in stats.values()), stats
    assert all(s["changed"] > 0 for s in stats.values()), stats  # it really did something
    assert rest, "no second run"
    second = rest[0]
    assert second.returncode == 0, show(second)
    stats = recap(second)
    assert sorted(stats) == NODES
    assert {h: s["changed"] for h, s in stats.items()} == {h: 0 for h in NODES}, show(second)


@pytest.mark.slow
def test_hosts_file_and_host_name(site, testbed: Testbed) -> None:
    assert site["runs"][0].returncode == 0
    want = [f"{ADDRESSES[n]} {n}" for n in NODES]
    for node in NODES:
        hosts = testbed.ssh(node, "cat /etc/hosts").stdout
        block = re.search(r"# BEGIN ddpctl cluster nodes.*?\n(.*?)# END ddpctl cluster nodes", hosts, re.DOTALL)
        assert block, hosts
        assert block.group(1).splitlines() == want
        assert hosts.count("# BEGIN ddpctl cluster nodes") == 1  # nodes share one file: one block
        assert testbed.ssh(node, "hostname").stdout.strip() == node
        assert (testbed.node_dir(node) / "hostname").read_text() == f"{node}\n"


@pytest.mark.slow
def test_node_to_node_ssh_with_the_cluster_key_and_strict_host_keys(site, testbed: Testbed) -> None:
    assert site["runs"][0].returncode == 0
    for src, dst in [("node0", "node1"), ("node2", "node0"), ("node1", "10.77.0.12")]:
        config = testbed.node_dir(src) / "home" / ".ssh" / "config"
        out = testbed.ssh(src, f"ssh -F {config} {dst} hostname")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == (dst if dst.startswith("node") else "node2")
    config = (testbed.node_dir("node0") / "home" / ".ssh" / "config").read_text()
    assert "StrictHostKeyChecking yes" in config and "StrictHostKeyChecking no" not in config
    # strict for real: without the node's known_hosts entries the same connection is refused
    out = testbed.ssh(
        "node0", f"ssh -F {testbed.node_dir('node0')}/home/.ssh/config -o UserKnownHostsFile=/dev/null node1 true"
    )
    assert out.returncode != 0 and "Host key verification failed" in out.stderr, out.stderr
    # the known_hosts entries are the nodes' real host keys, by name and by address
    known = (testbed.node_dir("node1") / "home" / ".ssh" / "ddpctl_known_hosts").read_text()
    for node in NODES:
        key = " ".join((testbed.node_dir(node) / "ssh_host_ed25519_key.pub").read_text().split()[:2])
        assert f"{node},{ADDRESSES[node]} {key}" in known


@pytest.mark.slow
def test_cluster_key_on_every_node(site, testbed: Testbed) -> None:
    assert site["runs"][0].returncode == 0
    controller_key = site["tmp"] / "keys" / "id_ddpctl"
    assert controller_key.stat().st_mode & 0o777 == 0o600
    public = (site["tmp"] / "keys" / "id_ddpctl.pub").read_text().strip()
    for node in NODES:
        ssh_dir = testbed.node_dir(node) / "home" / ".ssh"
        out = testbed.ssh(node, f"stat -c %a {ssh_dir} {ssh_dir}/id_ddpctl {ssh_dir}/authorized_keys")
        assert out.stdout.split() == ["700", "600", "600"], out
        assert (ssh_dir / "id_ddpctl").read_bytes() == controller_key.read_bytes()
        assert public in (ssh_dir / "authorized_keys").read_text().splitlines()


@pytest.mark.slow
def test_env_file_names_the_interface_to_the_master(site, testbed: Testbed) -> None:
    assert site["runs"][0].returncode == 0
    for node in NODES:  # node0 is the master: its own address routes via lo, the file must say ddp0
        env_file = testbed.node_dir(node) / "ddpctl.env"
        lines = [line for line in env_file.read_text().splitlines() if line and not line.startswith("#")]
        assert sorted(lines) == ["GLOO_SOCKET_IFNAME=ddp0", "NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME=ddp0"]
        out = testbed.ssh(
            node, f"set -a; . {env_file}; set +a; sh -c 'echo $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME $NCCL_DEBUG'"
        )
        assert out.stdout.split() == ["ddp0", "ddp0", "WARN"], out


@pytest.mark.slow
def test_bundle_matches_the_repo(site, testbed: Testbed) -> None:
    assert site["runs"][0].returncode == 0
    want = dict(site["bundle"])
    assert "mnist.py" in want and "mingpt/model.py" in want
    user_script = site["tmp"] / "user" / "my_train.py"
    want["my_train.py"] = hashlib.sha256(user_script.read_bytes()).hexdigest()
    for node in NODES:
        bundle = testbed.node_dir(node) / "training"
        assert node_sums(testbed, node, bundle, sorted(want)) == want
        manifest = testbed.ssh(node, f"cd {bundle} && sha256sum --check --strict --quiet SHA256SUMS")
        assert manifest.returncode == 0, manifest.stdout + manifest.stderr


@pytest.mark.slow
def test_nvidia_found_no_gpu_and_installed_nothing(site) -> None:
    out = site["runs"][0].stdout
    for node in NODES:
        assert re.search(rf'ok: \[{node}\] => \{{\s*"msg": "no NVIDIA GPU found; nothing to install"', out), out
    assert "TASK [nvidia : Check the platform]" not in out  # the install tasks were not even included
    assert not Path("/etc/apt/sources.list.d/ddpctl-cuda.sources").exists()


@pytest.mark.slow
def test_explicit_socket_ifname_wins_and_debug_is_checked(site, testbed: Testbed) -> None:
    assert site["runs"][0].returncode == 0
    args = [
        "-i",
        str(site["inventory"]),
        "playbooks/site.yml",
        "--tags",
        "nccl_env",
        "-e",
        "nccl_env_file={{ ddpctl_node_dir }}/explicit.env",
    ]
    result = playbook(site["env"], *args, "-e", "nccl_env_socket_ifname=eth9", "-e", "nccl_env_debug=INFO")
    assert result.returncode == 0, show(result)
    for node in NODES:
        text = (testbed.node_dir(node) / "explicit.env").read_text()
        assert "NCCL_SOCKET_IFNAME=eth9\n" in text and "GLOO_SOCKET_IFNAME=eth9\n" in text
        assert "NCCL_DEBUG=INFO\n" in text
        assert "NCCL_SOCKET_IFNAME=ddp0\n" in (testbed.node_dir(node) / "ddpctl.env").read_text()
    shared = playbook(site["env"], *args, "-e", "nccl_env_pin_interface=false")  # one file read by several nodes
    assert shared.returncode == 0, show(shared)
    for node in NODES:
        text = (testbed.node_dir(node) / "explicit.env").read_text()
        assert "SOCKET_IFNAME" not in text and "NCCL_DEBUG=WARN\n" in text
    bad = playbook(site["env"], *args, "-e", "nccl_env_debug=LOUD")
    assert bad.returncode != 0
    assert "nccl_env_debug must be one of: VERSION, WARN, INFO, TRACE, got: LOUD" in bad.stdout, show(bad)


#: The nvidia role's --check cases that need no other role, each a host of its own in one run of
#: `site.yml --check --tags nvidia` (``nvidia_check``): one play's fixed cost (facts, argument specs,
#: post tasks: about 8 CPU-s) instead of one per case. ``forced*``: nvidia_force_install on GPU-less
#: hosts (forced1 with a stand-in PCI tree: one NVIDIA 3D controller and its audio function). The
#: others are test_check_mode_driver_follows_the_gpu's nodes (DRIVER_NODES) with a setting of their
#: own: CUDA 12.8 and the loaded driver not kept; the open modules or branch 590, which cannot drive
#: the V100s (and which the A10G and H100 nodes take, both set at once: neither fails them).
NVIDIA_CASES = {
    "forced0": ("", {"nvidia_force_install": "true"}),
    "forced1": ("", {"nvidia_force_install": "true"}),
    "forced2": ("", {"nvidia_force_install": "true"}),
    "v100-cuda128": ("node0", {"nvidia_cuda_version": "'12.8'", "nvidia_keep_loaded_driver": "false"}),
    "a10g-cuda128": ("node1", {"nvidia_cuda_version": "'12.8'", "nvidia_keep_loaded_driver": "false"}),
    "v100-open": ("node0", {"nvidia_kernel_modules": "open"}),
    "v100-590": ("node0", {"nvidia_driver_branch": "'590'"}),
    "a10g-open-590": ("node1", {"nvidia_kernel_modules": "open", "nvidia_driver_branch": "'590'"}),
    "h100-open-590": ("node2", {"nvidia_kernel_modules": "open", "nvidia_driver_branch": "'590'"}),
}


@pytest.fixture(scope="module")
def nvidia_check(local_nodes):
    """`site.yml --check --tags nvidia` once over every host of NVIDIA_CASES."""
    tmp = local_nodes["tmp"] / "nvidia-cases"
    (tmp / "host_vars").mkdir(parents=True)
    pci = tmp / "pci"
    for addr, vendor, cls in [
        ("0000:00:02.0", "0x1234", "0x030000"),
        ("0000:65:00.0", "0x10de", "0x030200"),
        ("0000:65:00.1", "0x10de", "0x040300"),
    ]:
        (pci / addr).mkdir(parents=True)
        (pci / addr / "vendor").write_text(vendor + "\n")
        (pci / addr / "class").write_text(cls + "\n")
    driver = driver_nodes(tmp)
    for host, (like, settings) in NVIDIA_CASES.items():
        lines = [driver[like]] if like else ([f"nvidia_pci_devices_dir: {pci}\n"] if host == "forced1" else [])
        lines += [f"{k}: {v}\n" for k, v in settings.items()]
        (tmp / "host_vars" / f"{host}.yml").write_text("".join(lines))
    inventory = local_nodes["inventory"](tmp / "hosts.ini", list(NVIDIA_CASES), **inventory_vars(local_nodes["tmp"]))
    result = playbook(local_nodes["env"], "-i", str(inventory), "playbooks/site.yml", "--check", "--tags", "nvidia")
    assert sorted(recap(result)) == sorted(NVIDIA_CASES), show(result)
    return result


@pytest.mark.slow
def test_check_mode_with_forced_nvidia_install(nvidia_check) -> None:
    """--check of the nvidia role with its install path forced on GPU-less, offline nodes (hosts
    forced0-2 of the one nvidia --check run).

    forced1 also gets a fake PCI tree with one NVIDIA 3D controller (and its audio function, which
    is not a GPU) to show detection itself."""
    out = nvidia_check.stdout
    forced = ["forced0", "forced1", "forced2"]
    stats = recap(nvidia_check)
    assert all(stats[h]["failed"] == 0 and stats[h]["unreachable"] == 0 for h in forced), show(nvidia_check)
    assert re.search(r'ok: \[forced1\] => \{\s*"msg": "NVIDIA GPU\(s\) found: 0000:65:00.0"', out), out
    for node in ("forced0", "forced2"):
        assert re.search(rf'ok: \[{node}\] => \{{\s*"msg": "no NVIDIA GPU found; installing anyway', out), out
    for node in forced:  # no PCI device id (forced1's stand-in has none) or no GPU: NVIDIA's default, open modules
        would_install = (
            rf'ok: \[{node}\] => \{{\s*"msg": "Check mode: would install linux-headers-[^,]+, nvidia-open-580, '
            r"cuda-libraries-13-0"
        )
        assert re.search(would_install, out), out
    # check mode changed nothing (the nodes share this machine's /etc)
    assert not Path("/etc/apt/sources.list.d/ddpctl-cuda.sources").exists()
    assert not Path("/etc/apt/keyrings/ddpctl-cuda-archive-keyring.asc").exists()


def fake_pci_tree(root: Path, devices: list[tuple[str, str, str]]) -> Path:
    """A stand-in /sys/bus/pci/devices: (address, class, device id) of NVIDIA functions."""
    for addr, cls, device in devices:
        (root / addr).mkdir(parents=True)
        (root / addr / "vendor").write_text("0x10de\n")
        (root / addr / "class").write_text(cls + "\n")
        (root / addr / "device").write_text(device + "\n")
    return root


def fake_proc_tree(root: Path, module: str, gpus: list[str]) -> Path:
    """A stand-in /proc/driver/nvidia: the loaded driver's version line and the GPUs it drives."""
    (root / "gpus").mkdir(parents=True)
    (root / "version").write_text(
        f"NVRM version: NVIDIA UNIX {module}  570.133.20  Release Build  (dvs-builder@U16-I3-B03-4-3)"
        "  Tue Mar  4 03:57:02 UTC 2025\nGCC version:  gcc version 12.3.0\n"
    )
    for addr in gpus:
        (root / "gpus" / addr).mkdir()
        (root / "gpus" / addr / "information").write_text("Model: \t\t NVIDIA A10G\n")
    return root


def plan_line(out: str, node: str) -> str:
    found = re.search(rf'ok: \[{node}\] => \{{\s*"msg": "(NVIDIA driver 580 [^"]*)"', out)
    assert found, out
    return found.group(1)


def message(out: str, node: str, text: str) -> bool:
    return re.search(rf'ok: \[{node}\] => \{{\s*"msg": "{re.escape(text)}"', out) is not None


def message_starts(out: str, node: str, text: str) -> bool:
    return re.search(rf'ok: \[{node}\] => \{{\s*"msg": "{re.escape(text)}', out) is not None


def driver_nodes(tmp: Path) -> dict[str, str]:
    """test_check_mode_driver_follows_the_gpu's nodes, each its host_vars text: stand-in PCI and
    /proc trees under ``tmp`` (see that test)."""
    gpus = {
        "node0": [("0000:00:1d.0", "0x030200", "0x1db1"), ("0000:00:1e.0", "0x030200", "0x1db5")],
        "node1": [("0000:00:1e.0", "0x030000", "0x2237")],
        "node2": [("0000:53:00.0", "0x030200", "0x2330"), ("0000:07:00.0", "0x068000", "0x22a3")],
    }
    procs = {
        "node0": fake_proc_tree(tmp / "proc-node0", "Open Kernel Module for x86_64", []),
        "node1": fake_proc_tree(tmp / "proc-node1", "x86_64 Kernel Module", ["0000:00:1e.0"]),
        "node2": tmp / "no-proc",
    }
    return {
        node: f"nvidia_pci_devices_dir: {fake_pci_tree(tmp / f'pci-{node}', devices)}\nnvidia_proc_dir: {procs[node]}\n"
        for node, devices in gpus.items()
    }


@pytest.mark.slow
def test_check_mode_driver_follows_the_gpu(local_nodes, nvidia_check) -> None:
    """--check of the nvidia and python_env roles on stand-in PCI trees: node0 has two V100s (p3:
    10de:1db1, 1db5; Volta), node1 an A10G (g5: 10de:2237; Ampere), node2 an H100 (p5: 10de:2330;
    Hopper) beside an NVSwitch (a bridge, not a GPU). The V100 node gets the proprietary modules and
    CUDA 12.6, the H100 node the open modules and CUDA 13.0; asking for what cannot drive a V100
    fails on that node only, before anything is changed.

    node1 runs a loaded driver that drives its A10G (as the Deep Learning AMI does): kept, nothing
    installed, unless nvidia_keep_loaded_driver=false. node0's loaded driver (open modules) lists
    neither V100: installed as if none were loaded. No node's nvidia-smi answers (a first install):
    the V100 node still gets the cu126 wheels, the kept 570 driver caps node1 at CUDA 12. The same
    nodes with other settings are hosts of the one nvidia --check run (NVIDIA_CASES)."""
    tmp = local_nodes["tmp"] / "driver-flavour"
    (tmp / "host_vars").mkdir(parents=True)
    for node, text in driver_nodes(tmp).items():
        (tmp / "host_vars" / f"{node}.yml").write_text(text)
    group_vars = {
        **inventory_vars(local_nodes["tmp"]),
        "python_env_mode": "online",
        "python_env_path": "{{ ddpctl_node_dir }}/new-venv",
        "python_env_nvidia_smi": str(tmp / "no-nvidia-smi"),
    }
    inventory = local_nodes["inventory"](tmp / "hosts.ini", **group_vars)
    args = ["-i", str(inventory), "playbooks/site.yml", "--check", "--tags", "nvidia,python_env"]
    result = playbook(local_nodes["env"], *args)
    assert result.returncode == 0, show(result)
    out = result.stdout
    assert re.search(r'ok: \[node2\] => \{\s*"msg": "NVIDIA GPU\(s\) found: 0000:53:00.0"', out), (
        out
    )  # not the NVSwitch
    assert message(
        out, "node1", "NVIDIA driver 570.133.20 already loaded for 0000:00:1e.0: kept (nvidia_keep_loaded_driver)"
    )
    assert not re.search(r'\[node1\] => \{\s*"msg": "(NVIDIA driver 580|Check mode: would)', out), (
        out
    )  # installs nothing
    assert message(
        out,
        "node0",
        "NVIDIA driver 570.133.20 already loaded, but it does not drive 0000:00:1d.0, 0000:00:1e.0: installing",
    ), out
    assert plan_line(out, "node0").startswith(
        "NVIDIA driver 580 with the proprietary kernel modules (GPU(s) older than Turing: "
        "0000:00:1d.0 10de:1db1, 0000:00:1e.0 10de:1db5), CUDA 12.6 (CUDA 13.0 and later do not support"
    ), out
    assert plan_line(out, "node2").startswith(
        "NVIDIA driver 580 with the open kernel modules (no GPU older than Turing found), CUDA 13.0:"
    ), out
    want = {"node0": "cuda-drivers-580, cuda-libraries-12-6", "node2": "nvidia-open-580, cuda-libraries-13-0"}
    for node, packages in want.items():
        would = rf'ok: \[{node}\] => \{{\s*"msg": "Check mode: would install linux-headers-[^,]+, {packages} from '
        assert re.search(would, out), out
    wheels = {
        "node0": "cu126 (a GPU older than Turing (nvidia_gpu_legacy): CUDA 12.6 wheels at the most)",
        "node1": "cu128 (NVIDIA driver 570.133.20 kept: CUDA 12 wheels at the most)",
        "node2": "cu130",
    }
    for node, index in wheels.items():
        assert message(out, node, f"torch 2.14.1 from https://download.pytorch.org/whl/{index}"), out
    # a 12.x choice is kept; nvidia_keep_loaded_driver=false installs over node1's loaded driver
    # (node0 and node1 as hosts v100-cuda128 and a10g-cuda128 of the one nvidia --check run)
    again = nvidia_check
    for node, packages in (("v100-cuda128", "cuda-drivers-580"), ("a10g-cuda128", "nvidia-open-580")):
        assert re.search(
            rf"\[{node}\] => \{{\s*\"msg\": \"Check mode: would install linux-headers-[^,]+, {packages}, "
            r"cuda-libraries-12-8 from",
            again.stdout,
        ), show(again)
    assert message(
        again.stdout,
        "a10g-cuda128",
        "NVIDIA driver 570.133.20 already loaded: installing over it (nvidia_keep_loaded_driver is false)",
    ), show(again)
    # what cannot drive a V100 fails that node (v100-open, v100-590) and no other: not the A10G or
    # the H100 node with both settings, nor any other host of the run
    refused = nvidia_check
    stats = recap(refused)
    assert refused.returncode != 0, show(refused)
    assert {h for h, s in stats.items() if s["failed"]} == {"v100-open", "v100-590"}, show(refused)
    for host, text in [
        (
            "v100-open",
            "the open kernel modules cannot drive GPUs older than Turing (0000:00:1d.0 "
            "10de:1db1, 0000:00:1e.0 10de:1db5): set nvidia_kernel_modules to auto or proprietary",
        ),
        (
            "v100-590",
            "driver branch 590 does not support GPUs older than Turing (0000:00:1d.0 10de:1db1, "
            "0000:00:1e.0 10de:1db5): 580 is the last that does",
        ),
    ]:
        assert stats[host]["failed"] == 1, show(refused)
        failed = re.search(rf'fatal: \[{host}\]: FAILED! => \{{.*?"msg": "([^"]*)"', refused.stdout, re.DOTALL)
        assert failed and text in failed.group(1), show(refused)
    assert not Path("/etc/apt/sources.list.d/ddpctl-cuda.sources").exists()
    for node in NODES:
        assert not (local_nodes["node_dir"](node) / "new-venv").exists()  # check mode made nothing


@pytest.mark.slow
def test_check_mode_picks_the_cuda_wheels_for_the_gpu(local_nodes) -> None:
    """--check of python_env on a new venv, GPU nodes faked: nvidia-smi says node0 has a V100
    (compute capability 7.0, p3) beside an A100, node1 an H100. PyTorch's cu128 and cu130 wheels
    have no Volta kernels, so node0 gets cu126 wheels and node1 the driver's cu130. node2 has no
    nvidia-smi and is told the CUDA version, as a ParallelCluster head node installing for its
    compute nodes is (pcluster's head_playbook_vars): the wheels follow that version."""
    tmp = local_nodes["tmp"] / "cuda-wheels"
    (tmp / "host_vars").mkdir(parents=True)
    for node, caps in (("node0", "7.0\n8.0"), ("node1", "9.0")):
        smi = tmp / f"nvidia-smi-{node}"
        smi.write_text(f"#!/bin/sh\nprintf '{caps}\\n'\n")
        smi.chmod(0o755)
        (tmp / "host_vars" / f"{node}.yml").write_text(f"python_env_nvidia_smi: {smi}\n")
    (tmp / "host_vars" / "node2.yml").write_text(
        f"python_env_nvidia_smi: {tmp / 'none'}\npython_env_cuda_version: '12.8'\n"
    )
    group_vars = {
        **inventory_vars(local_nodes["tmp"]),
        "python_env_mode": "online",
        "python_env_path": "{{ ddpctl_node_dir }}/new-venv",
    }
    inventory = local_nodes["inventory"](tmp / "hosts.ini", **group_vars)
    result = playbook(
        local_nodes["env"],
        "-i",
        str(inventory),
        "playbooks/site.yml",
        "--check",
        "--tags",
        "python_env",
        "-e",
        "nvidia_gpu_present=true",
    )
    assert result.returncode == 0, show(result)
    assert re.search(
        r'ok: \[node0\] => \{\s*"msg": "torch 2.14.1 from https://download.pytorch.org/whl/cu126 '
        r'\(a GPU of compute capability 7.0: CUDA 12.6 wheels at the most\)"',
        result.stdout,
    ), show(result)
    assert re.search(
        r'ok: \[node1\] => \{\s*"msg": "torch 2.14.1 from https://download.pytorch.org/whl/cu130"', result.stdout
    ), show(result)
    assert re.search(
        r'ok: \[node2\] => \{\s*"msg": "torch 2.14.1 from https://download.pytorch.org/whl/cu128"', result.stdout
    ), show(result)
    for node in NODES:
        assert not (local_nodes["node_dir"](node) / "new-venv").exists()  # check mode made nothing


def venv_with(path: Path, dists: dict[str, str]) -> Path:
    """A venv (no pip) whose site-packages holds only the named distributions' metadata: what
    python_env's probe reads, in a fraction of a second."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    [site] = path.glob("lib/python3*/site-packages")
    for name, version in dists.items():
        info = site / f"{name}-{version.split('+')[0]}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


@pytest.mark.slow
def test_existing_mode_takes_any_supported_torch_and_says_which(local_nodes) -> None:
    """python_env_mode=existing on nodes with torches of their own: 2.11.0 with no torchvision (a
    Deep Learning AMI's, a lab's conda env) and 2.14.1 with its torchvision are accepted and named;
    2.3.1 is below the floor: that node fails in one message that says what it found and the range."""
    tmp = local_nodes["tmp"] / "existing-torch"
    (tmp / "host_vars").mkdir(parents=True)
    for node, dists in (
        ("node0", {"torch": "2.11.0+cu130"}),
        ("node1", {"torch": "2.14.1+cu130", "torchvision": "0.29.1+cu130"}),
        ("node2", {"torch": "2.3.1+cu121", "torchvision": "0.18.1+cu121"}),
    ):
        venv = venv_with(tmp / f"venv-{node}", dists)
        (tmp / "host_vars" / f"{node}.yml").write_text(f"python_env_path: {venv}\n")
    group_vars = {k: v for k, v in inventory_vars(local_nodes["tmp"]).items() if k != "python_env_path"}
    inventory = local_nodes["inventory"](tmp / "hosts.ini", **group_vars)
    result = playbook(local_nodes["env"], "-i", str(inventory), "playbooks/site.yml", "--tags", "python_env")
    assert result.returncode != 0, show(result)
    said = dict(re.findall(r'ok: \[(node\d)\] => \{\s*"changed": false,\s*"msg": "([^"]*)"', result.stdout))
    assert said["node0"] == f"{tmp / 'venv-node0'}: torch 2.11.0+cu130, torchvision not installed", show(result)
    assert said["node1"] == f"{tmp / 'venv-node1'}: torch 2.14.1+cu130, torchvision 0.29.1+cu130", show(result)
    failed = re.search(r'fatal: \[node2\]: FAILED! => \{.*?"msg": "([^"]*)"', result.stdout, re.DOTALL)
    assert failed, show(result)
    assert failed.group(1).startswith(
        f"{tmp / 'venv-node2'}: found torch 2.3.1+cu121, torchvision 0.18.1+cu121; ddpctl supports torch 2.4 or newer."
    ), failed.group(1)
    assert recap(result)["node0"]["failed"] == 0 and recap(result)["node2"]["failed"] == 1


@pytest.mark.slow
def test_python_env_wheels_mode_installs_offline(site, testbed: Testbed) -> None:
    """python_env_mode=wheels on an air-gapped node: a new venv, pip --no-index from pushed wheels.

    The wheels are tiny stand-ins named torch 2.14.1+cpu and torchvision 0.29.1 (the real ones are
    gigabytes); what is tested is the role's path: venv, copy, offline pip, version check, rerun."""
    assert site["runs"][0].returncode == 0
    tmp = site["tmp"] / "wheels-mode"
    wheels = tmp / "wheels"
    wheels.mkdir(parents=True)
    fake_wheel(
        wheels,
        "torch",
        "2.14.1+cpu",
        {
            "torch/__init__.py": "from . import version\n__version__ = '2.14.1+cpu'\n",
            "torch/version.py": "cuda = None\n",
        },
    )
    fake_wheel(wheels, "torchvision", "0.29.1", {"torchvision/__init__.py": "__version__ = '0.29.1'\n"})
    group_vars = {
        **inventory_vars(site["tmp"]),
        "python_env_mode": "wheels",
        "python_env_wheel_dir": str(wheels),
        "python_env_path": "{{ ddpctl_node_dir }}/venv",
        "python_env_wheel_dest": "{{ ddpctl_node_dir }}/wheels",
    }
    inventory = testbed.inventory(tmp / "hosts.ini", n=1, **group_vars)
    args = ["-i", str(inventory), "playbooks/site.yml", "--tags", "python_env"]
    first = playbook(site["env"], *args)
    assert first.returncode == 0, show(first)
    assert recap(first)["node0"]["changed"] > 0
    venv_python = testbed.node_dir("node0") / "venv" / "bin" / "python"
    out = testbed.ssh(
        "node0", f"{venv_python} -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)'"
    )
    assert out.stdout.split() == ["2.14.1+cpu", "0.29.1"], out
    second = playbook(site["env"], *args)
    assert second.returncode == 0, show(second)
    assert recap(second)["node0"]["changed"] == 0, show(second)


#: What the no-iproute2 test hides from the PATH: iproute2's tools, and what the role's shell once used.
HIDDEN_TOOLS = ("ip", "ss", "bridge", "tc", "ifconfig", "route", "awk", "mawk", "gawk", "sed", "getent")


def route_dev(address: str) -> str:
    """The interface iproute2 names for ``address`` on this machine ("" where there is no route):
    what the nccl_env role must find without it."""
    local = subprocess.run(["ip", "-o", "addr", "show", "to", address], capture_output=True, text=True).stdout
    if local.split():
        return local.split()[1]
    out = subprocess.run(["ip", "-o", "route", "get", address], capture_output=True, text=True).stdout
    found = re.search(r" dev (\S+)", out)
    return found.group(1) if found else ""


def own_address() -> str:
    """An IPv4 address of this machine's other than loopback (10.77.0.1 where the test cluster is up)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    return out.split()[3].split("/")[0] if out.split() else "127.0.0.1"


def env_lines(path: Path) -> list[str]:
    return sorted(line for line in path.read_text().splitlines() if line and not line.startswith("#"))


@pytest.mark.slow
def test_nccl_env_needs_no_iproute2(local_nodes) -> None:
    """The nccl_env role on hosts whose PATH has no `ip` (nor awk, sed or getent: an image without
    iproute2; Ansible's own network facts are empty there too): each node still writes the interface
    iproute2 names toward its rendezvous address. node0's is 127.0.0.1 (lo), node1's this machine's
    own address (the interface holding it, though the route is via lo), node2's an address beyond
    the default route (198.51.100.1, TEST-NET-2)."""
    tmp = local_nodes["tmp"] / "no-iproute2"
    (tmp / "host_vars").mkdir(parents=True)
    (tmp / "no-rdma").mkdir()
    masters = {"node0": "127.0.0.1", "node1": own_address(), "node2": "198.51.100.1"}
    for node, addr in masters.items():
        (tmp / "host_vars" / f"{node}.yml").write_text(f"nccl_env_master_addr: {addr}\n")
    inventory = local_nodes["inventory"](
        tmp / "hosts.ini", **inventory_vars(local_nodes["tmp"]), nccl_env_rdma_devices_dir=str(tmp / "no-rdma")
    )
    bare = tmp / "bin"  # this machine's commands but iproute2's (and awk, sed, getent)
    bare.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for tool in Path(directory).iterdir() if Path(directory).is_dir() else []:
            if tool.name not in HIDDEN_TOOLS and not (bare / tool.name).exists() and os.access(tool, os.X_OK):
                (bare / tool.name).symlink_to(tool)
    env = {**local_nodes["env"], "PATH": f"{VENV_BIN}{os.pathsep}{bare}"}
    probe = subprocess.run(["/bin/sh", "-c", "command -v ip awk getent"], env=env, capture_output=True, text=True)
    assert probe.stdout == "", probe.stdout
    result = playbook(env, "-i", str(inventory), "playbooks/site.yml", "--tags", "nccl_env")
    want = {node: route_dev(addr) for node, addr in masters.items()}
    assert want["node0"] == "lo" and all(want.values()), want
    assert result.returncode == 0, show(result)
    for node, dev in want.items():
        lines = env_lines(local_nodes["node_dir"](node) / "ddpctl.env")
        assert lines == [f"GLOO_SOCKET_IFNAME={dev}", "NCCL_DEBUG=WARN", f"NCCL_SOCKET_IFNAME={dev}"], (node, lines)
        assert message(result.stdout, node, "no EFA device found: NCCL uses TCP sockets"), show(result)


def fake_efa_node(root: Path, devices: list[tuple[str, str]], product: str, *, software: str = "") -> dict[str, str]:
    """A stand-in /sys/class/infiniband with EFA devices (name, PCI id; the driver a link to ``efa``,
    as sysfs has it), a DMI product name, and, with ``software`` the plugin's library name, a
    stand-in /opt/amazon/efa and /opt/amazon/ofi-nccl: the role's variables that point at them."""
    (root / "drivers" / "efa").mkdir(parents=True)
    for name, pci_id in devices:
        device = root / "devices" / name
        device.mkdir(parents=True)
        (device / "device").write_text(pci_id + "\n")
        (device / "driver").symlink_to(root / "drivers" / "efa")
        (root / "infiniband").mkdir(exist_ok=True)
        (root / "infiniband" / name).mkdir()
        (root / "infiniband" / name / "device").symlink_to(device)
    (root / "infiniband").mkdir(exist_ok=True)
    (root / "product_name").write_text(product + "\n")
    if software:
        (root / "efa" / "lib").mkdir(parents=True)
        (root / "efa" / "lib" / "libfabric.so.1").write_text("")
        (root / "ofi-nccl" / "lib").mkdir(parents=True)
        (root / "ofi-nccl" / "lib" / software).write_text("")
    return {
        "nccl_env_rdma_devices_dir": str(root / "infiniband"),
        "nccl_env_dmi_product_file": str(root / "product_name"),
        "nccl_env_efa_dir": str(root / "efa"),
        "nccl_env_efa_plugin_dirs": f'["{root / "ofi-nccl"}", "{root / "aws-ofi-nccl"}"]',
    }


@pytest.mark.slow
def test_nccl_env_sets_up_efa_where_the_node_has_it(local_nodes) -> None:
    """The nccl_env role on stand-in /sys and /opt trees. node0 is a p4d (two 0xefa1 EFA devices,
    RDMA read on p4d) with the EFA software and a plugin named libnccl-net-ofi.so; node1 a p3dn
    (0xefa0: no RDMA read) whose plugin is libnccl-net.so; node2 a p5 (0xefa2) without the software.
    With nccl_env_efa_install=false node2 stays on sockets; in check mode the installer is what
    would run there, and nothing is changed or downloaded."""
    tmp = local_nodes["tmp"] / "efa"
    (tmp / "host_vars").mkdir(parents=True)
    nodes = {
        "node0": fake_efa_node(
            tmp / "node0",
            [("rdmap16s27", "0xefa1"), ("rdmap32s27", "0xefa1")],
            "p4d.24xlarge",
            software="libnccl-net-ofi.so",
        ),
        "node1": fake_efa_node(tmp / "node1", [("efa_0", "0xefa0")], "p3dn.24xlarge", software="libnccl-net.so"),
        "node2": fake_efa_node(tmp / "node2", [("rdmap79s0", "0xefa2")], "p5.48xlarge"),
    }
    for node, variables in nodes.items():
        (tmp / "host_vars" / f"{node}.yml").write_text("".join(f"{k}: {v}\n" for k, v in variables.items()))
    inventory = local_nodes["inventory"](
        tmp / "hosts.ini", **inventory_vars(local_nodes["tmp"]), nccl_env_master_addr="127.0.0.1"
    )
    args = ["-i", str(inventory), "playbooks/site.yml", "--tags", "nccl_env"]
    runs = [playbook(local_nodes["env"], *args, "-e", "nccl_env_efa_install=false") for _ in range(2)]
    assert runs[0].returncode == 0, show(runs[0])
    assert {h: s["changed"] for h, s in recap(runs[1]).items()} == {h: 0 for h in NODES}, show(runs[1])
    env = {n: env_lines(local_nodes["node_dir"](n) / "ddpctl.env") for n in NODES}
    sockets = ["GLOO_SOCKET_IFNAME=lo", "NCCL_DEBUG=WARN", "NCCL_SOCKET_IFNAME=lo"]
    lib = {n: f"{tmp / n / 'ofi-nccl' / 'lib'}:{tmp / n / 'efa' / 'lib'}" for n in NODES}
    assert env["node0"] == sorted(
        [
            *sockets,
            "FI_EFA_USE_DEVICE_RDMA=1",
            "FI_PROVIDER=efa",
            "NCCL_NET_PLUGIN=ofi",
            f"LD_LIBRARY_PATH={lib['node0']}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
        ]
    )
    assert env["node1"] == sorted(
        [*sockets, "FI_PROVIDER=efa", f"LD_LIBRARY_PATH={lib['node1']}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"]
    )
    assert env["node2"] == sockets
    out = runs[0].stdout
    assert message(
        out,
        "node0",
        f"EFA: 2 device(s) (rdmap16s27, rdmap32s27), NCCL through aws-ofi-nccl in {tmp / 'node0' / 'ofi-nccl' / 'lib'}, "
        "FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1",
    ), out
    assert message(
        out,
        "node1",
        f"EFA: 1 device(s) (efa_0), NCCL through aws-ofi-nccl in {tmp / 'node1' / 'ofi-nccl' / 'lib'}, "
        "FI_PROVIDER=efa (no RDMA read on this device)",
    ), out
    assert message_starts(out, "node2", "EFA device(s) rdmap79s0 found but no EFA software under"), out
    assert "nccl_env_efa_install is false: NCCL uses TCP sockets" in out
    # the launcher's way of loading the file puts the plugin first and keeps what was there
    loaded = subprocess.run(
        ["sh", "-c", f"set -a; . {local_nodes['node_dir']('node0') / 'ddpctl.env'}; set +a; echo $LD_LIBRARY_PATH"],
        env={**os.environ, "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
        capture_output=True,
        text=True,
    )
    assert loaded.stdout.strip() == f"{lib['node0']}:/usr/local/cuda/lib64"
    check = playbook(local_nodes["env"], *args, "--check", "--diff")
    assert check.returncode == 0, show(check)
    assert message_starts(
        check.stdout,
        "node2",
        "Check mode: would install the EFA software from "
        "https://efa-installer.amazonaws.com/aws-efa-installer-latest.tar.gz (efa_installer.sh -y): EFA device(s) "
        f"rdmap79s0 found, no libfabric under {tmp / 'node2' / 'efa'}",
    ), show(check)
    assert "+FI_PROVIDER=efa" in check.stdout and "+FI_EFA_USE_DEVICE_RDMA=1" in check.stdout  # node2's would-be file
    assert recap(check)["node0"]["changed"] == 0 and recap(check)["node1"]["changed"] == 0
    assert env_lines(local_nodes["node_dir"]("node2") / "ddpctl.env") == sockets  # check mode changed nothing
    assert not (tmp / "node2" / "efa").exists()
