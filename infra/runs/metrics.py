"""A run's metric lines (metrics.jsonl, one JSON object a line, as training/metrics.py writes them):
brought from the head node into the run's record as the run goes (``Follower``) and whole when it
ends (``fetch``), read back (``follow`` too, while the run is alive) and summarised for
``ddpctl metrics`` and ``ddpctl runs``."""

from __future__ import annotations

import json
import math
import os
import shlex
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..launch.torchrun import run_snapshot_dir
from ..model.errors import UsageError

if TYPE_CHECKING:
    from ..model.spec import RunSpec
    from ..model.state import ClusterState

FILE = "metrics.jsonl"
#: how often a running run's new metric lines are brought into its record (``Follower``), in seconds
ENV_EVERY_S = "DDPCTL_METRICS_EVERY_S"
EVERY_S = 5.0
#: how often ``follow`` looks at the record for new lines
POLL_S = 0.5
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
        from ..model.store import atomic_write

        atomic_write(dest, Path(path).read_text(errors="replace"))  # whole: a reader reads on from where it was
        return True
    from ..hosts.connections import connect

    conn = connect(head.ssh)
    try:
        result = conn.run(f"cat -- {shlex.quote(path)}", hide=True, warn=True, in_stream=False, timeout=60)
    finally:
        conn.close()
    if result.exited:
        return False
    from ..model.store import atomic_write

    atomic_write(dest, result.stdout)  # whole: one that follows the record reads on from where it was
    return True


def every_from(env: Mapping[str, str]) -> float:
    """``DDPCTL_METRICS_EVERY_S`` as seconds (at least 0.1); not a number of seconds: the default, 5."""
    try:
        value = float(env.get(ENV_EVERY_S, "") or EVERY_S)
    except ValueError:
        return EVERY_S
    return max(0.1, value) if value < float("inf") else EVERY_S


