"""`ddpctl logs` and `ddpctl ssh` (issue 15): a run's output read back from its record, filtered
and followed, on real local runs; the ssh command line built from a node's SSH details (run over
SSH on the test cluster in tests/integration/test_onprem.py).

Its pure tests (no process beyond Python) are in tests/unit/test_access.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpctl.infra.hosts.ssh_options import resolve
from ddpctl.infra.model.host import Host
from ddpctl.infra.runs import metrics as run_metrics
from tests.support.cli import ddpctl


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One message-passing run on 2 local nodes (2 ranks each), shared by the tests below."""
    env = {**os.environ, "DDPCTL_HOME": str(tmp_path_factory.mktemp("logs") / "home")}
    args = ("run", "message-passing", "--nodes", "2", "--nproc-per-node", "2", "--run-id", "rlogs00001")
    result = ddpctl(*args, env=env)
    assert result.returncode == 0, result.stderr
    return env


def test_logs_of_the_last_run(finished_run: dict[str, str]) -> None:
    result = ddpctl("logs", env=finished_run)
    assert result.returncode == 0, result.stderr
    for rank in (1, 2, 3):
        node = rank // 2
        assert f"[node{node} r{rank}] rank {rank} received 42.0 from rank 0" in result.stdout


def test_logs_filtered_by_node_rank_and_tail(finished_run: dict[str, str]) -> None:
    lines = ddpctl("logs", "rlogs00001", "--rank", "3", env=finished_run).stdout.splitlines()
    assert lines and all(line.startswith("[node1 r3] ") for line in lines)
    lines = ddpctl("logs", "--node", "node0", env=finished_run).stdout.splitlines()
    assert {line.split()[0] for line in lines} == {"[node0"}
    assert len(ddpctl("logs", "--tail", "2", env=finished_run).stdout.splitlines()) == 2


def test_logs_as_json(finished_run: dict[str, str]) -> None:
    doc = json.loads(ddpctl("logs", "--json", "--rank", "0", env=finished_run).stdout)
    assert doc["ok"] and doc["run_id"] == "rlogs00001"
    assert doc["lines"] and {(line["node"], line["rank"]) for line in doc["lines"]} == {("node0", 0)}


def test_logs_of_an_unknown_run(finished_run: dict[str, str]) -> None:
    result = ddpctl("logs", "rnothere01", env=finished_run)
    assert result.returncode == 2
    assert "run 'rnothere01' has no output" in result.stderr and "(recent: rlogs00001)" in result.stderr


def test_logs_and_metrics_follow_a_live_run(home: Path) -> None:
    """`logs --follow` and `metrics --follow` started while another ddpctl runs: they print the run's
    lines as they come and return when the run ends; its metric lines come into the record while it
    runs (DDPCTL_METRICS_EVERY_S=1 here, 5 by default)."""
    run = subprocess.Popen(
        [sys.executable, "-m", "ddpctl", "run", "mnist", "--nodes", "2", "--run-id", "rfollow001"]
        + ["--", "--epochs", "1", "--log-every", "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DDPCTL_METRICS_EVERY_S": "1"},
    )
    metrics_follow = None
    try:
        assert run.stdout is not None
        for line in run.stdout:  # started: its record exists
            if "step 10 |" in line:
                break
        metrics_follow = subprocess.Popen(
            [sys.executable, "-m", "ddpctl", "metrics", "rfollow001", "--follow", "--last", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        record = home / "runs" / "rfollow001" / "metrics.jsonl"
        while run.poll() is None and not (record.is_file() and '"kind": "step"' in record.read_text()):
            time.sleep(0.2)
        assert run.poll() is None, "the run ended before a metric line came into its record"
        follow = ddpctl("logs", "rfollow001", "--follow", "--rank", "0", timeout=300)
        assert follow.returncode == 0, follow.stderr
        assert "[node0 r0] step 10 |" in follow.stdout
        assert "held-out accuracy" in follow.stdout  # the end of the run, written after `logs` started
        assert run.wait(timeout=60) == 0
        printed, err = metrics_follow.communicate(timeout=120)
        assert metrics_follow.returncode == 0, err
        said = printed.splitlines()
        assert said[0].startswith("step | step 1 | epoch 1 | loss ") and " samples/s" in said[1]
        assert said[-1].startswith("epoch | step ") and "| accuracy " in said[-1]  # written after it started
        lines = json.loads(ddpctl("metrics", "rfollow001", "--json").stdout)["lines"]
        assert said == [run_metrics.line_text(d) for d in lines]  # each line once, in order
    finally:
        for proc in (run, metrics_follow):
            if proc is not None and proc.poll() is None:
                proc.kill()


def test_openssh_resolves_what_the_inventory_hands_it(tmp_path: Path) -> None:
    """`ssh -G` reads the options as OpenSSH would connect: the config's alias, its ProxyJump and
    known_hosts files, the inventory's user winning over the config's (as with Ansible)."""
    key, known = tmp_path / "id_test", tmp_path / "known"
    key.write_text("k")
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host alias\n  HostName 10.1.2.3\n  User bob\n  Port 2200\n  IdentityFile {key}\n"
        f"  ProxyJump jump1,carol@jump2:2222\n  UserKnownHostsFile {known}\n"
    )
    r = resolve(Host("n", "alias", user="alice", ssh_args=("-F", str(config))))
    assert (r.hostname, r.user, r.port) == ("10.1.2.3", "alice", 2200)
    assert r.identity_files == (str(key),) and str(known) in r.known_hosts
    assert r.proxy_jump == "jump1,carol@jump2:2222" and r.proxy_command is None
    r = resolve(Host("n", "alias", port=2022, ssh_args=("-F", str(config), "-o", "ProxyCommand=nc %h %p")))
    assert r.port == 2022 and r.user == "bob" and r.proxy_command == "nc %h %p"


def test_ssh_refusals(home: Path) -> None:
    result = ddpctl("ssh")
    assert result.returncode == 1 and "no cluster is up" in result.stderr
    assert ddpctl("up", "--nodes", "2").returncode == 0
    try:
        result = ddpctl("ssh", "node1")
        assert result.returncode == 2 and "node1 of cluster 'default' is this machine (no SSH)" in result.stderr
        result = ddpctl("ssh", "node7")
        assert result.returncode == 2 and "its nodes are node0, node1" in result.stderr
    finally:
        assert ddpctl("down").returncode == 0
