"""What ``ddpctl metrics`` (and ``ddpctl.metrics()``) makes of one or more runs' metric lines besides
its table: the chart ``--png`` draws, planned by ``chart`` (pure: which points go in which series,
the axes' limits) and drawn by ``draw`` (matplotlib, imported there only), and the rows ``--csv``
writes (``csv_text``, pure). ``check_targets``, ``load`` and ``export`` are the one path under the
command and the API: the files refused before anything is read, the runs named read, then written
(each file whole, or not at all)."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model.errors import DdpctlError, UsageError
from . import metrics
from .metrics import number

if TYPE_CHECKING:
    from ..model.store import StateStore

#: one colour per run, in the order the runs are named (matplotlib's tab10; the 11th run takes the first again)
COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
)
#: the CSV's first columns, in this order where some line has them (then the others, as they come)
CSV_FIRST = (
    "run_id",
    "time",
    "kind",
    "step",
    "epoch",
    *(k for k in metrics.COLUMNS if k not in ("kind", "step", "epoch")),
)
SPEEDS = ("tokens_per_s", "samples_per_s")  # a run's throughput: its tokens/s where it gave them


@dataclass(frozen=True)
class RunLines:
    """A run named on the command line and its metric lines ([] where it wrote none)."""

    run_id: str
    file: Path  # its metrics.jsonl in the run's record
    lines: list[dict[str, Any]]


@dataclass(frozen=True)
class Series:
    """One run's points of one key: each log step's value (``epochs`` False, drawn as a line) or the
    epoch lines' means (``epochs`` True, drawn as markers at the step where the epoch ended)."""

    run_id: str
    key: str  # loss, accuracy, samples_per_s, tokens_per_s
    epochs: bool
    steps: tuple[float, ...]
    values: tuple[float, ...]
    joined: bool = False  # epoch markers joined by a dotted line: the run has no step series of this key


@dataclass(frozen=True)
class Panel:
    """One plot of the chart (loss, accuracy, throughput), its series and its y axis."""

    name: str
    label: str  # the y axis's
    series: tuple[Series, ...]
    ylim: tuple[float | None, float | None]  # (bottom, top); None: as matplotlib fits the points


@dataclass(frozen=True)
class Chart:
    """What ``--png`` draws: panels one above the other, against the step; run i in ``COLOURS[i]``."""

    title: str
    runs: tuple[str, ...]
    panels: tuple[Panel, ...]

    def colour(self, run_id: str) -> str:
        return COLOURS[self.runs.index(run_id) % len(COLOURS)]

    def has(self, *, epochs: bool) -> bool:
        return any(s.epochs == epochs for p in self.panels for s in p.series)


@dataclass(frozen=True)
class Targets:
    """The files ``--png`` and ``--csv`` write, checked (``check_targets``); ``csv_stdout``: ``--csv -``."""

    png: Path | None = None
    csv: Path | None = None
    csv_stdout: bool = False


# ---- the chart (pure) --------------------------------------------------------------------------------


