"""Results survive `down` (issue 29): which runs' outputs exist only on a cluster, the question a
billed cluster's `down` asks about them, copying them into the runs' records, `ddpctl download`,
and each run's cost in `ddpctl runs`.

The planning is tested as values; the copy for real on a local cluster here (a real run, `download`,
then `down`), and over SSH from the EC2 twin's head node in tests/integration/test_aws_twin.py (an mnist run's
snapshot comes back on `download` and on `down`).

Its pure tests (no process beyond Python) are in tests/unit/test_down_keeps.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from ddpctl.infra import node_programs
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers import get_provider
from ddpctl.infra.runs.options import RunOptions
from tests.support.cli import ddpctl
from tests.support.down_keeps import aws_state
from tests.support.specs import cluster_spec


def write_run(home: Path, run_id: str, *, cluster: str = "c1", cluster_id: str = "cid1", **extra) -> Path:
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    doc = {"options": RunOptions(job="mnist").to_dict(), "cluster": cluster, "ephemeral": False}
    doc |= {"cluster_id": cluster_id, **extra}
    (run_dir / "options.json").write_text(json.dumps(doc))
    return run_dir


def test_a_billed_down_with_no_terminal_refuses_naming_the_outputs(home: Path, tmp_path: Path) -> None:
    """The whole path to the question, with the head node's folder on this machine (no SSH, no AWS
    call: the refusal comes before either)."""
    store = StateStore(home)
    work = tmp_path / "work"
    (work / "runs" / "r1").mkdir(parents=True)
    (work / "runs" / "r1" / "snapshot.pt").write_bytes(b"x" * 2500)
    state = aws_state(str(work), ssh=False, nodes=1)
    state.created_at = 0.0
    store.save(state)
    write_run(home, "r1")
    write_run(home, "r2")  # wrote nothing: not named
    refused = ddpctl("down", stdin=subprocess.DEVNULL)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "Error: take down aws cluster 'c1' (1 node(s)) and delete all it made; run outputs only on the cluster: "
        f"run r1 (2.5 kB), copied first into {home / 'runs'}/<run id>/outputs (--no-keep-outputs skips that): "
        "add --yes to go ahead (stdin is not a terminal, so ddpctl cannot ask)"
    ]
    refused = ddpctl("down", "--no-keep-outputs", stdin=subprocess.DEVNULL)
    assert "run r1 (2.5 kB), deleted with it (--no-keep-outputs): add --yes" in refused.stderr
    assert store.exists("c1") and not (home / "runs" / "r1" / "outputs").exists()  # nothing done


def test_runs_shows_the_cost(home: Path) -> None:
    run_dir = write_run(home, "r1", node_usd_per_hour=3.06, nodes_used=2)
    (run_dir / "run.json").write_text(json.dumps({"result": {"exit_code": 0, "wall_s": 1800.0}}))
    doc = json.loads(ddpctl("runs", "--json").stdout)
    assert doc["runs"][0]["cost_usd"] == 3.06 and doc["runs"][0]["duration_s"] == 1800.0
    table = ddpctl("runs", env={**os.environ, "COLUMNS": "200"}).stdout
    assert "cost" in table and "$3.06" in table


# ---- the node program -----------------------------------------------------------------------------


def test_outputs_program_sizes_and_tar(tmp_path: Path) -> None:
    folder = tmp_path / "r1"
    (folder / "sub").mkdir(parents=True)
    (folder / "snapshot.pt").write_bytes(b"x" * 100)
    (folder / "sub" / "a.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    program = [sys.executable, "-c", node_programs.source("outputs")]
    sizes = subprocess.run(
        [*program, "sizes", str(folder), str(tmp_path / "empty"), str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(sizes.stdout) == [[105, 2], None, None]
    stream = subprocess.run([*program, "tar", str(folder)], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r|") as archive:
        assert sorted(m.name for m in archive if m.isfile()) == ["snapshot.pt", "sub/a.txt"]
    missing = subprocess.run([*program, "tar", str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.strip() == f"{tmp_path / 'nope'} is not a folder"


# ---- for real, on a local cluster: a run, `download`, `down` ------------------------------------------

WRITER = """\
import os, pathlib
folder = pathlib.Path(os.environ["DDPCTL_SNAPSHOT_DIR"])
if os.environ.get("RANK") == "0":
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "snapshot.pt").write_bytes(b"w" * 3000)
    (folder / "sub" / "notes.txt").write_text("epoch 1")
