"""The local provider: N "nodes" on this machine, each a torchrun agent with its own work directory.

No root, no SSH, no cloud. Rendezvous is c10d on 127.0.0.1; resources are directories under the
state home, plus the processes of the cluster's runs (found by their environment marker).
"""

from __future__ import annotations

import errno
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from ..launch.local_executor import LocalExecutor
from ..launch.supervise import OutputLine
from ..launch.torchrun import run_snapshot_dir
from ..model.errors import UsageError
from ..model.spec import ClusterSpec, RunSpec
from ..model.state import ClusterPhase, ClusterState, NodeInfo, Resource, ResourcePhase, Salvage
from ..model.store import StateStore
from ..model.torch_versions import check_torch
from ..node_programs import writable
from ..tools.install import pip_install
from ..tools.procs import CLUSTER_KEY, stop_tagged
from .base import Progress, Provider

HOST = "127.0.0.1"
#: Every rank runs on this machine: at most this many per CPU it may use.
LOCAL_RANKS_PER_CPU = 4


class LocalProvider(Provider):
    """Local nodes split this machine's GPUs between them (``split_gpus``): each node's ranks see
    its own through CUDA_VISIBLE_DEVICES (``NodeInfo.devices``), counted once, when it is planned."""

    name = "local"
    no_autodown_why = "its nodes are processes on this machine, which bill nothing"
    remote_nodes = False  # every rank on this machine: its CPUs, its Python, its files

    def check_up(self, spec: ClusterSpec) -> None:
        check_local_ranks(spec.nodes, spec.nproc_per_node or 1)
        if spec.python != sys.executable:
            check_torch(check_local_python(spec.python), f"--python {spec.python}")
        elif (version := installed_torch()) is not None:  # none: preflight says how to install it
            check_torch(version, f"this Python ({spec.python})")

    def check_run(self, cluster: ClusterState, run: RunSpec, python: str | None, *, cluster_exists: bool) -> None:
        check_local_ranks(run.nodes, run.nprocs())
        check_local_snapshot_dir(run.node_snapshot_dir)
        if python and cluster_exists and python != cluster.spec.python:
            raise UsageError(
                f"--python {python}: cluster {cluster.name!r} is up with {cluster.spec.python}, and a run uses its "
                f"cluster's Python: leave --python out, or `ddpctl down --name {cluster.name}` and `ddpctl up --python ...`"
            )
        # a new cluster's Python: check_up

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        root = store.cluster_dir(spec.name)
        cpus = max(1, (os.cpu_count() or 1) // spec.nodes)
        shares = split_gpus(local_gpus(), spec.nodes)
        nodes = [
            NodeInfo(
                name=f"node{i}",
                host=HOST,
                workdir=str(root / f"node{i}"),
                cpus=cpus,
                ifname=loopback_ifname(),
                gpus=len(share),
                devices=",".join(share),
            )
            for i, share in enumerate(shares)
        ]
        cluster_id = uuid.uuid4().hex[:12]
        resources = [Resource("dir", str(root))]
        resources += [Resource("dir", n.workdir) for n in nodes]
        resources += [Resource("dir", str(root / "shared")), Resource("processes", f"{CLUSTER_KEY}={cluster_id}")]
        return ClusterState(
            spec=spec,
            cluster_id=cluster_id,
            status=ClusterPhase.PLANNED,
            shared_dir=str(root / "shared"),
            nodes=nodes,
            resources=resources,
            ephemeral=ephemeral,
        )

    def ready(self, state: ClusterState, store: StateStore, progress: Progress) -> Callable[[], str]:
        python = state.spec.python  # it has torch (an other --python: check_up asked it), else the first run fails
        if python == sys.executable and installed_torch() is None:
            raise UsageError(_no_torch(python))

        def create() -> str:
            for res in state.resources:
                if res.kind == "dir":
                    Path(res.id).mkdir(parents=True, exist_ok=True)
                res.status = ResourcePhase.CREATED
            return (
                f"local cluster {state.name!r} is up: {len(state.nodes)} node(s) under {store.cluster_dir(state.name)}"
            )

        return create

    def delete(self, state: ClusterState, store: StateStore, progress: Progress, *, persisted: bool) -> str:
        stopped = stop_tagged(CLUSTER_KEY, state.cluster_id)
        if stopped:
            progress(f"stopped {stopped} process(es) of cluster {state.name!r}")
        root = store.cluster_dir(state.name)
        for res in reversed(state.resources):
            if res.kind == "dir" and not store.remove_tree(state.name, res.id) and Path(res.id).exists():
                progress(f"left {res.id}: not inside {root}, which is all `down` removes")
            res.status = ResourcePhase.DELETED
        return f"local cluster {state.name!r} is down"  # its own folder goes next, whatever the record says

    def down_damaged(self, name: str, found: Salvage, store: StateStore, progress: Progress) -> None:
        """Stop the processes by their marker (the cluster id, else the shared directory every
        rank is given), then remove the cluster's directory, which holds all it made."""
        root = store.cluster_dir(name)
        if found.cluster_id:
            stopped = stop_tagged(CLUSTER_KEY, found.cluster_id)
        else:
            stopped = stop_tagged("DDPCTL_SHARED_DIR", str(root / "shared"))
        if stopped:
            progress(f"stopped {stopped} process(es) of cluster {name!r}")
        store.remove_tree(name, root)
        progress(f"local cluster {name!r} is down")

    def keep_outputs(self, state: ClusterState, run: RunSpec, dest: Path) -> bool:
        src = Path(run_snapshot_dir(state.shared_dir, run.run_id))
        if run.snapshot_dir or not src.is_dir() or not any(src.iterdir()):
            return False
        shutil.copytree(src, dest, dirs_exist_ok=True)
        return True

    def rdzv_port(self, state: ClusterState, requested: int | None) -> int:
        port = requested or state.spec.port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port or 0))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UsageError(
                        f"port {port} is in use on {HOST}: choose another with --port, or leave --port out"
                    ) from None
                raise
            return sock.getsockname()[1]

    def preflight(self, state: ClusterState) -> None:
        python = state.spec.python
        if not shutil.which(python):
            raise UsageError(f"python {python!r} not found: pass --python with the interpreter that has torch")
        check = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
        if subprocess.run([python, "-c", check], check=False).returncode != 0:
            raise UsageError(_no_torch(python))

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]) -> LocalExecutor:
        return LocalExecutor(sink)


