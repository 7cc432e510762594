"""Broken state, full disks and secrets (issue 16): what a user cannot get out of without editing
files by hand, tested with the real CLI.

- a damaged cluster state file (truncated, garbled, not ddpctl's shape): `status` shows it as
  damaged, `run` refuses in one line, `down` cleans up from what can still be read (local: the
  processes by their marker; aws: the resources by tag, on the moto server);
- a damaged run record: `runs` lists it as damaged, `run --resume` refuses in one line;
- temp files of an interrupted state write are removed;
- the state home is private: folders 0700, records and logs 0600;
- secrets (`run -e KEY`, `--env-file`): the ranks get the value, no record, no `--dry-run` and no
  `--json` shows it;
- a full disk (a small tmpfs; needs root to mount it): `run` fails in one line and leaves no
  process behind, also when the disk fills up mid-run, and `down` still works.

Its pure tests (no process beyond Python) are in tests/unit/test_broken_state.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from ddpctl.infra.tools.procs import RUN_KEY, find_tagged
from tests.support.cli import ddpctl, tree
from tests.support.moto import Moto


def one_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


def ok(*args: str, **kwargs) -> subprocess.CompletedProcess:
    result = ddpctl(*args, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


# ---- a damaged cluster state file --------------------------------------------------------------


def _reshape(change: Callable[[dict], object]) -> Callable[[bytes], bytes]:
    def damage(text: bytes) -> bytes:
        doc = json.loads(text)
        change(doc)
        return json.dumps(doc).encode()

    return damage


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda text: text[:150],  # cut before the cluster id
    "cut at the end": lambda text: text[:-40],
    "empty": lambda text: b"",
    "not UTF-8": lambda text: text[:60] + b"\xff\xfe\x00" + text[63:],
    "garbled": lambda text: text.replace(b'"nodes"', b'"no\x01des'),
    "a list": lambda text: b"[]",
    "no spec": _reshape(lambda doc: doc.pop("spec")),
    "nodes not a list": _reshape(lambda doc: doc.update(nodes=7)),
    "a node of the wrong shape": _reshape(lambda doc: doc["nodes"][0].update(port="x")),
    "a bad value": _reshape(lambda doc: doc["spec"].update(nodes=-3)),
    "another cluster's": _reshape(lambda doc: doc["spec"].update(name="other")),
}

#: where the file no longer says which provider made the cluster: `down` asks for --provider
PROVIDER_UNREADABLE = {"empty", "not UTF-8", "a list", "no spec"}


def start_marked_process(state: dict) -> psutil.Popen:
    """A stand-in for a rank of the cluster: a process with the markers its launcher gives."""
    env = {
        **os.environ,
        "DDPCTL_CLUSTER_ID": state["cluster_id"],
        "DDPCTL_SHARED_DIR": state["shared_dir"],
        RUN_KEY: "rdamaged01",
    }
    return psutil.Popen(["sleep", "600"], env=env, start_new_session=True)


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_damaged_cluster_state(home: Path, damage: str) -> None:
    ok("up", "--nodes", "2")
    path = home / "clusters" / "default.json"
    proc = start_marked_process(json.loads(path.read_text()))
    try:
        path.write_bytes(DAMAGES[damage](path.read_bytes()))

        shown = ok("status").stdout + ok("status").stderr  # the table, then what is damaged
        assert "damaged" in shown and "ddpctl down --name default" in shown
        doc = json.loads(ok("status", "--json").stdout)
        assert doc["clusters"][0]["status"] == "damaged"

        # the hint's command works as written: with --provider where the file no longer says which
        down = "ddpctl down --name default" + (" --provider PROVIDER" if damage in PROVIDER_UNREADABLE else "")
        result = ddpctl("run", "message-passing", "--nodes", "2")
        assert result.returncode == 1
        assert "is damaged" in one_error(result) and f"`{down}`" in one_error(result)
        result = ddpctl("up", "--nodes", "2")
        assert result.returncode == 1 and "already exists" in one_error(result)

        if damage in PROVIDER_UNREADABLE:  # said, and nothing done until the user says which
            result = ddpctl("down")
            assert result.returncode == 2 and "--provider PROVIDER" in one_error(result)
            assert path.exists() and proc.poll() is None
        result = ok("down", "--name", "default", *(["--provider", "local"] if damage in PROVIDER_UNREADABLE else []))
        assert "is damaged" in result.stderr and "is down" in result.stderr
        assert proc.wait(timeout=10) is not None  # stopped by its marker
        assert tree(home / "clusters") == []
        assert ok("status", "--json").stdout.count('"name"') == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_damaged_state_that_names_no_provider(home: Path) -> None:
    ok("up")
    path = home / "clusters" / "default.json"
    path.write_bytes(b'{"version": 2, "spe')
    result = ddpctl("down")
    assert result.returncode == 2
    assert "does not say which provider" in one_error(result) and "--provider PROVIDER" in one_error(result)
    assert path.exists()  # nothing done
    ok("down", "--name", "default", "--provider", "local")
    assert tree(home / "clusters") == []


AWS_UP = ("up", "--provider", "aws", "--name", "c1", "--ssh-cidr", "203.0.113.7/32", "--yes", "--no-configure")


@pytest.fixture
def aws_env(moto: Moto, home: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    yield moto.env(home, tmp_path)


def test_damaged_aws_state_is_cleaned_by_tag(moto: Moto, home: Path, aws_env: dict[str, str]) -> None:
    baseline = moto.inventory()
    ok(*AWS_UP, env=aws_env, timeout=120)
    path = home / "clusters" / "c1.json"
    doc = json.loads(path.read_text())
    doc["resources"] = "lost"
    path.write_text(json.dumps(doc))

    result = ok("down", "--name", "c1", env=aws_env, timeout=120)
    assert "cleaning up from what it still says: provider aws, region" in result.stderr
    assert moto.inventory() == baseline
    assert tree(home / "clusters") == []


def test_damaged_aws_state_without_its_region(moto: Moto, home: Path, aws_env: dict[str, str]) -> None:
    baseline = moto.inventory()
    ok(*AWS_UP, env=aws_env, timeout=120)
    path = home / "clusters" / "c1.json"
    region = json.loads(path.read_text())["spec"]["options"]["region"]
    path.write_text('{"spec": {"name": "c1", "provider": "aws"')
    result = ddpctl("down", "--name", "c1", env=aws_env)
    assert result.returncode == 2 and "--region REGION" in one_error(result)
    ok("down", "--name", "c1", "--region", region, env=aws_env, timeout=120)
    assert moto.inventory() == baseline
    assert tree(home / "clusters") == []


# ---- damaged run records ------------------------------------------------------------------------


def test_damaged_run_records(home: Path) -> None:
    ok("run", "message-passing", "--nodes", "1", "--run-id", "rgood00001")
    ok("run", "message-passing", "--nodes", "1", "--run-id", "rbad000001")
    ok("run", "message-passing", "--nodes", "1", "--run-id", "rbad000002")
    (home / "runs" / "rbad000001" / "options.json").write_text('{"options": {"job": ')
    (home / "runs" / "rbad000002" / "run.json").write_text("[1, 2]")

    runs = json.loads(ok("runs", "--json").stdout)["runs"]
    assert {r["run_id"]: r["state"] for r in runs} == {
        "rgood00001": "succeeded",
        "rbad000001": "damaged",
        "rbad000002": "damaged",
    }
    listed = {r["run_id"]: r["result"] for r in runs}
    assert listed["rgood00001"] == "succeeded"
    assert listed["rbad000001"].startswith("damaged (options.json")
    assert listed["rbad000002"].startswith("damaged (run.json")
    assert "damaged" in ok("runs").stdout

    result = ddpctl("run", "--resume", "rbad000001")
    assert result.returncode == 2
    assert "the record of run 'rbad000001'" in one_error(result) and "is damaged" in one_error(result)


# ---- temp files of an interrupted write; a private state home -----------------------------------


def test_temp_files_of_interrupted_writes_are_removed(home: Path) -> None:
    ok("up")
    clusters = home / "clusters"
    old, fresh = clusters / ".default.json.x1y2.tmp", clusters / ".default.json.z3w4.tmp"
    other = clusters / ".other.json.a1b2.tmp"
    for tmp in (old, fresh, other):
        tmp.write_text("{")
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    ok("down")
    assert not old.exists() and not fresh.exists()  # down: every leftover of this cluster
    assert other.exists()  # another cluster's are its own


def test_state_home_is_private(home: Path) -> None:
    (home / "runs").mkdir(parents=True, mode=0o755)  # an older ddpctl's
    (home / "runs").chmod(0o755)
    ok("run", "message-passing", "--nodes", "2", "--run-id", "rprivate01")
    assert (home / "runs").stat().st_mode & 0o777 == 0o700
    run_dir = home / "runs" / "rprivate01"
    assert run_dir.stat().st_mode & 0o777 == 0o700
    for name in ("options.json", "output.log", "run.json"):
        assert (run_dir / name).stat().st_mode & 0o777 == 0o600, name
    ok("up")
    assert (home / "clusters").stat().st_mode & 0o777 == 0o700
    assert (home / "clusters" / "default.json").stat().st_mode & 0o777 == 0o600
    ok("down")


# ---- secrets ------------------------------------------------------------------------------------

SECRET = "s3cr3t-" + uuid.uuid4().hex


def test_secrets_reach_the_ranks_and_no_record(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(
        "import hashlib, os\n"
        "for k in ('FROM_ENV', 'FROM_FILE', 'PLAIN'):\n"
        "    print(k, hashlib.sha256(os.environ[k].encode()).hexdigest()[:16])\n"
    )
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# a comment\n\nFROM_FILE={SECRET}-file\n")
    env = {**os.environ, "FROM_ENV": SECRET}
    args = ("run", str(script), "--nodes", "2", "-e", "FROM_ENV", "--env-file", str(env_file), "-e", "PLAIN=1")

    dry = ok(*args, "--dry-run", env=env).stdout
    assert "FROM_ENV=<secret>" in dry and "FROM_FILE=<secret>" in dry and "PLAIN=1" in dry
    assert SECRET not in dry
    assert SECRET not in ok(*args, "--dry-run", "--json", env=env).stdout

    result = ok(*args, "--run-id", "rsecret001", "--json", env=env)
    digest = __import__("hashlib").sha256
    assert f"FROM_ENV {digest(SECRET.encode()).hexdigest()[:16]}" in result.stderr  # --json: lines on stderr
    assert f"FROM_FILE {digest(f'{SECRET}-file'.encode()).hexdigest()[:16]}" in result.stderr
    for path in home.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    options = json.loads((home / "runs" / "rsecret001" / "options.json").read_text())["options"]
    assert options["env"] == ["FROM_ENV", "PLAIN=1"] and options["env_files"] == [str(env_file)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "mnist", "-e", "UNSET_SECRET_X"], "UNSET_SECRET_X is not set in your environment"),
        (["run", "mnist", "--env-file", "/nonexistent/x.env"], "--env-file /nonexistent/x.env: cannot read it"),
        (["up", "--dry-run", "-e", "HOME"], "is for `ddpctl run -e HOME`"),
    ],
)
def test_secret_refusals(home: Path, args: list[str], message: str) -> None:
    result = ddpctl(*args)
    assert result.returncode == 2 and message in one_error(result)
    assert tree(home) == []


# ---- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs for the state home (root only: mount)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a full-disk test mounts a small tmpfs: run as root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> None:
    """Write until the tmpfs takes no more, down to its last partial page."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 4096, 64, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


