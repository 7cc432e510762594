"""Nothing deleted that is not ours (issue 26): the inputs that deleted, stopped or overwrote what the
command was not asked to touch, and the round-2 bad inputs, each through the real ``ddpctl`` command
in a fresh state home: one ``Error:`` line, exit 2, nothing started or changed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, tree
from tests.support.specs import cluster_spec

TAKEN = "taken1"  # the run id of the recorded run that the `recorded` rows start from


def inventory(text: str) -> dict[str, str]:
    return {"hosts.ini": text}


ONPREM = ["up", "--provider", "onprem", "-i", "hosts.ini", "--dry-run"]
HOST = "n1 ansible_host=127.0.0.1 ansible_user=u"

# (id, args, files written into the working directory first, what the one line says, needs the
# recorded run TAKEN (a message-passing run on 2 local nodes) in the state home)
CASES = [
    ("down --all --name", ["down", "--all", "--name", "aa", "-y"], {}, "--all and --name", False),
    (
        "run --run-id of a recorded run",
        ["run", "message-passing", "--run-id", TAKEN],
        {},
        f"run id {TAKEN!r} is already recorded",
        True,
    ),
    (
        "-e DDPCTL_SNAPSHOT_DIR",
        ["run", "mnist", "--dry-run", "-e", "DDPCTL_SNAPSHOT_DIR=/tmp/x"],
        {},
        "DDPCTL_SNAPSHOT_DIR is set by ddpctl: use --snapshot-dir",
        False,
    ),
    (
        "-e DDPCTL_RUN_ID",
        ["run", "mnist", "--dry-run", "-e", "DDPCTL_RUN_ID=x"],
        {},
        "DDPCTL_RUN_ID is set by ddpctl",
        False,
    ),
    (
        "--env-file /dev/zero",
        ["run", "mnist", "--dry-run", "--env-file", "/dev/zero"],
        {},
        "--env-file /dev/zero is not a regular file",
        False,
    ),
    (
        "--env-file too big",
        ["run", "mnist", "--dry-run", "--env-file", "big.env"],
        {"big.env": "A=" + "x" * (1024 * 1024) + "\n"},
        "big.env is larger than 1 MiB",
        False,
    ),
    (
        "--env-file duplicate key",
        ["run", "mnist", "--dry-run", "--env-file", "dup.env"],
        {"dup.env": "A=1\nB=2\nA=3\n"},
        "dup.env sets A twice (lines 1 and 3)",
        False,
    ),
    (
        "--tag duplicate key",
        ["up", "--provider", "aws", "--dry-run", "--tag", "team=a", "--tag", "team=b"],
        {},
        "--tag team is given twice",
        False,
    ),
    (
        "--ssh-cidr ::/0 into ddpctl's VPC",
        ["up", "--provider", "aws", "--dry-run", "--ssh-cidr", "::/0"],
        {},
        "--ssh-cidr ::/0 is IPv6 and the VPC ddpctl makes has no IPv6",
        False,
    ),
    (
        "--ssh-cidr IPv6 address into ddpctl's VPC",
        ["up", "--provider", "aws", "--yes", "--ssh-cidr", "2001:db8::7"],
        {},
        "--ssh-cidr 2001:db8::7 is IPv6 and the VPC ddpctl makes has no IPv6",
        False,
    ),
    (
        "--ssh-cidr ::/0 into ParallelCluster's VPC",
        ["up", "--provider", "pcluster", "--dry-run", "--ssh-cidr", "::/0"],
        {},
        "--ssh-cidr ::/0 is IPv6 and the VPC ddpctl makes has no IPv6",
        False,
    ),
    ("logs --tail overflow", ["logs", "--tail", "9223372036854775808"], {}, "--tail", False),
    ("logs --rank 99", ["logs", TAKEN, "--rank", "99"], {}, f"run {TAKEN!r} had ranks 0-1, not 99", True),
    (
        "logs --node node9",
        ["logs", TAKEN, "--node", "node9"],
        {},
        f"run {TAKEN!r} ran on node0, node1, not node9",
        True,
    ),
    (
        "run a shell script",
        ["run", "./t.sh", "--dry-run"],
        {"t.sh": "#!/bin/sh\necho hi\n"},
        "./t.sh is not a Python script (its first line is '#!/bin/sh')",
        False,
    ),
    (
        "run mnist -- --epochs abc",
        ["run", "mnist", "--dry-run", "--", "--epochs", "abc"],
        {},
        "mnist -- --epochs abc: argument --epochs: invalid int value: 'abc'",
        False,
    ),
    (
        "run mingpt -- --no-such-flag",
        ["run", "mingpt", "--dry-run", "--", "--no-such-flag"],
        {},
        "mingpt -- --no-such-flag: unrecognized arguments: --no-such-flag",
        False,
    ),
    (
        "--snapshot-dir /proc/x",
        ["run", "mnist", "--dry-run", "--snapshot-dir", "/proc/x"],
        {},
        "--snapshot-dir /proc/x is under /proc",
        False,
    ),
    (
        "--snapshot-dir /sys/x",
        ["run", "mnist", "--dry-run", "--snapshot-dir", "/sys/x"],
        {},
        "--snapshot-dir /sys/x is under /sys",
        False,
    ),
    (
        "--playbook-var ansible_user",
        [*ONPREM, "--playbook-var", "ansible_user=root"],
        inventory(f"[ddp_nodes]\n{HOST}\n"),
        "--playbook-var ansible_user would override every host's connection",
        False,
    ),
    (
        "--playbook-var ansible_host",
        [*ONPREM, "--playbook-var", "ansible_host=10.0.0.9"],
        inventory(f"[ddp_nodes]\n{HOST}\n"),
        "--playbook-var ansible_host would override every host's connection",
        False,
    ),
    (
        "empty ddp_nodes group",
        ONPREM,
        inventory(f"[ddp_nodes]\n\n[other]\n{HOST}\n"),
        "the ddp_nodes group in hosts.ini has no hosts",
        False,
    ),
    (
        "empty ansible_host",
        ONPREM,
        inventory("[ddp_nodes]\nn1 ansible_host= ansible_user=u\n"),
        "ansible_host of host 'n1' in hosts.ini is empty",
        False,
    ),
    (
        "empty ansible_user",
        ONPREM,
        inventory("[ddp_nodes]\nn1 ansible_host=127.0.0.1 ansible_user=\n"),
        "ansible_user of host 'n1' in hosts.ini is empty",
        False,
    ),
    (
        "ansible_connection=local",
        ONPREM,
        inventory("[ddp_nodes]\nn1 ansible_host=127.0.0.1 ansible_connection=local\n"),
        "host 'n1' in hosts.ini has ansible_connection=local",
        False,
    ),
    (
        "--resume of a succeeded run",
        ["run", "--resume", TAKEN],
        {},
        f"run {TAKEN!r} succeeded: there is nothing to resume",
        True,
    ),
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state home holding one finished run, TAKEN (message-passing on 2 local nodes)."""
    home = tmp_path_factory.mktemp("recorded") / "home"
    env = {**os.environ, "DDPCTL_HOME": str(home)}
    result = ddpctl("run", "message-passing", "--nodes", "2", "--run-id", TAKEN, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return home


@pytest.mark.parametrize("args,files,message,needs_run", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(
    home: Path, tmp_path: Path, request: pytest.FixtureRequest, args, files, message: str, needs_run: bool
) -> None:
    if needs_run:
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(request.getfixturevalue("recorded"), home, symlinks=True)
    before = snapshot(home)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, content in files.items():
        path = cwd / name
        path.write_text(content)
        if content.startswith("#!"):
            path.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DDPCTL_CONFIG"}
    result = ddpctl(*args, cwd=cwd, env=env, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert message in lines[0], lines[0]
    assert snapshot(home) == before  # nothing created, changed or removed


def snapshot(home: Path) -> dict[str, bytes]:
    """Every file under ``home`` with its content (locks aside: the kernel's, not a record)."""
    if not home.exists():
        return {}
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


# ---- the state home -----------------------------------------------------------------------------


def test_a_relative_state_home_is_recorded_absolute_and_down_leaves_a_decoy(tmp_path: Path) -> None:
    """`cd /p && DDPCTL_HOME=relhome ddpctl up`, then `down` from another directory with the home
    given absolute: the cluster under /p/relhome goes, a folder of the same relative name under the
    other directory (a user's, with files) stays."""
    project, elsewhere = tmp_path / "p", tmp_path / "elsewhere"
    project.mkdir()
    decoy = elsewhere / "relhome" / "clusters" / "default"
    decoy.mkdir(parents=True)
    (decoy / "precious.txt").write_text("not ddpctl's\n")
    up = ddpctl("up", "--nodes", "2", cwd=project, env={**os.environ, "DDPCTL_HOME": "relhome"})
    assert up.returncode == 0, up.stderr
    state = json.loads((project / "relhome" / "clusters" / "default.json").read_text())
    assert state["shared_dir"].startswith(str(project / "relhome"))
    assert all(r["id"].startswith("/") for r in state["resources"] if r["kind"] == "dir")
    down = ddpctl("down", cwd=elsewhere, env={**os.environ, "DDPCTL_HOME": str(project / "relhome")})
    assert down.returncode == 0, down.stderr
    assert (decoy / "precious.txt").read_text() == "not ddpctl's\n"
    assert tree(project / "relhome" / "clusters") == []


def test_down_never_removes_a_recorded_path_outside_the_clusters_folder(home: Path, tmp_path: Path) -> None:
    """A state file whose recorded folders are relative (written by an older ddpctl with a relative
    home) or point elsewhere (a hand edit): `down` removes the cluster's own folder, says what it
    left, and touches nothing else."""
    assert ddpctl("up", "--nodes", "2").returncode == 0
    path = home / "clusters" / "default.json"
    state = json.loads(path.read_text())
    outside = tmp_path / "outside"
    (outside / "node0").mkdir(parents=True)
    (outside / "node0" / "keep.txt").write_text("x")
    dirs = [r for r in state["resources"] if r["kind"] == "dir"]
    dirs[1]["id"] = str(outside / "node0")
    dirs[2]["id"] = "relhome/clusters/default/node1"
    path.write_text(json.dumps(state))
    cwd = tmp_path / "cwd"
    (cwd / "relhome" / "clusters" / "default" / "node1").mkdir(parents=True)
    down = ddpctl("down", cwd=cwd)
    assert down.returncode == 0, down.stderr
    assert (outside / "node0" / "keep.txt").is_file()
    assert (cwd / "relhome" / "clusters" / "default" / "node1").is_dir()
    assert f"left {outside / 'node0'}: not inside" in down.stderr
    assert tree(home / "clusters") == []


def test_a_state_home_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder\n")
    env = {**os.environ, "DDPCTL_HOME": str(home)}
    for args in (["status"], ["runs", "--json"], ["run", "mnist", "--dry-run"]):
        result = ddpctl(*args, env=env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert f"DDPCTL_HOME {home} is not a directory" in result.stderr, result.stderr
        if "--json" in args:
            doc = json.loads(result.stdout)
            assert doc["ok"] is False and doc["error"]["code"] == 2


# ---- --json: every failure is the one envelope ------------------------------------------------------


@pytest.mark.parametrize(
    "args,files",
    [
        (["status", "--json", "--no-such-option"], {}),
        (["--config", "missing.toml", "status", "--json"], {}),
        (["status", "--json"], {"ddpctl.toml": "[cluster]\nnodes = 2.7\n"}),
        (["run", "--json", "mnist", "--nodes", "abc"], {}),
        (["logs", "--json", "--tail", "-1"], {}),
    ],
    ids=["unknown option", "missing --config", "toml error", "bad value", "out of range"],
)
def test_json_usage_errors_are_the_envelope(home: Path, tmp_path: Path, args, files) -> None:
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    result = ddpctl(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == 1 and doc["ok"] is False and doc["error"]["code"] == 2
    assert doc["error"]["message"] and "\n" not in doc["error"]["message"]


# ---- remote calls have deadlines ------------------------------------------------------------------


def test_ssh_to_a_node_that_never_answers_ends_and_names_it(home: Path, tmp_path: Path) -> None:
    """A node whose port accepts and then says nothing (a hung host, a black-holing firewall after
    the handshake): `ddpctl ssh` gives up after its connect timeout, naming the node."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    inventory_path = tmp_path / "hosts.ini"
    key = tmp_path / "key"
    key.write_text("not a key\n")
    key.chmod(0o600)
    inventory_path.write_text(
        f"[ddp_nodes]\nn1 ansible_host=127.0.0.1 ansible_port={port} ansible_user=u ansible_ssh_private_key_file={key}\n"
    )
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.model.state import ClusterState, NodeInfo
    from ddpctl.infra.model.store import StateStore

    store = StateStore(home)
    host = Host(name="n1", address="127.0.0.1", port=port, user="u", key_file=str(key))
    node = NodeInfo(name="n1", host="127.0.0.1", workdir="/w", ssh=host)
    spec = cluster_spec(name="default", provider="onprem", inventory=str(inventory_path))
    store.save(ClusterState(spec=spec, cluster_id="abc", status="up", nodes=[node]))
    env = dict(os.environ)
    result = subprocess.run(
        [sys.executable, "-m", "ddpctl", "ssh", "n1", "--", "true"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    listener.close()
    assert result.returncode != 0
    assert "n1" in result.stderr and "did not answer" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "text,command",
    [
        ('{"spec": {"name": "c", "provider": "local", "nodes": 2', "ddpctl down --name c"),
        ('{"spec": {"name": "c", "nod', "ddpctl down --name c --provider PROVIDER"),
    ],
    ids=["provider readable", "provider lost"],
)
def test_a_damaged_state_files_hint_works_as_written(home: Path, text: str, command: str) -> None:
    (home / "clusters").mkdir(parents=True)
    (home / "clusters" / "c.json").write_text(text)
    status = ddpctl("status")
    assert f"`{command}` cleans up what it can find" in status.stderr, status.stderr
    down = ddpctl(*command.replace("PROVIDER", "local").split()[1:])
    assert down.returncode == 0, down.stderr
    assert not (home / "clusters" / "c.json").exists()
