"""Runs' outputs that exist only on a cluster: which they are, how big, and copying them back.

A run writes its snapshots (and ``metrics.jsonl``) to its own folder on the cluster
(``DDPCTL_SNAPSHOT_DIR``: the cluster's shared directory, else the head node's work directory) or to
the ``--snapshot-dir`` it was given. ``down`` deletes ddpctl's folders on the nodes, and a provider
whose nodes go with ``down`` (``Provider.disks_go_with_down``) deletes every folder on them: what a
run left there is found here (``to_keep``, pure), measured on the head node and copied into the
run's record (``runs/<id>/outputs``, where a run on a cluster brought up for it already keeps its
own), before ``down`` deletes it; ``ddpctl download`` (``download.py``) copies it at any time. Snapshots in ``s3://``
outlive the cluster: nothing is copied for them.

Over SSH, the head node runs ``node_programs/outputs.py``: the sizes, then each folder as a tar
stream read straight off the connection (the same strict connection as every other; ``infra/hosts/connections.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..launch.torchrun import run_snapshot_dir
from ..model.errors import DdpctlError, UsageError
from ..model.progress import Progress
from ..model.state import ClusterPhase, ClusterState
from ..model.store import StateStore
from ..providers.base import Provider
from .records import OUTPUTS, read_options


@dataclass(frozen=True)
class Recorded:
    """What a run's record says of where it ran and wrote (``runs/<id>/options.json``)."""

    run_id: str
    cluster: str
    cluster_id: str  # "": recorded before ddpctl wrote it (then its start time tells)
    ephemeral: bool  # on a cluster brought up for it: kept when it ended
    snapshot_dir: str  # "": its own folder on the cluster
    started: float  # epoch seconds

    def ran_on(self, state: ClusterState) -> bool:
        """The run was on this cluster (not an earlier one of the same name)."""
        if self.cluster != state.name:
            return False
        return self.cluster_id == state.cluster_id if self.cluster_id else self.started >= state.created_at


@dataclass(frozen=True)
class RunFolder:
    """A run's output folder on a cluster, and what it holds (None: not measured yet)."""

    run_id: str
    path: str  # on the head node (absolute); for nodes on this machine, here
    size_bytes: int | None = None
    files: int = 0


def recorded(store: StateStore) -> list[Recorded]:
    """Every run record that can be read, oldest first (a damaged one is `ddpctl runs`' to show)."""
    found = []
    for path in (d / "options.json" for d in store.run_dirs() if (d / "options.json").is_file()):
        try:
            doc, opts = read_options(path)
            started = path.stat().st_mtime
        except (UsageError, OSError):
            continue
        found.append(
            Recorded(
                path.parent.name,
                str(doc.get("cluster", "")),
                str(doc.get("cluster_id", "")),
                bool(doc.get("ephemeral")),
                opts.snapshot_dir,
                started,
            )
        )
    return sorted(found, key=lambda r: r.started)


def folder(state: ClusterState, run: Recorded) -> str:
    """Where the run's outputs are on the cluster's head node (pure): its --snapshot-dir, else its own
    folder, made absolute against the head's work directory (where the ranks start)."""
    path = run.snapshot_dir or run_snapshot_dir(state.shared_dir, run.run_id)
    if not path.startswith("/") and state.nodes:
        path = f"{state.nodes[0].workdir.rstrip('/')}/{path}"
    return path.rstrip("/") or "/"


def to_keep(runs: list[Recorded], state: ClusterState, *, disks_go: bool) -> list[RunFolder]:
    """The output folders of the runs on ``state`` that ``down`` would delete (pure): each run's own
    folder, and a ``--snapshot-dir`` of its own where the nodes' disks go with the cluster
    (``disks_go``); never an ``s3://`` one, nor a run on a cluster brought up for it (kept as it ended)."""
    out = []
    for run in runs:
        if not run.ran_on(state) or run.ephemeral or run.snapshot_dir.startswith("s3://"):
            continue
        if run.snapshot_dir and not disks_go:
            continue  # a folder of the user's own on nodes that stay
        out.append(RunFolder(run.run_id, folder(state, run)))
    return out


def size_text(size: int) -> str:
    """``812 B``, ``12.3 kB``, ``4.1 MB``, ``2.0 GB`` (powers of 1000, as `du --si`)."""
    if size < 1000:
        return f"{size} B"
    for unit in ("kB", "MB", "GB", "TB"):
        size /= 1000
        if size < 1000 or unit == "TB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def listed(folders: list[RunFolder]) -> str:
    """``run r1 (12.3 MB), run r2 (812 B)``, and the total where there are several (pure)."""
    each = ", ".join(f"run {f.run_id} ({size_text(f.size_bytes or 0)})" for f in folders)
    if len(folders) > 1:
        each += f"; {size_text(sum(f.size_bytes or 0 for f in folders))} in all"
    return each