"""


def test_download_then_down_keeps_a_local_runs_outputs(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    assert ddpctl("up", "--name", "keep").returncode == 0
    run = ddpctl("run", str(script), "--name", "keep", "--run-id", "w1")
    assert run.returncode == 0, run.stderr
    got = ddpctl("download", "w1", "--to", str(tmp_path / "dl"), "--json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["dest"] == str(tmp_path / "dl" / "w1") and doc["files"] == 2 and doc["size_bytes"] == 3007
    assert (tmp_path / "dl" / "w1" / "sub" / "notes.txt").read_text() == "epoch 1"
    again = ddpctl("download", "w1", "--to", str(tmp_path / "dl"))  # the user's folder is never replaced
    assert again.returncode == 2 and "already exists" in again.stderr, again.stderr
    assert (tmp_path / "dl" / "w1" / "sub" / "notes.txt").read_text() == "epoch 1"
    listed = json.loads(ddpctl("runs", "--json").stdout)["runs"]
    assert listed[0]["cost_usd"] is None and listed[0]["outputs"] == ""  # local: not billed, nothing kept yet

    down = ddpctl("down", "--name", "keep", stdin=subprocess.DEVNULL)  # not billed: nothing to ask
    assert down.returncode == 0, down.stderr
    kept = home / "runs" / "w1" / "outputs"
    assert f"keeping run w1's outputs (3.0 kB, 2 file(s)) in {kept}" in down.stderr
    assert (kept / "snapshot.pt").read_bytes() == b"w" * 3000
    assert json.loads(ddpctl("runs", "--json").stdout)["runs"][0]["outputs"] == str(kept)
    # the cluster is gone: `download` copies what `down` kept
    again = ddpctl("download", "w1", "--to", str(tmp_path / "later"))
    assert again.returncode == 0 and "is down: copying its kept outputs" in again.stderr
    assert (tmp_path / "later" / "w1" / "sub" / "notes.txt").is_file()


def test_download_refusals(home: Path) -> None:
    result = ddpctl("download", "r0000000000")
    assert result.returncode == 2 and "no run 'r0000000000'" in result.stderr
    write_run(home, "r1", snapshot_dir="")
    (home / "runs" / "s3run").mkdir(parents=True)
    doc = {"options": RunOptions(job="mnist", snapshot_dir="s3://b/p").to_dict(), "cluster": "c1", "ephemeral": False}
    (home / "runs" / "s3run" / "options.json").write_text(json.dumps(doc))
    s3 = ddpctl("download", "s3run")
    assert s3.returncode == 2 and "`aws s3 cp --recursive s3://b/p DIR` fetches them" in s3.stderr
    gone = ddpctl("download", "r1")
    assert gone.returncode == 1 and "cluster 'c1' is down and kept none of its outputs" in gone.stderr


def unreachable_state(provider: str) -> ClusterState:
    """A cluster whose head node refuses connections (port 1 of this machine), one run recorded on it."""
    options = get_provider(provider).take_options({})
    inventory = "/nowhere/hosts.ini" if get_provider(provider).takes_inventory else ""
    spec = cluster_spec(name="c1", provider=provider, nodes=1, options=options, inventory=inventory)
    head = NodeInfo(name="node0", host="127.0.0.1", workdir="/tmp/w", ssh=Host("node0", "127.0.0.1", port=1))
    return ClusterState(spec=spec, cluster_id="cid1", status="up", nodes=[head], created_at=0.0)


def test_a_head_node_that_cannot_be_reached(home: Path) -> None:
    """Where the nodes go with the cluster (aws), `down` stops rather than lose what is on them, and
    says how to go on without; where they stay (onprem), it warns and goes on."""
    store = StateStore(home)
    write_run(home, "r1")
    store.save(unreachable_state("aws"))
    stopped = ddpctl("down", "--yes", stdin=subprocess.DEVNULL)
    assert stopped.returncode == 1 and store.exists("c1"), stopped.stderr
    assert (
        stopped.stderr.strip()
        .splitlines()[-1]
        .endswith(
            ": its runs' outputs cannot be kept; `ddpctl down --name c1 --no-keep-outputs` takes it down without them"
        )
    )
    store.delete("c1")
    store.save(unreachable_state("onprem"))
    went = ddpctl("down", stdin=subprocess.DEVNULL)
    assert went.returncode == 0, went.stderr
    assert "the runs' outputs there are not copied back" in went.stderr and not store.exists("c1")
