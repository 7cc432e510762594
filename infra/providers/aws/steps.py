"""Record the step in the state, then create the resource: the one way both providers' ``up``
(``aws/up.py``, ``pcluster/up.py``) make what they plan.

The state lists every resource as ``planned`` before the first is made; ``Steps.step`` makes one
and records it ``created`` with what AWS returned, with a DDPCTL_FAULT point (``faults.py``) on
either side of the call. A crash between the call and the state write leaves a resource that only
its tags find, and ``down`` looks for those too; a retried create takes over what the first try
made (``adopt``), and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ...model.details import Detail
from ...model.errors import DdpctlError
from ...model.progress import Progress
from ...model.state import ClusterState, Resource, ResourcePhase
from ...model.store import StateStore
from . import faults, keys
from .details import AwsIdDetail, KeyFileDetail
from .plan import TAG_CLUSTER_ID, AwsPlan

D = TypeVar("D", bound=Detail)


class Steps:
    """One ``up``: its state, where each step is recorded before it is made and marked after."""

    def __init__(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        self.state, self.store, self.progress = state, store, progress

    def step(self, res: Resource, create: Callable[[], D]) -> D:
        """Create one planned resource (already in the saved state as planned) and record what was
        made: ``create`` returns the resource's whole record (its planned one completed)."""
        faults.point("before", res.kind)
        made = create()
        faults.point("after", res.kind)  # made in AWS, not yet in the state: down finds it by tag
        made.put(res)
        res.status = ResourcePhase.CREATED
        self.store.save(self.state)
        if isinstance(made, AwsIdDetail):
            self.progress(f"created {res.kind} {made.aws_id}")
        return made

    def save(self) -> None:
        self.store.save(self.state)

    def dir_and_key(self, plan: AwsPlan) -> str:
        """The first two steps: the cluster's directory and its ed25519 key, made here; the public key."""

        def make_dir() -> Detail:
            Path(plan.cluster_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            return Detail()

        self.step(only(self.state, "dir"), make_dir)
        key_file = only(self.state, "key-file")
        made = self.step(
            key_file,
            lambda: replace(
                KeyFileDetail.of(key_file), public_key=keys.ensure_key(Path(plan.key_path), plan.unique_name)
            ),
        )
        return made.public_key

    def forget(self, plan: AwsPlan) -> None:
        """Remove what this ``up`` made on this machine and its state file, when it made nothing in AWS."""
        keys.remove_key(Path(plan.key_path))
        self.store.remove_tree(self.state.name, plan.cluster_dir)
        self.store.delete(self.state.name)


def only(state: ClusterState, kind: str) -> Resource:
    """The state's first resource of ``kind``."""
    return next(r for r in state.resources if r.kind == kind)


def only_created(state: ClusterState, kind: str) -> Resource:
    return next(r for r in state.resources if r.kind == kind and r.status == ResourcePhase.CREATED)


def adopt(resource: dict[str, Any], id_key: str, cluster_id: str, what: str) -> str:
    """A same-named resource is reused only if it is this cluster's own (a retried create)."""
    tags = {t["Key"]: t["Value"] for t in resource.get("Tags", [])}
    if tags.get(TAG_CLUSTER_ID) != cluster_id:
        raise DdpctlError(f"{what} already exists and is not this cluster's: delete it, or pick another --name")
    return str(resource.get(id_key, ""))