def test_full_disk_run_and_down(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = small_disk / "home"
    monkeypatch.setenv("DDPCTL_HOME", str(home))
    ok("up", "--nodes", "2")
    fill(small_disk)

    result = ddpctl("run", "message-passing", "--nodes", "2", "--run-id", "rfull00001")
    assert result.returncode == 1
    assert "no space left on the device" in one_error(result)
    assert find_tagged(RUN_KEY, "rfull00001") == []

    result = ok("down")
    assert "is down" in result.stderr
    assert not (home / "clusters" / "default.json").exists()


def test_disk_filling_up_mid_run_leaves_no_process(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = small_disk / "home"
    monkeypatch.setenv("DDPCTL_HOME", str(home))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddpctl", "run", "mnist", "--nodes", "2", "--run-id", "rfull00002"]
        + ["--", "--epochs", "3", "--log-every", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "step 3 |" in line:
            break
    fill(small_disk)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "no space left on the device" in err.strip().splitlines()[-1]
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while find_tagged(RUN_KEY, "rfull00002") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert find_tagged(RUN_KEY, "rfull00002") == []
    assert not (home / "clusters" / "default.json").exists()  # the run's cluster went down


def test_secrets_travel_on_stdin_not_on_the_launch_line(tmp_path: Path) -> None:
    """The SSH launch line reads secrets from the session's stdin: run here with bash, as sshd would."""
    from ddpctl.infra.launch.plan import NodeLaunch

    printer = "import os; print(os.environ['TOKEN'], os.environ['OTHER'], os.environ['PLAIN'])"
    launch = NodeLaunch(
        node="n0",
        host="127.0.0.1",
        node_rank=0,
        argv=(sys.executable, "-c", printer),
        env={"TOKEN": f"{SECRET} with 'quotes' $HOME", "OTHER": "b", "PLAIN": "p"},
        cwd=str(tmp_path / "work"),
        log_dir=str(tmp_path / "logs"),
        secret=("OTHER", "TOKEN"),
    )
    line = launch.shell()
    assert SECRET not in line and "PLAIN=p" in line
    result = subprocess.run(["bash", "-c", line], input=launch.secret_input(), capture_output=True, check=True)
    assert result.stdout.decode().split("\n")[0] == f"{SECRET} with 'quotes' $HOME b p"
