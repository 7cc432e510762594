"""`ddpctl check`'s health part (issue 38) for real: GPUs in every state a test wants from a stand-in
nvidia-smi (and dmesg) first on a node's PATH (tests/support/sick_gpus.py), the node programs run by
the cluster's own executor. On the test cluster (one `up` for the module, the stand-ins changed
between checks): a node whose nvidia-smi lists fewer GPUs than configure counted, one with
uncorrected ECC errors, one with an Xid, one whose clocks are thermally held down, each named with
its reason on one line while the healthy ones pass, exit 1; and `run --healthy-only` leaving the
unhealthy nodes out of an elastic run, or refusing in one line; a run the head node supervises, with no
ddpctl attached, that fails on a sick node: its health asked there, in its record; one that succeeds, its
nodes asked on its `--health-every` timer there: the sick one in its record. On local nodes: each judged on
its own share of the machine's GPUs. The ranks see no GPU here: the burn says so, a note, not a failure."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, ended
from tests.support.clusters import UpCluster, onprem_up
from tests.support.local_gpus import machine
from tests.support.scripts import SLEEPER
from tests.support.sick_gpus import THERMAL, gpu, install, xid
from tests.support.testbed.cluster import GROUP_VARS, Testbed

NODES = ("node0", "node1", "node2")
CHECK = ("check", "--no-bandwidth", "--burn-seconds", "1")


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}


@pytest.fixture(scope="module")
def two_gpus_each(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory):
    """The 3-node test cluster, up with 2 healthy stand-in GPUs on each node (configure counts 2)."""
    tmp = tmp_path_factory.mktemp("health")
    env = {"DDPCTL_HOME": str(tmp / "home"), "ANSIBLE_HOME": str(tmp / "ansible-home")}
    for node in NODES:
        install(testbed.node_dir(node) / "bin", [gpu(0), gpu(1)])
    inventory = testbed.inventory(tmp / "hosts.ini", **GROUP_VARS)
    up = onprem_up(inventory, _env(env))
    assert [n["gpus"] for n in json.loads(up.stdout)["cluster"]["nodes"]] == [2, 2, 2]
    yield UpCluster(env=env, up=up, tmp=tmp, inventory=inventory)
    down = ddpctl("down", env=_env(env))
    assert down.returncode == 0, down.stderr


def checked(cluster: UpCluster) -> tuple[dict, str]:
    """`check --json` (its per-node verdicts) and `check`'s text (its lines on stderr); both exit 1."""
    doc = ddpctl(*CHECK, "--json", env=_env(cluster.env), timeout=300)
    text = ddpctl(*CHECK, env=_env(cluster.env), timeout=300)
    assert doc.returncode == 1 and text.returncode == 1, doc.stderr + text.stderr
    return json.loads(doc.stdout), text.stderr


def verdicts_of(cluster: UpCluster, exit_code: int) -> dict:
    """`check --json` without the burn (torch imported on every node: the first check shows the burn's
    note): its document, the exit code as asked."""
    doc = ddpctl(*CHECK[:-1], "0", "--json", env=_env(cluster.env), timeout=300)
    assert doc.returncode == exit_code, doc.stderr
    return json.loads(doc.stdout)


def started_on_the_head(cluster: UpCluster, run_id: str) -> Path:
    """The run's output.log here once a rank has said it started (the detached ddpctl has started the run on
    the head: killed before, it would leave no run there)."""
    log = cluster.tmp / "home" / "runs" / run_id / "output.log"
    deadline = time.monotonic() + 120
    while "started rank" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)
    return log


@pytest.mark.slow
def test_each_sick_node_is_named_with_its_reason(two_gpus_each: UpCluster, testbed: Testbed) -> None:
    bins = {node: testbed.node_dir(node) / "bin" for node in NODES}
    # node1 lost a GPU since configure; node2's GPU 1 has uncorrected ECC errors
    install(bins["node1"], [gpu(0)])
    install(bins["node2"], [gpu(0), gpu(1, ecc=4)])
    doc, text = checked(two_gpus_each)
    assert doc["ok"] is False and doc["unhealthy"] == ["node1", "node2"]
    verdicts = {v["node"]: v for v in doc["health"]}
    assert verdicts["node0"]["ok"] and verdicts["node0"]["gpus_found"] == 2
    assert verdicts["node1"]["problems"] == ["nvidia-smi lists 1 GPU(s), configure counted 2"]
    assert verdicts["node2"]["problems"] == ["GPU 1: 4 uncorrected ECC error(s) since the driver loaded"]
    assert any(note.startswith("burn not run:") for note in verdicts["node0"]["notes"])  # no GPU torch can use
    lines = text.splitlines()
    assert "node0: healthy (2 GPU(s))" in lines
    assert "node1: unhealthy: nvidia-smi lists 1 GPU(s), configure counted 2" in lines
    assert "node2: unhealthy: GPU 1: 4 uncorrected ECC error(s) since the driver loaded" in lines
    assert lines[-1] == "unhealthy: node1, node2"

    # then node1's GPU 0 fell off the bus (Xid 79), node2's GPU 0 is thermally held down; node0 as it was
    install(bins["node1"], [gpu(0), gpu(1)], [xid(0, 79, "GPU has fallen off the bus.")])
    install(bins["node2"], [gpu(0, reasons=THERMAL), gpu(1)])
    doc = verdicts_of(two_gpus_each, 1)
    verdicts = {v["node"]: v for v in doc["health"]}
    assert doc["unhealthy"] == ["node1", "node2"] and verdicts["node0"]["ok"]
    assert verdicts["node1"]["problems"] == ["GPU 0: Xid 79 (pid=4242, name=python, GPU has fallen off the bus.)"]
    assert verdicts["node2"]["problems"] == ["GPU 0: clocks held down: HW Thermal Slowdown"]

    # healthy again: exit 0
    for node in ("node1", "node2"):
        install(bins[node], [gpu(0), gpu(1)], [])
    assert verdicts_of(two_gpus_each, 0)["unhealthy"] == []