class Follower:
    """While a run goes on, its new metric lines brought into its record every ``every_s`` seconds
    (``DDPCTL_METRICS_EVERY_S``, default 5), for ``ddpctl metrics --follow`` and ``ddpctl.metrics``:
    the whole lines the head node's file has beyond what was brought (read in place on this machine,
    ``tail -c +N`` over one SSH connection kept open), appended to the record (the first ones replace
    it: a resumed run's file on the head node has its earlier lines too). A context manager (a
    thread of its own); a head node it cannot read is tried again at the next poll, ``fetch`` at the
    run's end has the last word."""

    def __init__(self, state: ClusterState, run: RunSpec, dest: Path, every_s: float | None = None) -> None:
        self.state, self.run, self.dest = state, run, dest
        self.every_s = every_s if every_s is not None else every_from(os.environ)
        self.brought = 0  # bytes of the head node's file already in the record
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None

    def __enter__(self) -> Follower:
        if (self.run.snapshot_dir or "").startswith("s3://") or not self.state.nodes:
            return self  # nothing is fetched from S3
        self._thread = threading.Thread(target=self._loop, name="ddpctl-metrics", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._conn is not None:
            self._conn.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.poll()
            except Exception:  # an unreachable head node for a moment: the next poll, then fetch, tries again
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

    def poll(self) -> int:
        """Bring the new whole lines now; how many bytes were brought."""
        new = self._new_bytes()
        whole = new[: new.rfind(b"\n") + 1]  # a line being written comes at the next poll
        if whole and not self.brought:  # the record starts as the head's file (a resumed run's has its lines)
            from ..model.store import atomic_write

            atomic_write(self.dest, whole.decode(errors="replace"))
        elif whole:
            fd = os.open(self.dest, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with open(fd, "ab") as f:
                f.write(whole)
        self.brought += len(whole)
        return len(whole)

    def _new_bytes(self) -> bytes:
        path, head = remote_path(self.state, self.run), self.state.nodes[0]
        if head.ssh is None:
            try:
                with open(path, "rb") as f:
                    f.seek(self.brought)
                    return f.read()
            except FileNotFoundError:
                return b""
        if self._conn is None:
            from ..hosts.connections import connect

            self._conn = connect(head.ssh)
        command = f"tail -c +{self.brought + 1} -- {shlex.quote(path)} 2>/dev/null || true"
        result = self._conn.run(command, hide=True, warn=True, in_stream=False, timeout=60, encoding="utf-8")
        return result.stdout.encode()


def follow(
    run_dir: Path,
    alive: Callable[[], bool],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[dict[str, Any]]]:
    """The record's metric lines now (the first batch), then each poll's new ones while ``alive()``
    says the run goes on, and the last ones once it has ended. The file is read by its path each
    time (``fetch`` replaces it whole at the end, with the same lines first)."""
    offset, first = 0, True
    while True:
        running = alive()  # read before the lines: none is missed at the end
        lines, offset = _read_on(run_dir / FILE, offset)
        if lines or first:
            yield lines
        first = False
        if not running:
            return
        sleep(POLL_S)


def _read_on(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The whole lines after ``offset`` bytes, and where they end."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    whole = data[: data.rfind(b"\n") + 1]
    return parse(whole.decode(errors="replace")), offset + len(whole)


#: how ``line_text`` says each key: a label before the value, or a unit after it
SAID = {
    "step": "step {}",
    "epoch": "epoch {}",
    "loss": "loss {}",
    "accuracy": "accuracy {}%",
    "samples_per_s": "{} samples/s",
    "tokens_per_s": "{} tokens/s",
    "mfu": "MFU {}",
    "gpu_mem_gb": "GPU {} GiB",
}


def line_text(doc: dict[str, Any]) -> str:
    """One metric line as ``metrics --follow`` prints it: ``epoch | step 71 | epoch 1 | loss 0.41 | ...``."""
    parts = [str(doc.get("kind", "line"))]
    parts += [SAID[k].format(cell(k, doc[k])) for k in SAID if doc.get(k) is not None]
    return " | ".join(parts)


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


#: the picture formats ``--png`` draws (by FILE's suffix), matplotlib's Agg canvas's, named here so that
#: a wrong one is refused before matplotlib is imported (seconds) and before the run's lines are read
PICTURE_FORMATS = ("png", "svg", "svgz", "pdf", "jpg", "jpeg", "webp", "tif", "tiff", "gif", "eps", "ps")


def check_picture(path: str) -> Path:
    """``--png FILE``, refused in one line before anything is drawn: a name with a picture format's
    suffix (``PICTURE_FORMATS``) in a folder where a file can be made (``check_file``). The absolute
    path it is drawn to."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if path.strip() and Path(path).name.strip() and suffix not in PICTURE_FORMATS:
        said = f"a .{suffix} file" if suffix else "a name without a suffix"
        raise UsageError(
            f"--png {path}: {said} is not a picture format ddpctl draws: end the name in .png "
            f"(or .{', .'.join(f for f in PICTURE_FORMATS if f != 'png')})"
        )
    return check_file("--png", path, "curves.png")


def check_file(flag: str, path: str, example: str) -> Path:
    """A file an option writes (``--png FILE``, ``--csv FILE``), refused in one line before anything is
    read or written: a name, in a folder that exists and where a file can be made (tried: a mode bit
    says nothing in /proc), not a folder, writable where it exists. Its absolute path."""
    if not path.strip() or not Path(path).name.strip():
        raise UsageError(f"{flag} {path!r} is not a file name: give one such as {flag} {example}")
    target = Path(os.path.abspath(path))
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(
            f"{flag} {path}: the folder {folder} does not exist: make it, or give a file in another folder"
        )
    if target.is_dir():
        raise UsageError(f"{flag} {path} is a folder: give a file name in it, such as {target / example}")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".ddpctl-out-")
    except OSError as exc:
        raise UsageError(
            f"{flag} {path}: no file can be made in {folder} ({exc.strerror or exc}): give a file in a folder you can write"
        ) from None
    os.close(fd)
    os.unlink(probe)
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{flag} {path} exists and cannot be written: give another file, or make it writable")
    return target


def number(value: object) -> bool:
    """A value a curve can hold: a finite number (not true/false, not a string)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
