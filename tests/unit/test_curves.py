"""`ddpctl metrics --png` and `--csv` of one or several runs, the pure part (infra/runs/curves.py):
which points go in which series (each log step a line, each epoch's mean a marker at the step the
epoch ended, never one series), the axes' limits (accuracy 0-100 or 0-1, loss and throughput from
zero), one colour per run, the CSV's columns and cells, and the files refused before anything is
read. Drawn and written by the real CLI: tests/integration/test_curves.py."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from ddpctl.infra.model.errors import DdpctlError, UsageError
from ddpctl.infra.runs import curves
from tests.support.metrics import LINES


def run(run_id: str, lines: list[dict]) -> curves.RunLines:
    return curves.RunLines(run_id, Path(f"/h/runs/{run_id}/metrics.jsonl"), lines)


def by_name(chart: curves.Chart) -> dict[str, curves.Series]:
    """``panel/run/key[ epochs]`` -> its series."""
    return {f"{p.name}/{s.run_id}/{s.key}{' epochs' * s.epochs}": s for p in chart.panels for s in p.series}


def test_steps_and_epoch_means_are_separate_series() -> None:
    """The epoch line's mean loss (0.6 at step 70) is no point of the step curve (which would look like
    a jump): it is the epoch series', at the step where the epoch ended."""
    series = by_name(curves.chart([run("r1", LINES)]))
    assert list(series) == [
        "loss/r1/loss",
        "loss/r1/loss epochs",
        "accuracy/r1/accuracy epochs",
        "throughput/r1/samples_per_s",
        "throughput/r1/samples_per_s epochs",
    ]
    assert (series["loss/r1/loss"].steps, series["loss/r1/loss"].values) == ((1, 20, 80), (2.3, 0.9, 0.4))
    assert (series["loss/r1/loss epochs"].steps, series["loss/r1/loss epochs"].values) == ((70,), (0.6,))
    assert not series["loss/r1/loss epochs"].joined  # markers only: the step line is there
    assert series["accuracy/r1/accuracy epochs"].joined  # all the run has of accuracy: joined, dotted
    assert series["throughput/r1/samples_per_s"].values == (100.0, 900.5, 910.0)


def test_an_epoch_line_without_a_step_is_placed_where_the_epoch_ended() -> None:
    lines = [
        {"step": 5, "loss": 1.0},
        {"step": 9, "loss": 0.8},
        {"kind": "epoch", "loss": 0.9},  # no step: after step 9
        {"step": "x", "loss": 0.7},  # a step line without a number for its step: left out, moves nothing
        {"kind": "epoch", "loss": 0.85},
    ]
    assert curves.points(lines, "loss", epochs=True) == ((9, 9), (0.9, 0.85))
    assert curves.points(lines, "loss", epochs=False) == ((5, 9), (1.0, 0.8))
    assert curves.points([{"kind": "epoch", "loss": 1.0}], "loss", epochs=True) == ((), ())  # nothing before it


#: accuracy values -> (the axis's label, its limits)
ACCURACY_AXES = {
    "percent": ([12.5, 96.1, 97.3], ("accuracy %", (0.0, 100.0))),
    "exactly 100 %": ([100.0, 100], ("accuracy %", (0.0, 100.0))),
    "fractions": ([0.1, 0.95, 1.0], ("accuracy", (0.0, 1.0))),
    "above 100: no percentage": ([50.0, 250.0], ("accuracy", (0.0, None))),
    "below 0": ([-0.5, 0.5], ("accuracy", (-0.5, None))),
}


@pytest.mark.parametrize("case", ACCURACY_AXES, ids=list(ACCURACY_AXES))
def test_the_accuracy_axis_fits_its_values_never_past_100(case: str) -> None:
    values, expected = ACCURACY_AXES[case]
    assert curves.accuracy_axis(values) == expected


def test_loss_and_throughput_axes_start_at_zero() -> None:
    panels = {p.name: p for p in curves.chart([run("r1", LINES)]).panels}
    assert panels["loss"].ylim == (0.0, None) and panels["throughput"].ylim == (0.0, None)
    assert panels["accuracy"].ylim == (0.0, 100.0) and panels["accuracy"].label == "accuracy %"
    assert panels["throughput"].label == "samples/s"
    assert curves.from_zero([-1.5, 2.0]) == (None, None)  # a loss below zero (a user's): as it fits


