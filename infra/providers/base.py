"""The verbs every provider implements (after SkyPilot's ``sky/provision``).

``plan`` is pure: it returns the state ``up`` would record, which ``--dry-run`` prints. ``up``
records that plan before creating anything, then creates resource by resource; ``down`` deletes
whatever the state (and, for clouds, the tags) says may exist. Providers whose nodes
playbooks/site.yml configures (onprem, aws, pcluster) also have ``configure(state, store,
progress, tags) -> PlayReport``: the play again on a cluster that is up (``ddpctl configure``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..launch.plan import LaunchPlan
from ..launch.supervise import OutputLine, RunResult
from ..spec import ClusterSpec
from ..state import ClusterState, StateStore

Progress = Callable[[str], None]


class Executor(Protocol):
    def run(self, plan: LaunchPlan) -> RunResult: ...


class Provider(Protocol):
    name: str

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        """The cluster ``up`` would create, with every resource listed as ``planned``."""

    def up(self, state: ClusterState, store: StateStore, progress: Progress) -> ClusterState:
        """Create what ``state`` plans, recording each resource before it is created."""

    def down(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        """Delete everything the cluster may have created; safe to repeat."""

    def rdzv_port(self, state: ClusterState, requested: int | None) -> int:
        """A rendezvous port on the head node (``requested`` checked, or a free one)."""

    def preflight(self, state: ClusterState) -> None:
        """Check the nodes can run a job (torch importable...) before anything starts."""

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]) -> Executor: ...
