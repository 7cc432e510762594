"""One damaged field is one line (issue 42), with the real CLI: the audit's inputs
(../shared/audits/reliability-turn4.md), each a row.

- a cluster's state file with one damaged field (I4, I6, I11, I19, I20): `status` lists the healthy
  cluster beside it and it as damaged, naming the field and the `down` line that works; `status
  --json` is strict JSON; `run` is one Error line; that `down` line, as written, takes it down and
  leaves the other cluster; a cluster with no nodes (I15) says so, not `--nodes 0`;
- a run's record with one damaged field (J7, J14): `runs` lists it as damaged beside a healthy one,
  `download` and `run --resume` are one Error line;
- `metrics --json` and `runs --json` of a run whose metrics hold NaN/Infinity (D2, D3, D17): strict JSON;
- `metrics --png`: a script's lines through the documented helper (D31) and lines missing a key or
  holding a word (D18, D19, D21) are drawn; a FILE that cannot be drawn is one line, exit 2, nothing
  made (D4, D5, D6, D8).

The pure side (every field of the schema, the curves, the JSON) is tests/unit/test_records_schema.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpctl.infra.runs.options import RunOptions
from tests.support.cli import ddpctl, tree

TRAINING = Path(__file__).resolve().parents[2] / "training"


def one_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-1]


def ok(*args: str, **kwargs) -> subprocess.CompletedProcess:
    result = ddpctl(*args, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


def strict(text: str) -> dict:
    """JSON as RFC 8259 has it (Python's parser takes NaN and Infinity unless told not to)."""

    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")

    return json.loads(text, parse_constant=refuse)


# ---- a cluster's state file ----------------------------------------------------------------------

#: the audit's damaged state files: the change, and the field the one line names
STATE: dict[str, tuple[Callable[[dict], object], str]] = {
    "I4 created_at yesterday": (lambda d: d.update(created_at="yesterday"), "created_at: 'yesterday'"),
    "I6 a resource id 123": (lambda d: d["resources"][1].update(id=123), "resources[1].id: 123"),
    "I19 cpus many": (lambda d: d["nodes"][0].update(cpus="many"), "nodes[0].cpus: 'many'"),
    "I20 created_at 1e300": (lambda d: d.update(created_at=1e300), "created_at: 1e+300"),
    "I11 provider gcp": (lambda d: d["spec"].update(provider="gcp"), "spec.provider: 'gcp'"),
}


@pytest.mark.parametrize("damage", STATE, ids=list(STATE))
def test_a_damaged_state_file_is_one_line_and_down_cleans_it(home: Path, damage: str) -> None:
    change, field = STATE[damage]
    ok("up", "--nodes", "2")
    ok("up", "--name", "other")
    path = home / "clusters" / "default.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    down = "ddpctl down --name default" + (" --provider PROVIDER" if "gcp" in damage else "")

    shown = ok("status")
    rows = {line.split()[1]: line for line in shown.stdout.splitlines() if line.startswith("│")}
    assert "up" in rows["other"] and "damaged" in rows["default"], shown.stdout
    assert field in shown.stderr and f"`{down}`" in shown.stderr, shown.stderr

    listed = {c.get("name") or c["spec"]["name"]: c for c in strict(ok("status", "--json").stdout)["clusters"]}
    assert listed["other"]["status"] == "up"
    assert listed["default"]["status"] == "damaged" and listed["default"]["damaged"].startswith(field)

    result = ddpctl("run", "message-passing", "--dry-run", "--name", "default")
    assert result.returncode == 1 and field in one_error(result) and f"`{down}`" in one_error(result)

    if "gcp" in damage:  # asked, nothing done, until the user says which
        result = ddpctl("down", "--name", "default")
        assert result.returncode == 2 and "--provider PROVIDER" in one_error(result)
        assert path.exists()
    result = ok(*down.replace("PROVIDER", "local").split()[1:])
    assert "is down" in result.stderr
    assert not path.exists()
    assert not (home / "clusters" / "default").exists()
    assert [c["spec"]["name"] for c in strict(ok("status", "--json").stdout)["clusters"]] == ["other"]
    ok("down", "--name", "other")


def test_I15_a_cluster_with_no_nodes_says_so(home: Path) -> None:
    ok("up", "--nodes", "2")
    path = home / "clusters" / "default.json"
    doc = json.loads(path.read_text())
    doc["nodes"] = []
    path.write_text(json.dumps(doc))
    result = ddpctl("run", "message-passing", "--dry-run")
    assert result.returncode == 2
    line = one_error(result)
    assert "records no nodes" in line and "--nodes 0" not in line and "`ddpctl down --name default`" in line
    ok("down", "--name", "default")
    assert tree(home / "clusters") == []


# ---- a run's record --------------------------------------------------------------------------------


def write_run(home: Path, run_id: str, change: Callable[[dict], object] = lambda d: None, metrics: str = "") -> Path:
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    doc = {"options": RunOptions(job="mnist", run_id=run_id).to_dict(), "cluster": "default", "ephemeral": False}
    change(doc)
    (run_dir / "options.json").write_text(json.dumps(doc))
    (run_dir / "output.log").write_text("[node0 r0] hello\n")
    if metrics:
        (run_dir / "metrics.jsonl").write_text(metrics)
    return run_dir


RUNS: dict[str, tuple[Callable[[dict], object], str]] = {
    "J7 cluster 5": (lambda d: d.update(cluster=5), "cluster: 5, not a string"),
    "J14 snapshot_dir 5": (lambda d: d["options"].update(snapshot_dir=5), "options.snapshot_dir: 5, not a string"),
}


@pytest.mark.parametrize("damage", RUNS, ids=list(RUNS))
def test_a_damaged_run_record_is_listed_as_damaged_and_one_line_elsewhere(home: Path, damage: str) -> None:
    change, said = RUNS[damage]
    write_run(home, "rgood00001")
    write_run(home, "rbad000001", change)
    os.utime(home / "runs" / "rbad000001" / "options.json", (2e9, 2e9))  # the last run started

    listing = ok("runs")
    assert "rgood00001" in listing.stdout and "damaged" in listing.stdout, listing.stdout
    runs = {r["run_id"]: r for r in strict(ok("runs", "--json").stdout)["runs"]}
    assert runs["rgood00001"]["state"] == "unfinished"
    assert runs["rbad000001"]["state"] == "damaged" and said in runs["rbad000001"]["result"]

    for command in (("download", "rbad000001"), ("run", "--resume", "rbad000001", "--dry-run")):
        result = ddpctl(*command)
        assert result.returncode == 2 and said in one_error(result), command
    assert not (home / "runs" / "rbad000001" / "outputs").exists()


# ---- JSON is JSON ------------------------------------------------------------------------------------

NAN_LINES = (
    '{"kind": "step", "step": 1, "loss": NaN, "samples_per_s": 10}\n'
    '{"kind": "epoch", "step": 1, "loss": 0.5, "accuracy": Infinity}\n'
    '{"kind": "step", "step": 1e999, "loss": -Infinity}\n'
)


def test_D2_D3_D17_non_finite_numbers_are_null(home: Path) -> None:
    write_run(home, "rnan000001", metrics=NAN_LINES)
    doc = strict(ok("metrics", "rnan000001", "--json").stdout)
    assert [line["loss"] for line in doc["lines"]] == [None, 0.5, None]
    assert doc["lines"][1]["accuracy"] is None and doc["lines"][2]["step"] is None  # D2, D17
    (run,) = strict(ok("runs", "--json").stdout)["runs"]
    assert run["accuracy"] is None  # D3


# ---- metrics --png ---------------------------------------------------------------------------------


def log_with_the_helper(run_dir: Path) -> None:
    """D31: the documented helper, as a user's script calls it (loss only)."""
    code = "from metrics import log_metrics; log_metrics(step=1, loss=0.9); log_metrics(step=2, loss=0.7)"
    env = {**os.environ, "DDPCTL_SNAPSHOT_DIR": str(run_dir)}
    subprocess.run([sys.executable, "-c", code], cwd=TRAINING, env=env, check=True)


DRAWN = {
    "D31 log_metrics(step, loss)": None,
    "D18 no loss": '{"kind": "step", "step": 1, "samples_per_s": 40}\n{"kind": "step", "step": 2, "samples_per_s": 41}\n',
    "D19 a line without step": '{"kind": "step", "loss": 1.0}\n{"kind": "step", "step": 2, "loss": 0.5}\n',
    "D21 loss abc": '{"kind": "step", "step": 1, "loss": "abc"}\n{"kind": "step", "step": 2, "loss": 0.5}\n',
}


@pytest.mark.parametrize("case", DRAWN, ids=list(DRAWN))
def test_metrics_png_draws_what_the_lines_have(home: Path, tmp_path: Path, case: str) -> None:
    pytest.importorskip("matplotlib")
    run_dir = write_run(home, "rplot00001", metrics=DRAWN[case] or "")
    if DRAWN[case] is None:
        log_with_the_helper(run_dir)
    picture = tmp_path / "c.png"
    result = ok("metrics", "rplot00001", "--png", str(picture))
    assert picture.read_bytes().startswith(b"\x89PNG"), result.stderr


PICTURES = {
    "D4 a folder that does not exist": ("/nonexistent/dir/x.png", "does not exist"),
    "D5 /proc": ("/proc/x.png", "no file can be made in /proc"),
    "D6 out.txt": ("out.txt", "a .txt file is not a picture format"),
    "D8 an empty name": ("", "is not a file name"),
}


@pytest.mark.parametrize("case", PICTURES, ids=list(PICTURES))
def test_metrics_png_that_cannot_be_drawn_is_one_line(home: Path, tmp_path: Path, case: str) -> None:
    write_run(home, "rplot00001", metrics='{"kind": "step", "step": 1, "loss": 1.0}\n')
    path, said = PICTURES[case]
    work = tmp_path / "work"
    work.mkdir()
    result = ddpctl("metrics", "rplot00001", "--png", path, cwd=work)
    assert result.returncode == 2 and said in one_error(result)
    assert result.stdout == "" and list(work.iterdir()) == []


def test_metrics_png_with_nothing_to_draw_is_one_line(home: Path, tmp_path: Path) -> None:
    write_run(home, "rplot00001", metrics='{"kind": "step", "note": "hi"}\n')
    work = tmp_path / "work"
    work.mkdir()
    result = ddpctl("metrics", "rplot00001", "--png", str(work / "c.png"))
    assert result.returncode == 1 and "nothing to draw" in one_error(result)
    assert list(work.iterdir()) == []