def test_several_runs_overlaid_one_colour_each() -> None:
    gpt = [{"kind": "step", "step": 10, "loss": 5.1, "tokens_per_s": 9000.0, "samples_per_s": 70.0}]
    chart = curves.chart([run("rmnist", LINES), run("rgpt", gpt)])
    assert chart.title == "runs rmnist, rgpt" and chart.runs == ("rmnist", "rgpt")
    assert (chart.colour("rmnist"), chart.colour("rgpt")) == ("tab:blue", "tab:orange")
    panels = {p.name: p for p in chart.panels}
    assert [(s.run_id, s.key) for s in panels["loss"].series] == [
        ("rmnist", "loss"),
        ("rmnist", "loss"),
        ("rgpt", "loss"),
    ]
    assert [s.key for s in panels["throughput"].series] == ["samples_per_s", "samples_per_s", "tokens_per_s"]
    assert panels["throughput"].label == "samples/s and tokens/s"  # each run's own throughput
    assert [s.run_id for s in panels["accuracy"].series] == ["rmnist"]
    assert chart.has(epochs=True) and chart.has(epochs=False)
    many = curves.chart([run(f"r{i}", [{"step": 1, "loss": 1.0}]) for i in range(11)])
    assert many.colour("r10") == many.colour("r0") and len({many.colour(f"r{i}") for i in range(10)}) == 10


def test_a_run_without_anything_to_draw_is_one_line_naming_it() -> None:
    with pytest.raises(
        DdpctlError, match=r"^run rnone has no metrics \(/h/runs/rnone/metrics.jsonl\): nothing to draw$"
    ):
        curves.chart([run("r1", LINES), run("rnone", [])])
    with pytest.raises(DdpctlError, match="^run rnote: no metric line has a number"):
        curves.chart([run("r1", LINES), run("rnote", [{"step": 1, "note": "hi"}])])


def test_the_csv_has_a_row_per_line_and_the_union_of_keys() -> None:
    own = [{"time": 5.0, "step": 1, "loss": 0.5, "lr": 3e-4, "note": "warm, up", "run_id": "mine", "ok": True}]
    text = curves.csv_text([run("r1", LINES), run("r2", own)])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == [
        "run_id",
        "time",
        "kind",
        "step",
        "epoch",
        "loss",
        "accuracy",
        "samples_per_s",
        "lr",
        "note",
        "ok",
    ]
    assert len(rows) == 1 + len(LINES) + 1
    assert rows[3] == ["r1", "", "epoch", "70", "1", "0.6", "91.2", "850.0", "", "", ""]
    assert rows[-1] == ["r2", "5.0", "", "1", "", "0.5", "", "", "0.0003", "warm, up", "true"]  # the run's id wins
    assert curves.rows([run("r2", own)]) == [
        {"run_id": "r2", "time": 5.0, "step": 1, "loss": 0.5, "lr": 3e-4, "note": "warm, up", "ok": True}
    ]
    assert curves.csv_value({"a": [1, None]}) == '{"a": [1, null]}' and curves.csv_value(None) == ""
    with pytest.raises(DdpctlError, match=r"^run r3 has no metrics .*: nothing to write$"):
        curves.csv_text([run("r1", LINES), run("r3", [])])


def test_the_files_are_refused_before_anything_is_read(tmp_path: Path) -> None:
    assert curves.check_targets(None, "-") == curves.Targets(csv_stdout=True)
    both = curves.check_targets(str(tmp_path / "c.png"), str(tmp_path / "m.csv"))
    assert both == curves.Targets(tmp_path / "c.png", tmp_path / "m.csv")
    for png, table, said in [
        (None, "/nonexistent/m.csv", "--csv /nonexistent/m.csv: the folder /nonexistent does not exist"),
        (None, "", "--csv '' is not a file name: give one such as --csv metrics.csv"),
        (None, str(tmp_path), "is a folder"),
        ("/nonexistent/c.png", "-", "--png /nonexistent/c.png: the folder /nonexistent does not exist"),
        (str(tmp_path / "c.png"), str(tmp_path / "c.png"), "--png and --csv both name"),
    ]:
        with pytest.raises(UsageError, match=said.replace("(", r"\(")):
            curves.check_targets(png, table)
    assert list(tmp_path.iterdir()) == []  # no probe left, nothing made


def test_export_makes_everything_before_writing_anything(tmp_path: Path) -> None:
    """A run without metrics among several: one line, and neither the CSV nor the picture is there."""
    targets = curves.Targets(tmp_path / "c.png", tmp_path / "m.csv")
    with pytest.raises(DdpctlError, match="run rnone has no metrics"):
        curves.export([run("r1", LINES), run("rnone", [])], targets)
    assert list(tmp_path.iterdir()) == []
    said: list[str] = []
    assert curves.export([run("r1", LINES)], curves.Targets(csv_stdout=True), write_stdout=said.append) == []
    assert said[0].startswith("run_id,kind,step,epoch,loss,accuracy,samples_per_s\nr1,step,1,1,2.3,,100.0\n")
    assert curves.export([run("r1", LINES)], curves.Targets(csv=tmp_path / "m.csv")) == [
        f"4 lines written to {tmp_path / 'm.csv'}"
    ]
    assert (tmp_path / "m.csv").read_text() == said[0] and (tmp_path / "m.csv").stat().st_mode & 0o777 == 0o644
