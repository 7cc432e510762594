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
from pathlib import Path
from typing import Any

from ...errors import DdpctlError
from ...progress import Progress
from ...state import ClusterState, Resource, StateStore
from . import faults, keys
from .plan import TAG_CLUSTER_ID, AwsPlan


class Steps:
    """One ``up``: its state, where each step is recorded before it is made and marked after."""

    def __init__(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        self.state, self.store, self.progress = state, store, progress

    def step(self, res: Resource, create: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Create one planned resource (already in the saved state as planned) and record what was made."""
        faults.point("before", res.kind)
        detail = create()
        faults.point("after", res.kind)  # made in AWS, not yet in the state: down finds it by tag
        res.detail.update(detail)
        res.status = "created"
        self.store.save(self.state)
        if "aws_id" in detail:
            self.progress(f"created {res.kind} {detail['aws_id']}")
        return res.detail

    def save(self) -> None:
        self.store.save(self.state)

    def dir_and_key(self, plan: AwsPlan) -> str:
        """The first two steps: the cluster's directory and its ed25519 key, made here; the public key."""

        def make_dir() -> dict[str, Any]:
            Path(plan.cluster_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            return {}

        self.step(only(self.state, "dir"), make_dir)
        made = self.step(
            only(self.state, "key-file"),
            lambda: {"public_key": keys.ensure_key(Path(plan.key_path), plan.unique_name)},
        )
        return made["public_key"]


def only(state: ClusterState, kind: str) -> Resource:
    """The state's first resource of ``kind``."""
    return next(r for r in state.resources if r.kind == kind)


def only_created(state: ClusterState, kind: str) -> Resource:
    return next(r for r in state.resources if r.kind == kind and r.status == "created")


def adopt(resource: dict[str, Any], id_key: str, cluster_id: str, what: str) -> str:
    """A same-named resource is reused only if it is this cluster's own (a retried create)."""
    tags = {t["Key"]: t["Value"] for t in resource.get("Tags", [])}
    if tags.get(TAG_CLUSTER_ID) != cluster_id:
        raise DdpctlError(f"{what} already exists and is not this cluster's: delete it, or pick another --name")
    return str(resource.get(id_key, ""))
