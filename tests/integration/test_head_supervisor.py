"""The run's supervisor on the head node (issue 28), on the on-prem test cluster: a run goes on and
finishes when every ddpctl here is SIGKILLed, and its record, log and exit status read later through
the head are right; fail fast and Ctrl-C behave as with the supervisor here."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, ended, run_results, start_ddpctl, wait_for_line
from tests.support.scripts import SLEEPER, SLOW
from tests.support.testbed.cluster import GROUP_VARS, Testbed, run_procs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("head")
    env = {**os.environ, "DDPCTL_HOME": str(tmp / "home"), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    inventory = testbed.inventory(tmp / "hosts.ini", **GROUP_VARS)
    up = ddpctl("up", "--provider", "onprem", "-i", str(inventory), env=env, timeout=600)
    assert up.returncode == 0, up.stderr
    script = tmp / "job" / "sleeper.py"
    script.parent.mkdir()
    script.write_text(SLEEPER)
    slow = tmp / "slow-job" / "slow.py"
    slow.parent.mkdir()
    slow.write_text(SLOW)
    state = {"env": env, "home": tmp / "home", "script": str(script), "slow": str(slow), "up": True}
    yield state
    if state["up"]:
        assert ddpctl("down", env=env).returncode == 0


def results(cluster) -> dict[str, str]:
    return run_results(cluster["env"])


def test_attached_run_survives_its_ddpctl_killed(cluster) -> None:
    run = start_ddpctl("run", cluster["script"], "--nodes", "2", "--run-id", "rhead00001", env=cluster["env"])
    wait_for_line(run, "started rank")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert ended(cluster["env"], "rhead00001") == "succeeded"
    logs = ddpctl("logs", "rhead00001", env=cluster["env"])
    assert "done rank 0" in logs.stdout and "done rank 1" in logs.stdout, logs.stdout + logs.stderr
    record = json.loads((Path(cluster["home"]) / "runs" / "rhead00001" / "run.json").read_text())
    assert record["result"]["exit_code"] == 0 and record["cluster"] == "default"
    # the killed ddpctl's hold on the cluster and its run slot went with it: the next run is not refused
    again = ddpctl("run", cluster["script"], "--nodes", "2", "-e", "SLEEP_S=0", env=cluster["env"], timeout=300)
    assert again.returncode == 0, again.stderr


def test_detached_run_survives_its_ddpctl_killed(cluster) -> None:
    """`--detach` returns once the head has the run: its ddpctl here SIGKILLed at once (a laptop shut
    down as soon as the command returned), the run still goes on there to its end."""
    args = ("run", cluster["script"], "--nodes", "2", "--run-id", "rhead00002", "--detach", "--json")
    started = ddpctl(*args, "-e", "SLEEP_S=10", env=cluster["env"])
    assert started.returncode == 0, started.stderr
    doc = json.loads(started.stdout)
    assert doc["where"] == "on-cluster", started.stderr
    assert "this machine may sleep or shut down" in started.stderr, started.stderr
    os.kill(doc["pid"], signal.SIGKILL)
    assert ended(cluster["env"], "rhead00002") == "succeeded"
    assert "done rank 1" in ddpctl("logs", "rhead00002", env=cluster["env"]).stdout


def test_fail_fast_on_the_head(cluster) -> None:
    args = ("run", cluster["slow"], "--nodes", "2", "--run-id", "rhead00003", "-e", "FAIL_RANK=1", "-e", "SLEEP_S=1")
    result = ddpctl(*args, env=cluster["env"])
    assert result.returncode == 1, result.stderr
    assert results(cluster)["rhead00003"].startswith("failed")


def test_ctrl_c_stops_the_run_on_the_head(cluster, testbed: Testbed) -> None:
    args = ("run", cluster["script"], "--nodes", "2", "--run-id", "rhead00004", "-e", "SLEEP_S=60")
    run = start_ddpctl(*args, env=cluster["env"])
    wait_for_line(run, "started rank")
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=120) == 130
    assert results(cluster)["rhead00004"] == "interrupted"
    for node in ("node0", "node1"):  # every rank stopped (the head's supervisor may still be exiting)
        assert [p for p in run_procs(testbed, node) if "head.pyz" not in p] == [], f"survivors on {node}"


def test_stop_through_the_head_once_ddpctl_was_killed(cluster) -> None:
    args = ("run", cluster["script"], "--nodes", "2", "--run-id", "rhead00005", "-e", "SLEEP_S=60")
    run = start_ddpctl(*args, env=cluster["env"])
    wait_for_line(run, "started rank")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert results(cluster)["rhead00005"] == "running"  # on the head, with no ddpctl here
    stopped = ddpctl("stop", "rhead00005", env=cluster["env"], timeout=120)
    assert stopped.returncode == 0 and "run rhead00005 stopped" in stopped.stderr, stopped.stderr
    assert results(cluster)["rhead00005"] == "interrupted"


def test_a_run_goes_on_while_the_route_to_the_cluster_is_cut(cluster, testbed: Testbed) -> None:
    """The controller cut off from the cluster for a minute mid-run (a sleeping laptop, a new
    network): the run goes on on the head, the attached ddpctl connects again once it can, follows
    the run to its end and exits with its status; the record is complete."""
    args = ("run", cluster["script"], "--nodes", "2", "--run-id", "rhead00016", "-e", "SLEEP_S=70")
    run = start_ddpctl(*args, env=cluster["env"])
    seen = wait_for_line(run, "started rank")
    with testbed.route_cut():
        time.sleep(60)
    rest, _ = run.communicate(timeout=600)
    output = "".join(seen) + rest
    assert run.returncode == 0, output
    assert "lost the connection to the head node" in output and "reconnected to the head node" in output
    assert "done rank 0" in output and "done rank 1" in output  # the lines written meanwhile, once each
    assert output.count("done rank 1") == 1
    assert results(cluster)["rhead00016"] == "succeeded"


def held_run(cluster, run_id: str, go: Path):
    """Run ``run_id`` attached, held on the head until ``go`` exists, its ddpctl here SIGKILLed once
    both ranks have started: it goes on on the head node with no ddpctl here."""
    args = ("run", cluster["script"], "--nodes", "2", "--run-id", run_id, "-e", "SLEEP_S=0", "-e", f"GO_FILE={go}")
    run = start_ddpctl(*args, env=cluster["env"])
    seen = wait_for_line(run, "started rank")
    if not any("started rank" in line for line in seen[:-1]):
        seen += wait_for_line(run, "started rank")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert results(cluster)[run_id] == "running"


def local_log(cluster, run_id: str) -> list[str]:
    return (Path(cluster["home"]) / "runs" / run_id / "output.log").read_text().splitlines()


def test_the_queue_waits_for_a_run_on_the_head(cluster, tmp_path: Path) -> None:
    """A run whose ddpctl was killed still has the cluster: the next run is refused with --no-wait,
    else queued behind it, and starts once it has ended (its record here brought up to date)."""
    held_run(cluster, "rhead00006", tmp_path / "go")
    args = ("run", cluster["script"], "--nodes", "2", "-e", "SLEEP_S=0")
    refused = ddpctl(*args, "--no-wait", env=cluster["env"], timeout=120)
    assert refused.returncode == 1, refused.stderr
    assert "busy with run rhead00006" in refused.stderr and "--no-wait" in refused.stderr, refused.stderr
    assert len([line for line in refused.stderr.splitlines() if line.startswith("Error")]) == 1, refused.stderr
    queued = start_ddpctl(*args, "--run-id", "rhead00007", env=cluster["env"])
    wait_for_line(queued, "waits its turn")
    doc = json.loads(ddpctl("runs", "--json", env=cluster["env"]).stdout)
    entry = next(r for r in doc["runs"] if r["run_id"] == "rhead00007")
    assert entry["state"] == "queued" and "rhead00006" in entry["result"], entry
    (tmp_path / "go").touch()
    rest = queued.stdout.read()
    assert queued.wait(timeout=300) == 0, rest
    assert "its turn on 'default'" in rest and "done rank 0" in rest, rest
    # the queue's last look at the head brought the run ahead's record here
    record = json.loads((Path(cluster["home"]) / "runs" / "rhead00006" / "run.json").read_text())
    assert record["result"]["exit_code"] == 0
    assert results(cluster)["rhead00006"] == "succeeded" and results(cluster)["rhead00007"] == "succeeded"


def test_logs_follow_through_the_head(cluster, tmp_path: Path) -> None:
    """`logs --follow` of a run whose ddpctl was killed: what there is, then the head's new lines
    until the run ends (also into output.log here, once each); Ctrl-C only stops following."""
    held_run(cluster, "rhead00008", tmp_path / "go")
    follow = start_ddpctl("logs", "rhead00008", "--follow", env=cluster["env"])
    wait_for_line(follow, "started rank")
    follow.send_signal(signal.SIGINT)
    follow.wait(timeout=60)
    assert results(cluster)["rhead00008"] == "running"  # the run goes on
    follow = start_ddpctl("logs", "rhead00008", "--follow", "--rank", "1", env=cluster["env"])
    wait_for_line(follow, "started rank 1")
    (tmp_path / "go").touch()
    rest = follow.stdout.read()
    assert follow.wait(timeout=120) == 0, rest
    assert "done rank 1" in rest and "rank 0" not in rest, rest
    record = json.loads((Path(cluster["home"]) / "runs" / "rhead00008" / "run.json").read_text())
    assert record["result"]["exit_code"] == 0
    log = local_log(cluster, "rhead00008")
    for line in ("started rank 0", "started rank 1", "done rank 0", "done rank 1"):
        assert sum(line in seen for seen in log) == 1, log


def test_resume_reattaches_to_a_run_on_the_head(cluster, tmp_path: Path) -> None:
    """`run --resume` of a run still going on the head: attached to again (not started again), its
    end recorded as an ordinary run's."""
    held_run(cluster, "rhead00009", tmp_path / "go")
    resumed = start_ddpctl("run", "--resume", "rhead00009", env=cluster["env"])
    wait_for_line(resumed, "attached to it again")
    (tmp_path / "go").touch()
    rest = resumed.stdout.read()
    assert resumed.wait(timeout=300) == 0, rest
    assert "done rank 0" in rest and "done rank 1" in rest, rest
    assert results(cluster)["rhead00009"] == "succeeded"
    log = local_log(cluster, "rhead00009")
    for line in ("started rank 0", "started rank 1", "done rank 0", "done rank 1"):  # started once: not again
        assert sum(line in seen for seen in log) == 1, log


