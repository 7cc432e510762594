"""The head node's own state home for its cluster (``up --head-instance-profile``): what ddpctl on the
head needs to replace a lost node itself, with the head's instance profile's credentials alone
(docs/aws-head-iam-policy.json), this machine gone.

On this machine, ``files`` (pure) says what goes there: the cluster's state as the head sees the
cluster (every node by its private address: ``private_ip`` on), this state home's id (the head's home
answers with it, so that ``spot_plan.ours`` proves an instance the cluster's by its tags), the
cluster's SSH key (the key pair EC2 puts on each of its instances: a replacement is reached with it),
the nodes' mesh key pair (``keys/``: the ssh_mesh role run again on every node finds it rather than
making another) and known_hosts. Nothing else of the home goes: no other cluster, no run, no AWS
setting or credential. ``code`` packs ddpctl's own code as a wheel lays it out (``ddpctl/infra``,
``ddpctl/playbooks``, ``ddpctl/training``), named by its content.

On the head, the home is marked as the head's (``on_head``): the provider's ``replace_lost_nodes`` first
``settle``s it (the SSH files and each node's connection written for the head's own paths, from the
state and known_hosts it was sent) and names the head's policy where a call is refused
(``runs/head_replace.py`` is the program that asks it).
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...model.state import ClusterState
from ...model.store import HOME_ID_FILE, StateStore
from . import configure
from .plan import plan_from_spec
from .spot_plan import known_host_keys, launched_nodes

if TYPE_CHECKING:  # pragma: no cover
    import fabric

#: the file that marks a state home as a head node's (``on_head``)
HEAD_MARK = "head-home"
#: ddpctl's packages the head runs, each as a wheel installs it under ``ddpctl/`` (the CLI's are not needed)
CODE = ("infra", "playbooks", "training")
SKIPPED = ("__pycache__", ".pyc", ".pyo")


def files(state: ClusterState, store: StateStore) -> dict[str, tuple[bytes, int]]:
    """The head's state home, by path under it: each file's content and mode."""
    name = state.name
    seen = ClusterState.from_dict(state.to_dict())  # a copy
    seen.spec = replace(seen.spec, options={**seen.spec.options, "private_ip": True})
    out = {
        HEAD_MARK: (
            b"the head node's copy of one cluster's state, sent by ddpctl (providers/aws/head_home.py)\n",
            0o600,
        ),
        HOME_ID_FILE: (f"{store.home_id()}\n".encode(), 0o600),
        f"clusters/{name}.json": ((json.dumps(seen.to_dict(), indent=2) + "\n").encode(), 0o600),
    }
    cluster_dir = store.cluster_dir(name)
    kept = [cluster_dir / "id_ed25519", cluster_dir / "id_ed25519.pub", cluster_dir / "known_hosts"]
    keys = cluster_dir / "keys"
    kept += sorted(p for p in keys.iterdir() if p.is_file()) if keys.is_dir() else []
    for path in kept:
        if path.is_file():
            out[f"clusters/{name}/{path.relative_to(cluster_dir)}"] = (path.read_bytes(), 0o600)
    return out


def code(root: Path | None = None) -> tuple[str, bytes]:
    """ddpctl's code for the head (``root``: the ``infra`` package's parent, as installed or checked out):
    its content's hash (12 hex digits) and a tar.gz of ``ddpctl/...``."""
    infra = Path(__file__).resolve().parents[2] if root is None else root / "infra"
    places = {package: infra.parent / package for package in CODE}  # a wheel's ddpctl/, or the checkout's top
    entries: list[tuple[str, bytes]] = [("ddpctl/__init__.py", b'"""ddpctl\'s code on the head node."""\n')]
    for package in CODE:
        top = places[package]
        for path in sorted(top.rglob("*")):
            rel = path.relative_to(top)
            if path.is_file() and not any(part.endswith(SKIPPED) or part in SKIPPED for part in rel.parts):
                entries.append((f"ddpctl/{package}/{rel.as_posix()}", path.read_bytes()))
    digest = hashlib.sha256()
    for path, data in entries:
        digest.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:12], tar(entries)


