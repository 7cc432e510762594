"""Metrics from every run: the lines the bundled jobs (and training/metrics.py) write, brought into the
run's record, read back by `ddpctl metrics` (table, --json, --png) and summarised by `ddpctl runs`.
Its pure tests (no process beyond Python) are in tests/unit/test_metrics.py.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ddpctl.infra.runs import metrics
from tests.support import TRAINING
from tests.support.cli import ddpctl
from tests.support.metrics import LINES


def test_log_metrics_writes_on_rank_0_only(tmp_path: Path) -> None:
    code = f"import sys; sys.path.insert(0, {str(TRAINING)!r}); from metrics import log_metrics; log_metrics(step=1, loss=0.5)"
    for rank in ("1", "0"):
        env = {"RANK": rank, "DDPCTL_SNAPSHOT_DIR": str(tmp_path / "run"), "PATH": "/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", code], env=env, check=True)
    (line,) = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == 1 and json.loads(line)["loss"] == 0.5 and "time" in json.loads(line)


def _recorded_run(home: Path, run_id: str) -> Path:
    """A run's record with an output log and metric lines (what a finished run leaves)."""
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "output.log").write_text("[node0 r0] hello\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(d) + "\n" for d in LINES))
    return run_dir


def test_metrics_without_matplotlib_is_one_line_naming_pip(home: Path, tmp_path: Path) -> None:
    _recorded_run(home, "nomat1")
    code = "import sys; sys.modules['matplotlib'] = None; from ddpctl.main import cli; cli()"
    png = tmp_path / "c.png"
    result = subprocess.run(
        [sys.executable, "-c", code, "metrics", "nomat1", "--png", str(png)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: --png needs matplotlib: run `") and " -m pip install " in line and "[plot]" in line
    assert not png.exists()


def test_metrics_of_a_run_without_any(home: Path) -> None:
    run_dir = _recorded_run(home, "none1")
    (run_dir / "metrics.jsonl").unlink()
    result = ddpctl("metrics", "none1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["lines"] == []
    assert "has no metrics" in ddpctl("metrics", "none1").stderr


def test_follow_of_a_finished_run_prints_its_lines_and_returns(home: Path) -> None:
    """`metrics --follow` of a run that has ended: its lines one a line (every epoch line, the last
    --last step lines), then it returns; with --json, the document `metrics --json` gives."""
    _recorded_run(home, "done1")
    followed = ddpctl("metrics", "done1", "--follow", "--last", "1")
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines() == [metrics.line_text(d) for d in (LINES[2], LINES[3])]
    as_json = json.loads(ddpctl("metrics", "done1", "--follow", "--json").stdout)
    assert as_json["lines"] == LINES and as_json["summary"]["step"] == 80
    (Path(home) / "runs" / "done1" / "metrics.jsonl").unlink()
    assert "run done1 wrote no metrics" in ddpctl("metrics", "done1", "--follow").stderr


# ---- real runs on the local provider -------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG, from its signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_mnist_run_writes_metrics_that_metrics_and_runs_read_back(home: Path, tmp_path: Path) -> None:
    result = ddpctl(
        "run",
        "mnist",
        "--nodes",
        "2",
        "--run-id",
        "met1",
        "--",
        "--epochs",
        "1",
        "--log-every",
        "20",
        "--data-fraction",
        "0.3",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " samples/s" in result.stdout  # throughput on the loss lines
    lines = metrics.read(home / "runs" / "met1")
    steps = [d for d in lines if d["kind"] == "step"]
    (epoch,) = [d for d in lines if d["kind"] == "epoch"]
    assert [d["step"] for d in steps[:2]] == [1, 20] and all(d["epoch"] == 1 for d in steps)
    assert all(isinstance(d["loss"], float) and d["samples_per_s"] > 0 for d in steps[1:])
    assert epoch["accuracy"] >= 70.0 and epoch["epoch"] == 1 and epoch["samples_per_s"] > 0
    assert epoch["step"] >= steps[-1]["step"]

    table = ddpctl("metrics", "met1", "--last", "2")
    assert table.returncode == 0, table.stderr
    assert "accuracy %" in table.stdout and "samples/s" in table.stdout and "epoch" in table.stdout
    assert f"{epoch['accuracy']:.2f}" in table.stdout

    doc = json.loads(ddpctl("metrics", "--json").stdout)  # the last run's
    assert doc["ok"] and doc["run_id"] == "met1" and doc["lines"] == lines
    assert doc["summary"]["accuracy"] == epoch["accuracy"]

    png = tmp_path / "curves.png"
    drawn = ddpctl("metrics", "met1", "--png", str(png))
    assert drawn.returncode == 0, drawn.stderr
    width, height = _png_size(png)
    assert width >= 400 and height >= 300

    (run,) = json.loads(ddpctl("runs", "--json").stdout)["runs"]
    assert run["duration_s"] > 0 and run["loss"] == epoch["loss"] and run["accuracy"] == epoch["accuracy"]
    listing = ddpctl("runs", env={**os.environ, "COLUMNS": "200"}).stdout  # a wide table: unwrapped
    assert f"{epoch['accuracy']:.2f}%" in listing and "duration" in listing


@pytest.mark.slow
def test_users_script_writes_metrics_through_the_helper_read_from_python_and_the_cli(
    home: Path, tmp_path: Path
) -> None:
    script = tmp_path / "own_metrics.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(TRAINING)!r})\n"
        "from metrics import log_metrics\n"
        "for step in (1, 2, 3):\n"
        "    log_metrics(step=step, loss=1.0 / step, accuracy=50.0 + step)\n"
    )
    import ddpctl as api

    result = api.run(str(script), nodes=2, run_id="own2", on_line=None, progress=None)  # from Python
    assert result.ok
    lines = metrics.read(home / "runs" / "own2")
    assert [d["step"] for d in lines] == [1, 2, 3]  # rank 0's lines only
    assert result.metrics == lines and result.metrics_file == home / "runs" / "own2" / "metrics.jsonl"
    assert api.metrics("own2") == api.metrics() == lines  # the last run's by default
    doc = json.loads(ddpctl("metrics", "own2", "--json").stdout)  # the CLI reads the same
    assert doc["lines"] == lines
    assert doc["summary"] == {"loss": pytest.approx(1 / 3), "accuracy": 53.0, "step": 3}
    with pytest.raises(api.UsageError, match="run 'rnothere' has no output"):
        api.metrics("rnothere")
