"""A run's record on this machine brought up to date from the head node, where its supervisor
(``launch/head_agent.py``) writes ``output.log`` and ``run.json``: for a run whose ddpctl here
ended (SIGKILL, a closed laptop) before it read the end of the run.
"""

from __future__ import annotations

import json
import shlex

from ..launch import head
from ..model import locks
from ..model.store import StateStore, atomic_write
from .records import ON_HEAD


def unfinished(store: StateStore, run_id: str) -> str | None:
    """The cluster of a run supervised on its head node (``on_head`` in its options.json), recorded
    here without a result and with no ddpctl here holding it."""
    run_dir = store.run_dir(run_id)
    if (run_dir / "run.json").exists() or not (run_dir / "options.json").exists() or locks.run_alive(store, run_id):
        return None
    try:
        options = json.loads((run_dir / "options.json").read_text())
        cluster, on_head = options["cluster"], options.get("on_head") is True
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cluster if on_head and store.exists(cluster) else None


def _head(store: StateStore, run_id: str):
    """For a run supervised on its head node, recorded here without a result and held by no ddpctl
    here: its cluster's name, an open connection to the head node and the run's folder there; None
    where there is none to reach (no such run or node, an unreachable head)."""
    from ..hosts.connections import connect

    cluster = unfinished(store, run_id)
    if cluster is None:
        return None
    try:
        state = store.load(cluster)
        node = state.nodes[0] if state.nodes else None
        if node is None or node.ssh is None:
            return None
        return cluster, connect(node.ssh), head.folder(node.workdir, run_id)
    except Exception:  # an unreachable head, a damaged state: the record stays as it is
        return None


def bring_up_to_date(store: StateStore, run_id: str) -> bool:
    """Copy the head's output.log (and run.json, once written) of ``run_id`` here. True where the
    head's supervisor has written the record; False where there is nothing to do or reach."""
    found = _head(store, run_id)
    if found is None:
        return False
    cluster, conn, where = found
    try:
        doc = head.read_record(conn, where)
        got = conn.run(f"cat {shlex.quote(where)}/output.log", hide=True, warn=True, in_stream=False)
        if not got.ok:
            return False
        run_dir = store.run_dir(run_id)
        atomic_write(run_dir / "output.log", got.stdout)
        (run_dir / ON_HEAD).unlink(missing_ok=True)
        if doc is None:
            if head.pid_alive(conn, where):
                atomic_write(run_dir / ON_HEAD, "")
            return False
        doc["cluster"] = cluster
        atomic_write(run_dir / "run.json", json.dumps(doc, indent=2) + "\n")
        return True
    finally:
        conn.close()


def bring_all_up_to_date(store: StateStore) -> None:
    for run_dir in sorted((store.home / "runs").glob("*/")):
        bring_up_to_date(store, run_dir.name)


def stop_on_head(store: StateStore, run_id: str) -> bool:
    """Ask the head's supervisor of a run that no ddpctl here holds to stop it (SIGINT, as Ctrl-C),
    and wait for its record. False where the run does not run on its head node."""
    found = _head(store, run_id)
    if found is None:
        return False
    _, conn, where = found
    try:
        pid = head.pid_alive(conn, where)
        if not pid:
            return False
        head.attach(conn, where, pid, lambda line: None, interrupt=True)
    finally:
        conn.close()
    bring_up_to_date(store, run_id)
    return True
