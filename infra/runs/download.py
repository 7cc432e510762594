"""``ddpctl download RUN_ID``: a run's outputs copied from its cluster while that is up (``outputs.py``
measures and fetches them), else from what the run's record kept of them."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..model.errors import DdpctlError, UsageError
from ..model.progress import Progress
from ..model.store import StateStore
from . import outputs
from .outputs import Recorded, RunFolder
from .records import OUTPUTS, read_options, refuse_queued


@dataclass(frozen=True)
class Downloaded:
    """What ``ddpctl download`` copied: a run's outputs, from where, into where."""

    run_id: str
    source: str  # cluster:path, or the run's kept outputs
    dest: str
    size_bytes: int
    files: int

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def download(store: StateStore, run_id: str, to: Path | None, progress: Progress) -> Downloaded:
    """``ddpctl download RUN_ID [--to DIR]``: the run's outputs from its cluster, while that is up, into
    ``DIR/<run id>`` (default: the run's record, ``runs/<id>/outputs``); where its cluster is gone, its
    kept outputs."""
    path = store.run_dir(run_id) / "options.json"
    if not path.is_file():
        refuse_queued(store, run_id, "so it has no outputs yet")
        raise UsageError(f"no run {run_id!r} under {store.home}: `ddpctl runs` lists them")
    run = next((r for r in outputs.recorded(store) if r.run_id == run_id), None)
    if run is None:
        read_options(path)  # raises, saying what is damaged
        raise UsageError(f"the record of run {run_id!r} cannot be read")
    if run.snapshot_dir.startswith("s3://"):
        raise UsageError(
            f"run {run_id} wrote its outputs to {run.snapshot_dir}, not to its cluster: "
            f"`aws s3 cp --recursive {run.snapshot_dir} DIR` fetches them"
        )
    kept = store.run_dir(run_id) / OUTPUTS
    store.refuse_links(kept)  # replaced below: never through a link to a folder of the user's
    if to is None:
        dest = kept
    else:
        _check_into(to)
        dest = Path(os.path.abspath(to / run_id))  # not resolved: a link there is the user's folder
        if os.path.lexists(dest):  # the user's folder: never replaced, never deleted
            raise UsageError(f"{dest} already exists: move it away, or give another --to")
    try:
        return _download(store, run, kept, dest, progress)
    except OSError as exc:  # a folder that cannot be written (/proc, a full disk): nothing left behind
        raise UsageError(
            f"could not write run {run_id}'s outputs into {dest} ({exc.strerror or exc}): "
            "give --to a folder you can write, with room for them"
        ) from None


def _check_into(to: Path) -> None:
    """``--to``: a folder, or a path where one can be made (a file, a device, is refused)."""
    probe = Path(os.path.abspath(to))
    if probe.exists() and not probe.is_dir():
        raise UsageError(f"--to {to} is not a folder: give a folder to copy the run's outputs into")
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--to {to}: {probe} is not a folder you can write: give a folder you can write")


def _download(store: StateStore, run: Recorded, kept: Path, dest: Path, progress: Progress) -> Downloaded:
    """``download``'s copy into ``dest`` (checked by ``download``)."""
    from ..model import locks
    from ..node_programs.outputs import size

    run_id = run.run_id
    if store.exists(run.cluster) and not run.ephemeral:
        with locks.cluster(store, run.cluster, "download", shared=True):  # `down` waits for the copy
            state = store.load(run.cluster)
            if run.ran_on(state) and state.nodes:
                outputs.refuse_taken_down(state, run_id)
                found = outputs.measure(state, [RunFolder(run_id, outputs.folder(state, run))])
                if not found:
                    raise DdpctlError(
                        f"run {run_id} left no outputs on {run.cluster!r} (nothing in {outputs.folder(state, run)})"
                    )
                f = found[0]
                progress(
                    f"fetching run {run_id}'s outputs ({outputs.size_text(f.size_bytes or 0)}) from {f.path} into {dest}"
                )
                outputs.fetch(store, state, f.path, dest)
                return Downloaded(run_id, f"{run.cluster}:{f.path}", str(dest), f.size_bytes or 0, f.files)
    got = size(str(kept))
    if got is None:
        raise DdpctlError(f"run {run_id}'s cluster {run.cluster!r} is down and kept none of its outputs")
    if dest != kept:
        progress(f"run {run_id}'s cluster {run.cluster!r} is down: copying its kept outputs into {dest}")
        try:
            shutil.copytree(kept, dest, symlinks=True)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)  # made here just now (it did not exist): nothing half-copied
            raise
    else:
        progress(f"run {run_id}'s cluster {run.cluster!r} is down: its outputs are kept in {kept}")
    return Downloaded(run_id, str(kept), str(dest), got[0], got[1])