def test_ctrl_c_of_a_reattached_run_stops_it(cluster, tmp_path: Path) -> None:
    held_run(cluster, "rhead00010", tmp_path / "go")  # not let go: only Ctrl-C ends it
    resumed = start_ddpctl("-v", "run", "--resume", "rhead00010", env=cluster["env"])
    wait_for_line(resumed, "attached to it again")
    resumed.send_signal(signal.SIGINT)
    rest = resumed.stdout.read()
    assert resumed.wait(timeout=120) == 130, rest
    assert results(cluster)["rhead00010"] == "interrupted", rest
    # resumed once more it starts again (it had ended); that ddpctl killed too, `runs` asks the head
    # about the new attempt instead of showing the last one's end
    again = start_ddpctl("run", "--resume", "rhead00010", env=cluster["env"])
    seen = wait_for_line(again, "started rank")
    if not any("started rank" in line for line in seen[:-1]):
        wait_for_line(again, "started rank")
    again.send_signal(signal.SIGKILL)
    again.wait(timeout=30)
    assert results(cluster)["rhead00010"] == "running"
    (tmp_path / "go").touch()
    assert ended(cluster["env"], "rhead00010") == "succeeded"


def test_down_removes_the_runs_on_the_head(cluster, testbed: Testbed, tmp_path: Path) -> None:
    """The head's run folders (in the cluster's own work dir) go with `down`, where the nodes stay (onprem)."""
    state = json.loads((cluster["home"] / "clusters" / "default.json").read_text())
    workdir = Path(state["nodes"][0]["workdir"])
    assert workdir.parent == testbed.node_dir("node0") / "work"  # the cluster's own folder under the root
    runs_on_head = workdir / "head-runs"
    assert (runs_on_head / "rhead00001" / "run.json").is_file()
    # a run whose ddpctl here is gone goes on on the head: `down` refuses while it goes on (never
    # under a run); once it ended there, with no command here asking, `down` brings its log and
    # record here first (issue 37: they went with the head, and so with autodown's)
    held_run(cluster, "rhead00019", tmp_path / "go")
    refused = ddpctl("down", env=cluster["env"])
    assert refused.returncode == 1 and "has run rhead00019 going on on it" in refused.stderr, refused.stderr
    assert "`ddpctl stop rhead00019`" in refused.stderr.strip().splitlines()[-1]
    (tmp_path / "go").touch()
    deadline = time.monotonic() + 240
    while not (runs_on_head / "rhead00019" / "run.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not (cluster["home"] / "runs" / "rhead00019" / "run.json").exists()  # nothing here knows it ended
    down = ddpctl("down", env=cluster["env"])
    assert down.returncode == 0, down.stderr
    cluster["up"] = False
    assert not runs_on_head.exists()
    record = json.loads((cluster["home"] / "runs" / "rhead00019" / "run.json").read_text())
    assert record["result"]["exit_code"] == 0
    assert "done rank 1" in "\n".join(local_log(cluster, "rhead00019"))
    assert run_results(cluster["env"])["rhead00019"] == "succeeded"


def test_the_head_bundle_needs_only_the_standard_library(tmp_path: Path) -> None:
    """What runs on the head imports nothing but the standard library (a node's system Python)."""
    import subprocess

    from ddpctl.infra.launch import head

    bundle = tmp_path / "head.pyz"
    bundle.write_bytes(head.bundle())
    check = f"import sys; sys.path.insert(0, {str(bundle)!r}); import ddpctl_head.launch.head_agent"
    result = subprocess.run(["/usr/bin/python3", "-I", "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


FAKE_SSH = """#!/bin/bash
# ssh [-T] [-F CONFIG] HOST COMMAND, run here
while [[ "$1" == -* ]]; do if [[ "$1" == -F ]]; then shift; fi; shift; done
exec bash -c "$2"
"""


def head_program(tmp_path: Path, run_id: str, commands: list[str], **extra: object) -> tuple[list[str], dict, Path]:
    """The head's program, ready to run here (argv, env, its folder), with ``ssh`` a local stand-in
    and each node's command run under the run's markers."""
    from ddpctl.infra.launch import head
    from ddpctl.infra.node_programs import command

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ssh").write_text(FAKE_SSH)
    (tmp_path / "bin" / "ssh").chmod(0o755)
    (tmp_path / "head.pyz").write_bytes(head.bundle())
    marker = f"DDPCTL_RUN_ID={run_id}"
    nodes = [
        {"node": f"n{i}", "host": f"n{i}", "command": f"exec env {marker} DDPCTL_NODE=n{i} bash -c {c!r}", "secret": ""}
        for i, c in enumerate(commands)
    ]
    spec = {"run_id": run_id, "cluster": "", "plan": {}, "ssh_config": "", "store": None, "min_nodes": 0}
    spec |= {"grace_s": 1, "stop_command": command("python3", "stop"), "nodes": nodes}
    spec |= {"run_key": "DDPCTL_RUN_ID", "node_key": "DDPCTL_NODE", "store_key": "DDPCTL_RDZV_STORE"}
    spec |= extra
    folder = tmp_path / run_id
    folder.mkdir()
    (folder / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    return ["/usr/bin/python3", str(tmp_path / "head.pyz"), str(folder)], env, folder


def marked(run_id: str) -> list[int]:
    """Processes here that carry the run's marker (alive, not zombies)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"\0DDPCTL_RUN_ID={run_id}\0".encode() in b"\0" + environ + b"\0" and state != "Z":
            found.append(int(proc.name))
    return found


@pytest.mark.parametrize(
    ("run_id", "commands", "exit_code", "statuses"),
    [
        ("rheadok", ["echo '[rank0]:hi'", "echo '[rank1]:hi'"], 0, ["ok", "ok"]),
        ("rheadfail", ["sleep 60", "sleep 1; exit 3"], 1, ["stopped", "failed"]),  # fail fast on the head
    ],
)
def test_the_head_agent_supervises_over_ssh(tmp_path: Path, run_id, commands, exit_code, statuses) -> None:
    """The head's program itself, with ``ssh`` a local stand-in: the agents' lines in its
    output.log, and its run.json, for a run that succeeds and one where a node fails."""
    import subprocess

    argv, env, folder = head_program(tmp_path, run_id, commands)
    done = subprocess.run(argv, env=env, timeout=120)
    assert done.returncode == 0
    result = json.loads((folder / "run.json").read_text())["result"]
    assert result["exit_code"] == exit_code and [n["status"] for n in result["nodes"]] == statuses
    assert not (folder / "spec.json").exists()  # it held the secrets' values
    if exit_code == 0:
        assert sorted((folder / "output.log").read_text().splitlines()) == ["[n0 r0] hi", "[n1 r1] hi"]


def test_the_head_agent_stops_the_run_on_sigint(tmp_path: Path) -> None:
    """Ctrl-C of an attached ``ddpctl run`` reaches the head's program as SIGINT (``head_attach.attach``):
    every node's processes stopped, exit 130 and interrupted in its run.json."""
    import subprocess

    commands = ["echo '[rank0]:started'; sleep 600", "echo '[rank1]:started'; sleep 600"]
    argv, env, folder = head_program(tmp_path, "rheadint", commands)
    # started in a session of its own with SIGINT ignored, as `setsid nohup ... &` starts it on the head
    agent = subprocess.Popen(
        argv, env=env, start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    )
    try:
        log = folder / "output.log"
        deadline = time.monotonic() + 120
        while (log.read_text() if log.exists() else "").count("started") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(marked("rheadint")) >= 2  # both nodes' commands run
        os.kill(int((folder / "pid").read_text()), signal.SIGINT)
        assert agent.wait(timeout=120) == 0
    finally:
        agent.kill()
    result = json.loads((folder / "run.json").read_text())["result"]
    assert result["exit_code"] == 130 and result["interrupted"], result
    assert [n["status"] for n in result["nodes"]] == ["stopped", "stopped"]
    assert marked("rheadint") == []


def test_the_head_agent_names_a_hung_run_and_ends_it(tmp_path: Path) -> None:
    """A hung run on the head (issue 38): rank 1 beats once then stops itself (SIGSTOP), rank 0 waits;
    after the hang timeout the head's program looks at each node over ``ssh`` (``stop.py look``), ends
    the run, and its run.json says who: rank 1 on n1, stopped. Nothing of the run is left."""
    import subprocess

    script = tmp_path / "rank.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "print('[rank%s]:DDPCTL_BEAT {\"step\": 1}' % os.environ['RANK'], flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSTOP) if sys.argv[1] == 'stop' else time.sleep(600)\n"
    )
    commands = [f"exec env RANK={r} LOCAL_RANK=0 python3 {script} {how}" for r, how in ((0, "wait"), (1, "stop"))]
    argv, env, folder = head_program(tmp_path, "rheadhung", commands, hang_timeout_s=5)
    done = subprocess.run(argv, env=env, timeout=180)  # liveness: named after 5 s and the stacks' 5 s
    assert done.returncode == 0
    result = json.loads((folder / "run.json").read_text())["result"]
    assert result["cause"] == "hung" and result["failed_node"] == "n1", result
    assert result["hint"].startswith("hung: rank 1 on n1 is stopped (T)"), result["hint"]
    log = (folder / "output.log").read_text()
    assert "rank 1 on n1 (pid " in log and "DDPCTL_BEAT" not in log, log
    assert marked("rheadhung") == []
