"""`ddpctl metrics --png` and `--csv` of one or several runs, through the real CLI and the Python API,
on hand-made records (metric lines as training/metrics.py writes them; no training run). The pure
part (which points go in which series, the axes) is tests/unit/test_curves.py."""

from __future__ import annotations

import csv
import io
import json
import struct
from pathlib import Path

import pytest

from tests.support.cli import ddpctl
from tests.support.metrics import LINES

#: a second run, as a user's script logs through log_metrics: no kind, accuracy as a fraction, tokens/s
OWN = [
    {"time": 1764182400.0 + s, "step": s, "loss": 1.0 / s, "accuracy": 0.5 + s / 10, "tokens_per_s": 900 + s}
    for s in (1, 2, 3)
]


def recorded(home: Path, run_id: str, lines: list[dict]) -> None:
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "output.log").write_text("[node0 r0] hello\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


def test_two_runs_overlaid_in_a_png_and_written_as_csv(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    recorded(home, "rmnist0001", LINES)
    recorded(home, "rown000002", OWN)
    png, table = tmp_path / "compare.png", tmp_path / "m.csv"
    result = ddpctl("metrics", "rmnist0001", "rown000002", "--png", str(png), "--csv", str(table), "--tail", "1")
    assert result.returncode == 0, result.stderr
    width, height = png_size(png)
    assert width >= 800 and height >= 600  # three panels and the legend beside them
    assert f"runs rmnist0001, rown000002: curves drawn in {png}" in result.stderr
    assert "run rmnist0001:" in result.stdout and "run rown000002:" in result.stdout  # each run's table
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert [r["run_id"] for r in rows] == ["rmnist0001"] * 4 + ["rown000002"] * 3
    assert rows[2]["kind"] == "epoch" and rows[2]["accuracy"] == "91.2" and rows[2]["time"] == ""
    assert rows[-1]["tokens_per_s"] == "903" and rows[-1]["samples_per_s"] == ""
    assert float(rows[-1]["time"]) == OWN[-1]["time"]

    single = ddpctl("metrics", "rown000002", "--png", str(tmp_path / "one.svg"))  # one run, as before
    assert single.returncode == 0, single.stderr
    assert (tmp_path / "one.svg").read_text().lstrip().startswith("<?xml")

    import ddpctl as api  # the API: the same files, the same rows

    assert api.metrics("rown000002") == OWN
    both = api.metrics(["rmnist0001", "rown000002"], csv=tmp_path / "api.csv")
    assert both == [{"run_id": "rmnist0001", **d} for d in LINES] + [{"run_id": "rown000002", **d} for d in OWN]
    assert (tmp_path / "api.csv").read_text() == table.read_text()


def test_csv_to_stdout_and_several_runs_as_json(home: Path) -> None:
    recorded(home, "rmnist0001", LINES)
    recorded(home, "rown000002", OWN)
    out = ddpctl("metrics", "rmnist0001", "--csv", "-")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == [
        "run_id,kind,step,epoch,loss,accuracy,samples_per_s",
        "rmnist0001,step,1,1,2.3,,100.0",
    ]
    assert len(out.stdout.splitlines()) == 1 + len(LINES)  # the CSV alone: no table
    doc = json.loads(ddpctl("metrics", "rmnist0001", "rown000002", "--json").stdout)
    assert [r["run_id"] for r in doc["runs"]] == ["rmnist0001", "rown000002"]
    assert doc["runs"][1]["lines"] == OWN and doc["runs"][0]["summary"]["accuracy"] == 91.2
    one = json.loads(ddpctl("metrics", "rmnist0001", "--json").stdout)  # one run: the document as before
    assert one["run_id"] == "rmnist0001" and one["lines"] == LINES and "runs" not in one


#: arguments -> what the one line says (exit 2, nothing written)
REFUSED = {
    "an unknown run among several": (
        ["rmnist0001", "rnothere01", "--png", "{tmp}/c.png"],
        "run 'rnothere01' has no output",
    ),
    "--png into a missing folder": (["rmnist0001", "rown000002", "--png", "{tmp}/no/c.png"], "the folder"),
    "--csv into a missing folder": (["rmnist0001", "--csv", "{tmp}/no/m.csv"], "does not exist"),
    "--csv - with --json": (["rmnist0001", "--csv", "-", "--json"], "--csv - and --json both write to stdout"),
    "--follow of two runs": (["rmnist0001", "rown000002", "--follow"], "--follow follows one run, not 2"),
    "the same file twice": (["rmnist0001", "--png", "{tmp}/x.png", "--csv", "{tmp}/x.png"], "both name"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_bad_input_is_one_line_and_writes_nothing(home: Path, tmp_path: Path, case: str) -> None:
    recorded(home, "rmnist0001", LINES)
    recorded(home, "rown000002", OWN)
    work = tmp_path / "work"
    work.mkdir()
    args, said = REFUSED[case]
    result = ddpctl("metrics", *(a.replace("{tmp}", str(work)) for a in args))
    assert result.returncode == 2, result.stdout + result.stderr
    text = json.loads(result.stdout)["error"]["message"] if "--json" in args else result.stderr.strip()
    assert said in text and "\n" not in text.strip(), text
    assert list(work.iterdir()) == []


def test_a_run_without_metrics_among_several_is_one_line(home: Path, tmp_path: Path) -> None:
    recorded(home, "rmnist0001", LINES)
    recorded(home, "rempty0003", [])
    result = ddpctl(
        "metrics", "rmnist0001", "rempty0003", "--png", str(tmp_path / "c.png"), "--csv", str(tmp_path / "m.csv")
    )
    assert result.returncode == 1 and "run rempty0003 has no metrics" in result.stderr.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == [tmp_path / "ddpctl-home"]  # neither file