@pytest.mark.slow
def test_a_run_on_the_head_with_no_ddpctl_attached_records_the_failed_nodes_health(
    two_gpus_each: UpCluster, testbed: Testbed, tmp_path: Path
) -> None:
    """Detached, its ddpctl here killed once a rank started: the head's supervisor asks node1 (whose rank
    failed) for its GPUs' health as the run ends; `runs`, bringing the record here, names it unhealthy."""
    script = tmp_path / "job" / "sleeper.py"
    script.parent.mkdir()
    script.write_text(SLEEPER)
    node1 = testbed.node_dir("node1") / "bin"
    install(node1, [gpu(0), gpu(1, ecc=2)])
    run = ("run", str(script), "--nodes", "2", "--nproc-per-node", "1", "--run-id", "rheadsick1", "--detach", "--json")
    try:
        started = ddpctl(*run, "-e", "FAIL_RANK=1", "-e", "SLEEP_S=5", env=_env(two_gpus_each.env), timeout=300)
        assert started.returncode == 0, started.stderr
        log = started_on_the_head(two_gpus_each, "rheadsick1")
        os.kill(json.loads(started.stdout)["pid"], signal.SIGKILL)  # no ddpctl attached from here on
        result = ended(_env(two_gpus_each.env), "rheadsick1")
        assert result.startswith("failed") and result.endswith("; unhealthy: node1"), result
        record = json.loads((log.parent / "run.json").read_text())["result"]
        assert record["health"] == ["node1: unhealthy: GPU 1: 2 uncorrected ECC error(s) since the driver loaded"]
        assert "probes" not in record  # judged here, not kept
        logs = ddpctl("logs", "rheadsick1", env=_env(two_gpus_each.env)).stdout
        assert "health: asking node1, named by the run" in logs, logs
    finally:
        install(node1, [gpu(0), gpu(1)])


@pytest.mark.slow
def test_a_run_on_the_head_with_no_ddpctl_attached_looks_at_its_nodes_on_its_timer(
    two_gpus_each: UpCluster, testbed: Testbed, tmp_path: Path
) -> None:
    """`--health-every 10`, detached, its ddpctl here killed once a rank started: the run succeeds and names
    no node, but the head's supervisor asked its GPU nodes every 10 s while it went; node1's ECC errors are
    in its record."""
    script = tmp_path / "job" / "sleeper.py"
    script.parent.mkdir()
    script.write_text(SLEEPER)
    node1 = testbed.node_dir("node1") / "bin"
    install(node1, [gpu(0), gpu(1, ecc=2)])
    run = ("run", str(script), "--nodes", "2", "--nproc-per-node", "1", "--run-id", "rheadtimer", "--detach")
    try:
        started = ddpctl(*run, "--health-every", "10", "--json", "-e", "SLEEP_S=25", env=_env(two_gpus_each.env))
        assert started.returncode == 0, started.stderr
        started_on_the_head(two_gpus_each, "rheadtimer")
        os.kill(json.loads(started.stdout)["pid"], signal.SIGKILL)  # no ddpctl attached from here on
        result = ended(_env(two_gpus_each.env), "rheadtimer")
        assert result == "succeeded; unhealthy: node1", result
        record = json.loads((two_gpus_each.tmp / "home" / "runs" / "rheadtimer" / "run.json").read_text())["result"]
        assert record["health"] == ["node1: unhealthy: GPU 1: 2 uncorrected ECC error(s) since the driver loaded"]
        assert "looks" not in record and "probes" not in record  # judged here, not kept
        logs = ddpctl("logs", "rheadtimer", env=_env(two_gpus_each.env)).stdout
        assert "health: asking node0, node1 every 10 s" in logs, logs
    finally:
        install(node1, [gpu(0), gpu(1)])