def points(lines: list[dict[str, Any]], key: str, *, epochs: bool) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The (steps, values) of ``key`` in the step lines (every line whose kind is not "epoch"), or with
    ``epochs`` in the epoch lines, in file order: a line without a finite number for ``key``, or for its
    step, gives none (a script of the user's logs what it has). An epoch line without a step is placed
    at the last step logged before it (where the epoch ended)."""
    found: list[tuple[float, float]] = []
    last_step: float | None = None
    for doc in lines:
        is_epoch, step = doc.get("kind") == "epoch", doc.get("step")
        if not number(step):
            step = last_step if is_epoch else None
        elif not is_epoch:
            last_step = step
        if is_epoch == epochs and step is not None and number(doc.get(key)):
            found.append((step, doc[key]))
    return tuple(s for s, _ in found), tuple(v for _, v in found)


def speed_key(lines: list[dict[str, Any]]) -> str:
    """The run's throughput key: tokens_per_s where some line has it, else samples_per_s."""
    return next((k for k in SPEEDS if any(number(d.get(k)) for d in lines)), SPEEDS[-1])


def run_series(run_id: str, lines: list[dict[str, Any]], key: str) -> list[Series]:
    """The run's step series and epoch series of ``key``, each where it has a point; the epoch
    markers joined where they are all the run has of ``key`` (held-out accuracy, once an epoch)."""
    steps = points(lines, key, epochs=False)
    found = [
        Series(run_id, key, False, *steps),
        Series(run_id, key, True, *points(lines, key, epochs=True), not steps[0]),
    ]
    return [s for s in found if s.steps]


def accuracy_axis(values: Sequence[float]) -> tuple[str, tuple[float | None, float | None]]:
    """The accuracy axis: 0-1 where every value is a fraction, 0-100 where they are percents, else
    from 0 (or the lowest value) to what fits."""
    low = min(0.0, *values)
    if low == 0 and max(values) <= 1:
        return "accuracy", (0.0, 1.0)
    if low == 0 and max(values) <= 100:
        return "accuracy %", (0.0, 100.0)
    return "accuracy", (low, None)


def from_zero(values: Sequence[float]) -> tuple[float | None, float | None]:
    """An axis from 0 (loss, throughput) unless a value is below it."""
    return (0.0, None) if min(values) >= 0 else (None, None)


def chart(runs: Sequence[RunLines]) -> Chart:
    """The chart of the runs' lines (pure): a loss panel, an accuracy panel and a throughput panel
    (tokens/s where a run gave them, else samples/s), each where some run has a point for it; each
    with every run's step series (a line) and epoch series (markers). DdpctlError naming a run that has
    no line or no point at all (nothing of it would be drawn)."""
    for run in runs:
        if not run.lines:
            raise DdpctlError(f"run {run.run_id} has no metrics ({run.file}): nothing to draw")
    panels: list[Panel] = []
    loss = [s for r in runs for s in run_series(r.run_id, r.lines, "loss")]
    if loss:
        panels.append(Panel("loss", "loss", tuple(loss), from_zero([v for s in loss for v in s.values])))
    accuracy = [s for r in runs for s in run_series(r.run_id, r.lines, "accuracy")]
    if accuracy:
        label, ylim = accuracy_axis([v for s in accuracy for v in s.values])
        panels.append(Panel("accuracy", label, tuple(accuracy), ylim))
    speed = [s for r in runs for s in run_series(r.run_id, r.lines, speed_key(r.lines))]
    if speed:
        units = " and ".join(dict.fromkeys(s.key.replace("_per_s", "/s") for s in speed))
        panels.append(Panel("throughput", units, tuple(speed), from_zero([v for s in speed for v in s.values])))
    drawn = {s.run_id for p in panels for s in p.series}
    for run in runs:
        if run.run_id not in drawn:
            raise DdpctlError(
                f"run {run.run_id}: no metric line has a number for its step and for loss, accuracy, samples_per_s "
                f"or tokens_per_s: nothing to draw (`ddpctl metrics {run.run_id}` shows the lines)"
            )
    return Chart(named(runs), tuple(r.run_id for r in runs), tuple(panels))


def named(runs: Sequence[RunLines]) -> str:
    """``run ID`` or ``runs ID1, ID2``: the chart's title, the start of what the command says."""
    ids = [r.run_id for r in runs]
    return f"run {ids[0]}" if len(ids) == 1 else f"runs {', '.join(ids)}"


# ---- the CSV (pure) ----------------------------------------------------------------------------------


def csv_columns(runs: Sequence[RunLines]) -> list[str]:
    """run_id, then the keys of every line: the known ones in ``CSV_FIRST``'s order, the others as they come."""
    keys = dict.fromkeys(k for r in runs for d in r.lines for k in d)
    return [k for k in CSV_FIRST if k == "run_id" or k in keys] + [k for k in keys if k not in CSV_FIRST]


def csv_value(value: Any) -> str:
    """A value as its cell: numbers as JSON writes them, true/false, text as it is, lists and objects as
    JSON, nothing for a missing key or null."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def csv_text(runs: Sequence[RunLines]) -> str:
    """One row per metric line of each run, in order, under ``csv_columns``; the run_id column is the
    run's (a line's own run_id key gives way). DdpctlError naming a run that has no line."""
    for run in runs:
        if not run.lines:
            raise DdpctlError(f"run {run.run_id} has no metrics ({run.file}): nothing to write")
    columns = csv_columns(runs)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for run in runs:
        for doc in run.lines:
            writer.writerow([run.run_id if k == "run_id" else csv_value(doc.get(k)) for k in columns])
    return buffer.getvalue()


def rows(runs: Sequence[RunLines]) -> list[dict[str, Any]]:
    """The runs' lines, each with its run's id first (the CSV's rows as dicts, for ``ddpctl.metrics``)."""
    return [
        {"run_id": run.run_id, **{k: v for k, v in doc.items() if k != "run_id"}} for run in runs for doc in run.lines
    ]


# ---- the one path under the command and the API ----------------------------------------------------------


def check_targets(png: str | None, csv_file: str | None) -> Targets:
    """``--png FILE`` and ``--csv FILE`` (``-``: stdout), refused in one line before anything is read."""
    picture = metrics.check_picture(png) if png is not None else None
    table = None if csv_file in (None, "-") else metrics.check_file("--csv", csv_file, "metrics.csv")
    if picture is not None and picture == table:
        raise UsageError(f"--png and --csv both name {picture}: give each its own file")
    return Targets(picture, table, csv_file == "-")


def load(store: StateStore, run_ids: Sequence[str | None]) -> list[RunLines]:
    """The runs named, in order, each once (none: the last run started), with their lines; UsageError
    in one line for a run that has no record (every one checked before any is read)."""
    from .logs import log_path

    ids = [log_path(store, r)[0] for r in dict.fromkeys(run_ids or [None])]
    return [RunLines(r, store.run_dir(r) / metrics.FILE, metrics.read(store.run_dir(r))) for r in dict.fromkeys(ids)]


def export(
    runs: Sequence[RunLines], targets: Targets, *, write_stdout: Callable[[str], Any] | None = None
) -> list[str]:
    """Write what ``targets`` asks for: the chart, the CSV (to a file, or ``write_stdout``); what was
    written, one phrase each. Everything is made before anything is written (a run without metrics, a
    missing matplotlib: one line, no file), and each file is written whole or not at all."""
    picture = chart(runs) if targets.png is not None else None
    text = csv_text(runs) if targets.csv is not None or targets.csv_stdout else None
    plt = pyplot() if picture is not None else None
    said = []
    if picture is not None and targets.png is not None:
        draw(picture, targets.png, plt)
        said.append(f"curves drawn in {targets.png}")
    if text is not None:
        count = sum(len(r.lines) for r in runs)
        if targets.csv is not None:
            from ..model.store import atomic_write

            atomic_write(targets.csv, text, mode=0o644)
            said.append(f"{count} lines written to {targets.csv}")
        else:
            (write_stdout or sys.stdout.write)(text)
    return said


# ---- drawing (matplotlib) ------------------------------------------------------------------------------


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg canvas; DdpctlError naming the pip command where it is missing."""
    try:
        import matplotlib
    except ImportError:
        from ..tools.install import pip_install

        raise DdpctlError(f"--png needs matplotlib: run `{pip_install('plot', sys.executable)}`") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(planned: Chart, path: Path, plt: Any = None) -> None:
    """Draw the chart into the picture at path (its format by the suffix), whole or not at all: the
    panels share the step axis, each run in its colour, step series as lines, epoch means as open
    markers, the legend outside the plots (on the right)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    plt = plt or pyplot()
    count = len(planned.panels)
    fig, axes = plt.subplots(count, 1, sharex=True, squeeze=False, figsize=(9, 1.2 + 2.3 * count), layout="constrained")
    try:
        for ax, panel in zip(axes[:, 0], planned.panels):
            for s in panel.series:
                colour = planned.colour(s.run_id)
                if s.epochs:
                    ax.plot(s.steps, s.values, linestyle=":" if s.joined else "none", color=colour, marker="o", markersize=7, markerfacecolor="white",
                            markeredgecolor=colour, markeredgewidth=1.8, zorder=3, clip_on=False)  # fmt: skip
                else:
                    few = len(s.steps) <= 40  # a dot at each point where they can be told apart
                    ax.plot(s.steps, s.values, color=colour, linewidth=1.4, marker="." if few else None, clip_on=False)
            ax.set_ylim(*panel.ylim)
            ax.set_ylabel(panel.label)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("step")
        axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole
        fig.suptitle(planned.title)
        handles = [Line2D([], [], color=planned.colour(r), linewidth=2.5, label=r) for r in planned.runs]
        if planned.has(epochs=False):
            handles.append(Line2D([], [], color="0.35", marker=".", label="each log step"))
        if planned.has(epochs=True):
            handles.append(Line2D([], [], color="0.35", linestyle="none", marker="o", markerfacecolor="white",
                                  markeredgewidth=1.8, label="epoch mean\n(at its last step)"))  # fmt: skip
        fig.legend(handles=handles, loc="outside right upper", frameon=False)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
        os.close(fd)
        try:
            fig.savefig(tmp, dpi=100, format=path.suffix.lower().lstrip("."))
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    finally:
        plt.close(fig)
