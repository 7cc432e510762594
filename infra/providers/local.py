"""The local provider: N "nodes" on this machine, each a torchrun agent with its own work directory.

No root, no SSH, no cloud. Rendezvous is c10d on 127.0.0.1; resources are directories under the
state home, plus the processes of the cluster's runs (found by their environment marker).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from ..launch.local import LocalExecutor
from ..launch.supervise import OutputLine
from ..procs import CLUSTER_KEY, stop_tagged
from ..spec import ClusterSpec
from ..state import ClusterState, NodeInfo, Resource, StateStore
from .base import Progress

HOST = "127.0.0.1"


class LocalProvider:
    name = "local"

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        root = store.cluster_dir(spec.name)
        cpus = max(1, (os.cpu_count() or 1) // spec.nodes)
        nodes = [
            NodeInfo(name=f"node{i}", host=HOST, workdir=str(root / f"node{i}"), cpus=cpus, ifname=loopback_ifname())
            for i in range(spec.nodes)
        ]
        cluster_id = uuid.uuid4().hex[:12]
        resources = [Resource("dir", str(root))]
        resources += [Resource("dir", n.workdir) for n in nodes]
        resources += [Resource("dir", str(root / "shared")), Resource("processes", f"{CLUSTER_KEY}={cluster_id}")]
        return ClusterState(
            spec=spec,
            cluster_id=cluster_id,
            status="planned",
            shared_dir=str(root / "shared"),
            nodes=nodes,
            resources=resources,
            ephemeral=ephemeral,
        )

    def up(self, state: ClusterState, store: StateStore, progress: Progress) -> ClusterState:
        state.status = "creating"
        store.save(state)  # every resource recorded before any is created
        for res in state.resources:
            if res.kind == "dir":
                Path(res.id).mkdir(parents=True, exist_ok=True)
            res.status = "created"
        state.status = "up"
        store.save(state)
        progress(
            f"local cluster {state.name!r} is up: {len(state.nodes)} node(s) under {store.cluster_dir(state.name)}"
        )
        return state

    def down(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        state.status = "deleting"
        store.save(state)
        stopped = stop_tagged(CLUSTER_KEY, state.cluster_id)
        if stopped:
            progress(f"stopped {stopped} process(es) of cluster {state.name!r}")
        for res in reversed(state.resources):
            if res.kind == "dir":
                shutil.rmtree(res.id, ignore_errors=True)
            res.status = "deleted"
        store.delete(state.name)
        progress(f"local cluster {state.name!r} is down")

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
            raise UsageError(
                f"torch is not installed for {python}: run `pip install 'ddpctl[train]'` in that environment"
            )

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
