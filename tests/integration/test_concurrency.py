"""Commands that change one cluster do not interleave (infra/model/locks.py), with real concurrent processes.

`up`, `down` and `configure` hold a cluster exclusively, a run holds it shared and holds its own
run id; a second command is refused at once in one line naming the holder. Runs on one cluster
take turns: a second run waits for the first (or is refused with --no-wait). The lock is the
kernel's (flock), so a killed command leaves nothing stale behind.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.support.cli import Output, ddpctl, start_ddpctl
from tests.support.moto import Moto
from tests.support.scripts import SLEEPER


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """ddpctl in the background (a SIGINT is Ctrl-C), output (merged) on a pipe."""
    return start_ddpctl(*args, env=env, stdin=subprocess.DEVNULL)


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def sleeper(tmp_path: Path) -> str:
    """A run that lasts (tests/support/scripts.py SLEEPER): what these tests hold is a cluster and a run id,
    not a process group; its ranks sleep (no torch, no training) while the other commands are tried."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    return str(script)


def test_a_running_run_holds_its_cluster_and_its_id(home: Path, tmp_path: Path) -> None:
    assert ddpctl("up", "--nodes", "2").returncode == 0
    run = start("run", sleeper(tmp_path), "--nodes", "2", "--run-id", "busy1", "-e", "SLEEP_S=600")
    out = Output(run)
    out.until("started rank 1", timeout=180)
    down = ddpctl("down")
    assert down.returncode == 1
    assert "cluster 'default' is in use by `ddpctl run busy1 (sleeper)` (pid " in one_line(down)
    again = ddpctl("up", "--nodes", "2")
    assert again.returncode == 1 and "in use by `ddpctl run busy1 (sleeper)`" in one_line(again)
    resume = ddpctl("run", "--resume", "busy1")
    assert resume.returncode == 1 and "run busy1 is still running (`ddpctl run busy1 (sleeper)` (pid" in one_line(
        resume
    )
    other = ddpctl("run", "message-passing", "--nodes", "2", "--no-wait")  # runs take turns
    assert other.returncode == 1
    assert "cluster 'default' is busy with `ddpctl run busy1 (sleeper)` (pid " in one_line(other)
    run.send_signal(signal.SIGINT)
    out.finish(timeout=120)
    assert run.returncode == 130
    assert ddpctl("down").returncode == 0  # the lock went with the run


def test_runs_on_one_cluster_take_turns(home: Path, tmp_path: Path) -> None:
    """A second run on a busy cluster waits its turn (says so, naming the run ahead; `runs` shows it
    queued), then runs once the first has ended; a third, queued, is taken out by `stop`."""
    import json

    assert ddpctl("up", "--nodes", "2").returncode == 0
    go = tmp_path / "go"  # the first run ends once the queue is seen
    first = start(
        "run", sleeper(tmp_path), "--nodes", "2", "--run-id", "turn1", "-e", "SLEEP_S=0", "-e", f"GO_FILE={go}"
    )
    first_out = Output(first)
    first_out.until("started rank 1", timeout=180)
    second = start("run", "message-passing", "--nodes", "2", "--run-id", "turn2")
    second_out = Output(second)
    said = second_out.until("waits its turn", timeout=120)
    assert "cluster 'default' is busy with `ddpctl run turn1 (sleeper)`" in said
    third = start("run", "message-passing", "--nodes", "2", "--run-id", "turn3")
    Output(third).until("waits its turn", timeout=120)
    runs = {r["run_id"]: r for r in json.loads(ddpctl("runs", "--json").stdout)["runs"]}
    assert runs["turn1"]["result"] == runs["turn1"]["state"] == "running"
    assert runs["turn2"]["result"].startswith("queued (behind `ddpctl run turn1 (sleeper)`")
    assert runs["turn2"]["state"] == "queued"
    stop = ddpctl("stop", "turn3", timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert third.wait(timeout=60) == 130
    assert "turn3" not in {r["run_id"] for r in json.loads(ddpctl("runs", "--json").stdout)["runs"]}
    go.touch()
    first_text = first_out.finish(timeout=300)
    assert first.returncode == 0, first_text
    second_text = second_out.finish(timeout=300)
    assert second.returncode == 0, second_text
    assert "its turn on 'default'" in second_text and "received 42.0 from rank 0" in second_text
    # the second started (recorded its options) only after the first had ended (recorded its result)
    started, ended = (home / "runs" / "turn2" / "options.json"), (home / "runs" / "turn1" / "run.json")
    assert started.stat().st_mtime >= ended.stat().st_mtime
    assert ddpctl("down").returncode == 0


def test_two_local_ups_of_one_name_make_one_cluster(home: Path) -> None:
    """Started together (three trials): one `up` makes the cluster, the other is refused in one
    line (busy, or already exists: whichever it meets), and exactly one cluster's nodes exist."""
    for _ in range(3):
        procs = [start("up", "--nodes", "2") for _ in range(2)]
        outputs = [p.communicate(timeout=120)[0] for p in procs]
        codes = [p.returncode for p in procs]
        assert sorted(codes) == [0, 1], outputs
        loser = outputs[codes.index(1)].strip()
        assert "\n" not in loser and loser.startswith("Error: cluster 'default' "), loser
        assert "is busy: `ddpctl up` (pid" in loser or "already exists" in loser, loser
        assert sorted(p.name for p in (home / "clusters" / "default").iterdir()) == ["node0", "node1", "shared"]
        assert ddpctl("down").returncode == 0
        assert not (home / "clusters" / "default").exists()


def test_two_ups_of_one_name_make_one_cluster(moto: Moto, home: Path, tmp_path: Path) -> None:
    env = moto.env(home, tmp_path)
    baseline = moto.inventory()
    args = ("up", "--provider", "aws", "--name", "twice", "--ssh-cidr", "203.0.113.7/32", "--yes", "--no-configure")
    first, second = start(*args, env=env), start(*args, env=env)
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes == [0, 1], outputs
    loser = outputs[[first.returncode, second.returncode].index(1)]
    assert "cluster 'twice' is busy: `ddpctl up` (pid" in loser or "cluster 'twice' already exists" in loser, loser
    made = moto.inventory()
    assert len(made["instances"]) == 1 and len(made["vpcs"] - baseline["vpcs"]) == 1, made
    down = ddpctl("down", "--name", "twice", "--yes", env=env, timeout=300)
    assert down.returncode == 0, down.stderr
    assert moto.inventory() == baseline