def tar(entries: list[tuple[str, bytes]], mode: int = 0o644) -> bytes:
    """A tar.gz of ``entries`` (path, content), each file ``mode``, its folders 0755; owned by no one."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path, data in entries:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def on_head(store: StateStore) -> bool:
    """``store`` is the head's own state home (``files`` sent it): the provider works from there."""
    return (store.home / HEAD_MARK).is_file()


def settle(store: StateStore, name: str) -> ClusterState:
    """On the head: the cluster's SSH files (ssh_config, inventory, known_hosts) and each node's
    connection, written for this home's paths and the nodes' private addresses; the state saved."""
    state = store.load(name)
    plan = plan_from_spec(state.spec, state.cluster_id, str(store.cluster_dir(name)), store.home_id())
    nodes = launched_nodes(state, True, {})  # plan.private_ip: on, as ``files`` sent it
    known = store.cluster_dir(name) / "known_hosts"
    host_keys = known_host_keys(known.read_text() if known.is_file() else "", nodes, True)
    written = configure.cluster_files(plan, nodes, host_keys)
    hosts = {n.name: configure.cluster_host(plan, n, written) for n in nodes}
    state.nodes = [replace(n, ssh=hosts[n.name]) for n in state.nodes]
    store.save(state)
    return state


@dataclass(frozen=True)
class OnHead:
    """Where ``ship`` put the state home and ddpctl's code on the head."""

    home: str
    code: str  # the folder to put on PYTHONPATH: it holds ``ddpctl/``


def ship(conn: fabric.Connection, where: str, state: ClusterState, store: StateStore) -> OnHead:
    """The head's state home (``files``) at ``where/home``, in place of any there, and ddpctl's code at
    ``where/code-HASH``, kept (a later run with the same code finds it); all the user's alone (0700)."""
    digest, archive = code()
    home, code_dir = f"{where}/home", f"{where}/code-{digest}"
    q, qh, qc = shlex.quote(where), shlex.quote(home), shlex.quote(code_dir)
    conn.run(f"umask 077 && mkdir -p {q} && rm -rf {qh}.tar.gz {qh}.new", hide=True, in_stream=False)
    conn.put(io.BytesIO(tar([(p, data) for p, (data, _) in files(state, store).items()], 0o600)), f"{home}.tar.gz")
    unpack = (
        f"umask 077 && mkdir {qh}.new && tar -xzf {qh}.tar.gz -C {qh}.new && rm {qh}.tar.gz && "
        f"rm -rf {qh} && mv {qh}.new {qh}"
    )
    conn.run(unpack, hide=True, in_stream=False)
    if not conn.run(f"test -d {qc}", hide=True, warn=True, in_stream=False).ok:
        conn.put(io.BytesIO(archive), f"{code_dir}.tar.gz")
        conn.run(
            f"umask 022 && rm -rf {qc}.new && mkdir {qc}.new && tar -xzf {qc}.tar.gz -C {qc}.new && "
            f"rm {qc}.tar.gz && mv -T {qc}.new {qc}",
            hide=True,
            in_stream=False,
        )
    return OnHead(home, code_dir)


#: the program the head runs for a lost node (``runs/head_replace.py``), as the shipped code names it
PROGRAM = "ddpctl.infra.runs.head_replace"


def replacer(state: ClusterState, store: StateStore) -> Callable[[fabric.Connection, str], list[str]] | None:
    """``Renew.on_head`` for a cluster whose head has ddpctl's environment (the head_controller role's,
    ``NodeInfo.controller``): ship the cluster's state as it is then, and the code, to a folder on the
    head; the command line the head's supervisor runs for a lost node. None: the head has none (a
    cluster configured before, or ``up --no-configure``): its lost nodes are replaced from here."""
    head = state.nodes[0] if state.nodes else None
    if head is None or not head.controller:
        return None
    python = head.controller

    def ship_to(conn: fabric.Connection, where: str) -> list[str]:
        there = ship(conn, where, store.load(state.name), store)
        return ["env", f"PYTHONPATH={there.code}", python, "-m", PROGRAM, there.home, state.name]

    return ship_to