def question(state: ClusterState, folders: list[RunFolder], *, keep: bool, runs_dir: Path) -> str:
    """What ``down`` asks before it takes a billed cluster down (pure)."""
    what = f"take down {state.spec.provider} cluster {state.name!r} ({state.spec.nodes} node(s)) and delete all it made"
    if not folders:
        return what
    where = f"copied first into {runs_dir}/<run id>/{OUTPUTS} (--no-keep-outputs skips that)"
    fate = where if keep else "deleted with it (--no-keep-outputs)"
    return f"{what}; run outputs only on the cluster: {listed(folders)}, {fate}"


# ---- what touches the nodes ----------------------------------------------------------------------


def measure(state: ClusterState, folders: list[RunFolder]) -> list[RunFolder]:
    """The folders that hold files on the head node, with their size; DdpctlError if it cannot be asked."""
    if not folders:
        return []
    head = state.nodes[0]
    if head.ssh is None:  # this machine's nodes
        from ..node_programs.outputs import size

        sizes = [size(f.path) for f in folders]
    else:
        sizes = _remote_sizes(state, [f.path for f in folders])
    return [replace(f, size_bytes=s[0], files=s[1]) for f, s in zip(folders, sizes) if s]


def _remote_sizes(state: ClusterState, paths: list[str]) -> list[list[int] | None]:
    from ..hosts.connections import connect
    from ..node_programs import command

    head = state.nodes[0]
    conn = connect(head.ssh)
    try:
        result = conn.run(
            command("python3", "outputs", "sizes", *paths),
            hide=True,
            warn=True,
            in_stream=False,
            timeout=120,
        )
    finally:
        conn.close()
    try:
        sizes = json.loads(result.stdout) if not result.exited else None
    except ValueError:
        sizes = None
    if not isinstance(sizes, list) or len(sizes) != len(paths):
        why = result.stderr.strip().splitlines()[-1:] or [f"exit {result.exited}"]
        raise DdpctlError(f"could not list runs' outputs on {head.name} of {state.name!r}: {why[0]}")
    return sizes


def fetch(store: StateStore, state: ClusterState, path: str, dest: Path) -> None:
    """Copy the folder ``path`` of the head node into ``dest`` (made, or replaced as a whole once the
    copy is complete: an interrupted copy leaves the old one). A ``dest`` that is a symbolic link, or
    under the home with a link on the way there (``runs``, ``runs/<id>``), is refused: what a link
    points to is not ours to replace (``download`` and ``down``'s keeping alike)."""
    store.refuse_links(dest)
    if dest.is_symlink():
        raise DdpctlError(f"{dest} is a symbolic link (to {os.readlink(dest)}): remove the link, or copy elsewhere")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        head = state.nodes[0]
        if head.ssh is None:
            shutil.copytree(path, part, dirs_exist_ok=True, symlinks=True)
        else:
            _remote_tar(state, path, part)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(part, dest)
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _remote_tar(state: ClusterState, path: str, into: Path) -> None:
    """The head's ``outputs.py tar PATH`` read off an SSH channel, unpacked into ``into`` (tarfile's
    ``data`` filter: no absolute names, no links out, no devices)."""
    from ..hosts.connections import connect
    from ..node_programs import command

    head = state.nodes[0]
    conn = connect(head.ssh)
    try:
        channel = conn.client.get_transport().open_session()
        channel.settimeout(300)  # a stalled node, not a slow copy: each read waits this long at most
        channel.exec_command(command("python3", "outputs", "tar", path))
        stream = channel.makefile("rb")
        try:
            with tarfile.open(fileobj=stream, mode="r|") as archive:
                _extract(archive, into)
        except tarfile.ReadError:
            pass  # nothing came: the exit status says why
        except tarfile.TarError as exc:  # a name outside the folder, a link out of it: not ours
            raise DdpctlError(f"refused what {head.name} sent for {path}: {exc}") from exc
        code = channel.recv_exit_status()
        if code:
            why = channel.makefile_stderr("rb").read().decode(errors="replace").strip().splitlines()[-1:]
            raise DdpctlError(f"could not copy {path} from {head.name}: {why[0] if why else f'exit {code}'}")
    finally:
        conn.close()