def loopback_ifname() -> str | None:
    """The loopback interface's name ('lo' on Linux), for GLOO/NCCL_SOCKET_IFNAME."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in names if n == "lo" or n.startswith("lo")), None)


PROVIDER = LocalProvider()


def local_cpus() -> int:
    """The CPUs this process may use (its affinity mask, as in a container), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


#: ``nvidia-smi -L``'s lines: "GPU 0: NVIDIA H200 (UUID: GPU-0b5c...)"
SMI_LINE = re.compile(r"^GPU (?P<index>\d+):.*\(UUID: (?P<uuid>[^)\s]+)\)", re.MULTILINE)


def local_gpus() -> tuple[str, ...]:
    """This machine's GPUs, as CUDA_VISIBLE_DEVICES names them: ``nvidia-smi -L``'s indices (none
    where there is no nvidia-smi or it fails), narrowed to the caller's own ``CUDA_VISIBLE_DEVICES``
    where it is set (its entries, indices or UUIDs, that nvidia-smi lists; empty: none)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return visible_gpus(out.stdout if out.returncode == 0 else "", os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_gpus(listing: str, visible: str | None) -> tuple[str, ...]:
    """``local_gpus`` from ``nvidia-smi -L``'s text and the caller's CUDA_VISIBLE_DEVICES (pure)."""
    found = [(m["index"], m["uuid"]) for m in SMI_LINE.finditer(listing)]
    if visible is None:
        return tuple(index for index, _ in found)
    names = {index for index, _ in found} | {uuid for _, uuid in found}
    return tuple(entry for entry in (e.strip() for e in visible.split(",")) if entry in names)


def split_gpus(gpus: tuple[str, ...], nodes: int) -> list[tuple[str, ...]]:
    """Each local node's share of this machine's GPUs (pure): as even as can be, in order, the first
    nodes one more where they do not divide (3 GPUs on 2 nodes: 0,1 and 2). No GPUs: every node
    none (CPU nodes). Fewer GPUs than nodes is refused: a node with none would run its ranks on the
    CPU while the others use NCCL, and two nodes on one GPU is what NCCL refuses."""
    if not gpus:
        return [()] * nodes
    if len(gpus) < nodes:
        raise UsageError(
            f"{nodes} local node(s) but this machine has {len(gpus)} GPU(s) (nvidia-smi -L), and each local node "
            f"gets GPUs of its own: use --nodes {len(gpus)} or fewer (--nproc-per-node runs more ranks on a node), "
            "or run every node on the CPU with CUDA_VISIBLE_DEVICES= set (empty) for ddpctl"
        )
    base, extra = divmod(len(gpus), nodes)
    shares, start = [], 0
    for i in range(nodes):
        size = base + (1 if i < extra else 0)
        shares.append(gpus[start : start + size])
        start += size
    return shares


def check_local_ranks(nodes: int, nprocs: tuple[int, ...] | int) -> None:
    """The local provider runs every rank as a process on this machine: a bound tied to its CPUs."""
    total = sum(nprocs) if isinstance(nprocs, tuple) else nodes * nprocs
    cpus = local_cpus()
    limit = LOCAL_RANKS_PER_CPU * cpus
    if total > limit:
        raise UsageError(
            f"{nodes} local node(s) would run {total} ranks on this machine, which has {cpus} CPU(s): at most "
            f"{limit} ({LOCAL_RANKS_PER_CPU} per CPU, each rank a Python process with torch); use fewer --nodes "
            "or --nproc-per-node, or a provider with more machines"
        )


def installed_torch() -> str | None:
    """The torch distribution's version in ddpctl's own Python, read without importing torch."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_local_python(python: str, flag: str = "--python") -> str:
    """The interpreter the local provider runs torchrun with: it must import torch and say its version.

    Judged by what it prints, not by its exit status (``/bin/true`` exits 0 and runs nothing).
    Returns the torch version.
    """
    probe = "import sys, torch; sys.stdout.write('ddpctl-torch ' + torch.__version__ + chr(10))"
    try:
        out = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise UsageError(f"{flag} {python}: no such file: give the Python that has torch") from None
    except (PermissionError, IsADirectoryError, OSError) as exc:
        raise UsageError(
            f"{flag} {python} cannot be run ({exc.strerror or exc}): give the Python that has torch"
        ) from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{flag} {python} did not import torch within 300 s: give the Python that has torch") from None
    match = re.search(r"^ddpctl-torch (\S+)$", out.stdout, re.MULTILINE)
    if out.returncode == 0 and match:
        return match.group(1)
    if "No module named 'torch'" in out.stderr:
        raise UsageError(f"torch is not installed for {flag} {python}: run `{pip_install('train', python)}`")
    last = (out.stderr.strip().splitlines() or [""])[-1][:200]
    said = f" ({last})" if last else f" (exit status {out.returncode}, no torch version printed)"
    raise UsageError(f"{flag} {python} is not a Python that imports torch{said}: give the Python that has torch")


def check_local_snapshot_dir(path: str) -> None:
    """``--snapshot-dir`` for local nodes (processes of this user on this machine): a directory they can
    write, or can create (the trainer makes it), found now rather than when the first snapshot fails."""
    if not path:
        return
    reason = writable.problem(path)
    if reason:
        raise UsageError(
            f"--snapshot-dir {path}: {reason} (the local nodes run as you): give a directory you can write"
        )


def _no_torch(python: str) -> str:
    return f"torch is not installed for {python}: run `{pip_install('train', python)}`"