@pytest.mark.slow
def test_a_run_leaves_the_unhealthy_nodes_out(two_gpus_each: UpCluster, testbed: Testbed) -> None:
    """`run --healthy-only --nodes 2:3` with the head node (node0) sick starts on node1 and node2, node1
    its head; with node1 sick too, one line naming both, and nothing started."""
    bins = {node: testbed.node_dir(node) / "bin" for node in NODES}
    run = ("run", "message-passing", "--nodes", "2:3", "--nproc-per-node", "1", "--healthy-only")
    install(bins["node0"], [gpu(0), gpu(1, ecc=1)])
    try:
        result = ddpctl(*run, env=_env(two_gpus_each.env), timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert (
            "--healthy-only: left out node0: unhealthy: GPU 1: 1 uncorrected ECC error(s) since the driver loaded"
            in result.stderr.splitlines()
        )
        ok = [line.split()[0] for line in result.stdout.splitlines() if "all_reduce OK" in line]
        assert sorted(ok) == ["[node1", "[node2"], result.stdout  # world size 2, on the healthy nodes
        install(bins["node1"], [gpu(0)])
        refused = ddpctl(*run, env=_env(two_gpus_each.env), timeout=300)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1] == (
            "Error: --healthy-only: 1 healthy node(s) of 3 in cluster 'default', 2 needed (--nodes 2:3); unhealthy: "
            "node0 (GPU 1: 1 uncorrected ECC error(s) since the driver loaded), "
            "node1 (nvidia-smi lists 1 GPU(s), configure counted 2)"
        )
        assert "all_reduce" not in refused.stdout
    finally:
        for node in ("node0", "node1"):
            install(bins[node], [gpu(0), gpu(1)])


def test_local_nodes_are_judged_on_their_own_gpus(home: Path, tmp_path: Path) -> None:
    """Two local nodes split 4 GPUs (0,1 and 2,3): GPU 2's ECC errors make node1 unhealthy; an
    application's Xid 13 on GPU 1 is node0's note only (the kernel log is the machine's)."""
    env = machine(tmp_path, 4)
    assert ddpctl("up", "--nodes", "2", env=env).returncode == 0
    install(tmp_path / "bin", [gpu(0), gpu(1), gpu(2, ecc=2), gpu(3)], [xid(1, 13, "Graphics SM Warp Exception")])
    try:
        result = ddpctl(*CHECK, "--json", env=env, timeout=300)
    finally:
        assert ddpctl("down", env=env).returncode == 0
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    verdicts = {v["node"]: v for v in doc["health"]}
    assert doc["unhealthy"] == ["node1"] and verdicts["node0"]["ok"]
    assert verdicts["node1"]["problems"] == ["GPU 2: 2 uncorrected ECC error(s) since the driver loaded"]
    assert (
        "GPU 1: Xid 13 (pid=4242, name=python, Graphics SM Warp Exception): most often the application's own error"
        in (verdicts["node0"]["notes"])
    )
    assert not any("Xid" in note for note in verdicts["node1"]["notes"])


def test_a_run_that_fails_on_a_sick_node_says_why(home: Path, tmp_path: Path) -> None:
    """A run whose rank on node1 fails, node1's GPU 2 fallen off the bus since `up` (Xid 79): the run's end
    looks at node1's health (only node1: the node it named) and says why, in its summary, `run --json` and
    `runs`; the same run on healthy GPUs says nothing more than that it looked."""
    env = machine(tmp_path, 4)
    script = tmp_path / "fails_on_rank1.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    run = ("run", str(script), "--nodes", "2", "--nproc-per-node", "1")
    assert ddpctl("up", "--nodes", "2", env=env).returncode == 0
    try:
        healthy = ddpctl(*run, "--run-id", "rhealthy01", env=env, timeout=300)
        assert healthy.returncode == 1 and "unhealthy" not in healthy.stderr, healthy.stderr
        assert "health: looking at node1, named by the run" in healthy.stderr  # and found it healthy
        install(tmp_path / "bin", [gpu(i) for i in range(4)], [xid(2, 79, "GPU has fallen off the bus.")])
        sick = ddpctl(*run, "--run-id", "rsick00001", "--json", env=env, timeout=300)
        runs = ddpctl("runs", "--json", env=env)
    finally:
        assert ddpctl("down", env=env).returncode == 0
    assert sick.returncode == 1, sick.stderr
    line = "node1: unhealthy: GPU 2: Xid 79 (pid=4242, name=python, GPU has fallen off the bus.)"
    assert json.loads(sick.stdout)["result"]["health"] == [line]
    assert f"health: {line}" in " ".join(sick.stderr.split())  # the summary (folded to the terminal's width)
    [row] = [r for r in json.loads(runs.stdout)["runs"] if r["run_id"] == "rsick00001"]
    assert row["result"].endswith("; unhealthy: node1"), row