def _extract(archive: tarfile.TarFile, into: Path) -> None:
    """Unpack with tarfile's ``data`` filter; on a Python without it (3.10 before 3.10.12), its main
    rules by hand: regular files and folders only, no absolute names, nothing above ``into``."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, filter="data")
        return
    for member in archive:
        name = Path(member.name)
        if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
            continue
        member.mode = (member.mode & 0o755) | (0o700 if member.isdir() else 0o600)
        archive.extract(member, into)


def keep(store: StateStore, state: ClusterState, folders: list[RunFolder], progress: Progress) -> None:
    """Copy each measured folder into its run's record (``runs/<id>/outputs``), saying its size first.
    DdpctlError (naming ``--no-keep-outputs``) where one cannot be copied: the cluster stays."""
    for f in folders:
        dest = store.run_dir(f.run_id) / OUTPUTS
        progress(f"keeping run {f.run_id}'s outputs ({size_text(f.size_bytes or 0)}, {f.files} file(s)) in {dest}")
        try:
            fetch(store, state, f.path, dest)
        except (OSError, DdpctlError) as exc:
            raise DdpctlError(
                f"could not keep run {f.run_id}'s outputs ({exc}); {state.name!r} is still up: "
                f"`ddpctl down --name {state.name} --no-keep-outputs` takes it down without them"
            ) from exc


def refuse_taken_down(state: ClusterState, run_id: str) -> None:
    """A cluster that took itself down (autodown) is said so in one line, not taken for a head node
    that does not answer: a head kept stopped has the outputs on its disk, which `down` copies."""
    from ..providers import get_provider

    taken = get_provider(state.spec.provider).took_itself_down(state)
    if taken is None:
        return
    said = f"run {run_id}'s cluster {state.name!r} took itself down (autodown)"
    if taken.kept_head:
        raise DdpctlError(
            f"{said}: {state.nodes[0].name} is stopped with the runs' outputs on its disk; "
            f"`ddpctl down --name {state.name}` copies them here (then `ddpctl download {run_id}` reads them there)"
        )
    raise DdpctlError(
        f"{said} and its nodes' disks went, the run's outputs with them: "
        f"`ddpctl down --name {state.name}` deletes what is left"
    )


def before_down(
    progress: Progress, *, ask: Callable[[str], None] | None, keep: bool
) -> Callable[[Provider, ClusterState, StateStore], None]:
    """What ``down`` does first (``lifecycle.clusters.down``'s ``before``): the records and logs of
    runs that went on on the cluster's side brought here (``on_cluster``), then the runs' outputs that
    exist only on the cluster, named in the question a billed provider's ``down`` asks (``ask`` raises
    to stop), then copied into their run records unless not ``keep``."""

    def before(provider: Provider, state: ClusterState, store: StateStore) -> None:
        if state.status == ClusterPhase.UP and state.nodes:
            # a run that ended on the cluster's side with no ddpctl here (detached, its ddpctl gone):
            # its log and record come here while the head still has them
            from .on_cluster import runs_on_cluster

            going = runs_on_cluster(store, state.name)
            if going:  # as a run whose ddpctl here holds the cluster: never taken down under a run
                raise DdpctlError(
                    f"cluster {state.name!r} has run {going[0]} going on on it (its ddpctl here is gone): wait "
                    f"for it to end (`ddpctl logs --follow {going[0]}`), or stop it (`ddpctl stop {going[0]}`), "
                    "then `ddpctl down` again"
                )
        _keep_outputs(provider, state, store, progress, ask=ask, keeping=keep)

    return before


def _keep_outputs(
    provider: Provider,
    state: ClusterState,
    store: StateStore,
    progress: Progress,
    *,
    ask: Callable[[str], None] | None,
    keeping: bool,
) -> None:
    found = []
    if state.status == ClusterPhase.UP and state.nodes:  # runs only ever ran on a cluster that was up
        wanted = to_keep(recorded(store), state, disks_go=provider.disks_go_with_down)
        try:
            found = measure(state, wanted)
        except DdpctlError as exc:
            if keeping and provider.disks_go_with_down:  # the nodes go: what is on them would be lost
                raise DdpctlError(
                    f"{exc}: its runs' outputs cannot be kept; `ddpctl down --name {state.name} --no-keep-outputs` "
                    "takes it down without them"
                ) from exc
            # nodes that stay: a node `down` cannot reach keeps what is on it
            progress(f"warning: {exc}: the runs' outputs there are not copied back")
    if ask is not None and provider.billed:
        ask(question(state, found, keep=keeping, runs_dir=store.home / "runs"))
    if keeping:
        keep(store, state, found, progress)
