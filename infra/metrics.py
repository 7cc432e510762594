"""A run's metric lines (metrics.jsonl, one JSON object a line, as training/metrics.py writes them):
brought from the head node into the run's record when the run ends, read back and summarised for
``ddpctl metrics`` and ``ddpctl runs``."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .launch.torchrun import run_snapshot_dir

if TYPE_CHECKING:
    from .spec import RunSpec
    from .state import ClusterState

FILE = "metrics.jsonl"
#: the columns ``ddpctl metrics`` shows, in order, with their headers (other keys go to --json only)
COLUMNS = {
    "kind": "line",
    "step": "step",
    "epoch": "epoch",
    "loss": "loss",
    "accuracy": "accuracy %",
    "samples_per_s": "samples/s",
    "tokens_per_s": "tokens/s",
    "mfu": "MFU",
    "gpu_mem_gb": "GPU GiB",
}


def parse(text: str) -> list[dict[str, Any]]:
    """The JSON objects among the lines of text; a line that is not one (cut off by a crash) is left out."""
    lines = []
    for raw in text.splitlines():
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if isinstance(doc, dict):
            lines.append(doc)
    return lines


def read(run_dir: Path, tail: int = 0) -> list[dict[str, Any]]:
    """The metric lines in a run's record ([] if it has none); only those in its last `tail` bytes if tail."""
    try:
        with open(run_dir / FILE, "rb") as f:
            if tail and f.seek(0, 2) > tail:
                f.seek(-tail, 2)
                f.readline()  # the rest of a line cut in two
            else:
                f.seek(0)
            return parse(f.read().decode(errors="replace"))
    except OSError:
        return []


def last_value(lines: list[dict[str, Any]], key: str) -> Any:
    """The last number given for key, None if none."""
    for doc in reversed(lines):
        value = doc.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return None


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """{"loss", "accuracy", "step"}: the last of each (None where the run gave none)."""
    return {key: last_value(lines, key) for key in ("loss", "accuracy", "step")}


def shown(lines: list[dict[str, Any]], last: int) -> list[dict[str, Any]]:
    """What the table shows: every epoch line, and the last `last` step lines (all of them if last is 0),
    in file order."""
    steps = [i for i, doc in enumerate(lines) if doc.get("kind") != "epoch"]
    keep = set(steps[-last:] if last else steps)
    return [doc for i, doc in enumerate(lines) if doc.get("kind") == "epoch" or i in keep]


def remote_path(state: ClusterState, run: RunSpec) -> str:
    """Where the run's metrics.jsonl is on its head node (the snapshot folder the run was given)."""
    folder = run.snapshot_dir or run_snapshot_dir(state.shared_dir, run.run_id)
    if not folder.startswith("/"):
        folder = f"{state.nodes[0].workdir}/{folder}"  # relative: the ranks start in the head's workdir
    return f"{folder.rstrip('/')}/{FILE}"


def fetch(state: ClusterState, run: RunSpec, dest: Path) -> bool:
    """Copy the run's metrics.jsonl from its head node (this machine, or over SSH) to dest; False if the
    run wrote none (or keeps its snapshots in S3: nothing is fetched from there)."""
    if (run.snapshot_dir or "").startswith("s3://") or not state.nodes:
        return False
    path, head = remote_path(state, run), state.nodes[0]
    if head.ssh is None:
        if not Path(path).is_file():
            return False
        shutil.copyfile(path, dest)
        return True
    from .ssh import connect

    conn = connect(head.ssh)
    try:
        result = conn.run(f"cat -- {shlex.quote(path)}", hide=True, warn=True, in_stream=False, timeout=60)
    finally:
        conn.close()
    if result.exited:
        return False
    dest.write_text(result.stdout)
    return True


def cell(key: str, value: Any) -> str:
    """A value as the table shows it."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if key == "mfu":
        return f"{100 * value:.1f}%"
    if key in ("samples_per_s", "tokens_per_s"):
        return f"{value:,.0f}"
    if key == "accuracy":
        return f"{value:.2f}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def plot(lines: list[dict[str, Any]], path: str, title: str = "") -> None:
    """Draw loss (and accuracy) and throughput against steps into the PNG at path (matplotlib, the `plot`
    extra; DdpctlError naming the pip command where it is missing)."""
    try:
        import matplotlib
    except ImportError:
        import sys

        from .errors import DdpctlError
        from .install import pip_install

        raise DdpctlError(f"--png needs matplotlib: run `{pip_install('plot', sys.executable)}`") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(kind: str, key: str) -> tuple[list[Any], list[Any]]:
        points = [(d["step"], d[key]) for d in lines if (d.get("kind") == "epoch") == (kind == "epoch")]
        points = [(s, v) for s, v in points if isinstance(s, (int, float)) and isinstance(v, (int, float))]
        return [s for s, _ in points], [v for _, v in points]

    speed = "tokens_per_s" if any("tokens_per_s" in d for d in lines) else "samples_per_s"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(*series("step", "loss"), label="loss (log steps)", color="tab:blue", alpha=0.6)
    top.plot(*series("epoch", "loss"), "o-", label="loss (epoch mean)", color="tab:blue")
    top.set_ylabel("loss")
    top.grid(alpha=0.3)
    handles, labels = top.get_legend_handles_labels()
    steps, accuracy = series("epoch", "accuracy")
    if accuracy:
        right = top.twinx()
        right.plot(steps, accuracy, "s--", color="tab:green", label="held-out accuracy %")
        right.set_ylabel("accuracy %")
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    top.legend(handles, labels, loc="best")
    bottom.plot(*series("step", speed), ".-", color="tab:orange", label=speed.replace("_per_s", "/s"))
    bottom.set_ylabel(speed.replace("_per_s", "/s"))
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    if title:
        top.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
