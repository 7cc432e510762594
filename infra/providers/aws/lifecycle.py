"""``up`` with the AWS policy for failures: Ctrl-C stops and says how to clean up; a failure
takes down what was made (``--down-on-failure``, the default) or keeps it for inspection.

``clusters.up`` takes everything down on any exception, Ctrl-C included; for a cloud, an
interrupted ``up`` should stop creating at once and leave the decision to the user.
"""

from __future__ import annotations

from ...state import ClusterState, StateStore
from ..base import Progress, Provider


def up(
    provider: Provider, state: ClusterState, store: StateStore, progress: Progress, *, down_on_failure: bool = True
) -> ClusterState:
    name = state.name
    try:
        return provider.up(state, store, progress)
    except KeyboardInterrupt:
        if store.exists(name) and state.status == "configuring":
            progress(
                f"interrupted while configuring {name!r}: its {len(state.nodes)} instance(s) run (and are billed); "
                f"finish with `ddpctl configure --name {name}`, or delete everything with `ddpctl down --name {name}`"
            )
        elif store.exists(name):
            progress(
                f"interrupted: stopped creating {name!r}; what was made is recorded and tagged: "
                f"delete it with `ddpctl down --name {name}`"
            )
        raise
    except BaseException:
        if not store.exists(name):
            raise  # failed before anything was recorded: nothing was created
        if not down_on_failure:
            progress(
                f"bringing {name!r} up failed; kept what was made (--no-down-on-failure): `ddpctl down --name {name}` deletes it"
            )
            raise
        progress(f"bringing {name!r} up failed: taking down what was made (--no-down-on-failure keeps it)")
        try:
            provider.down(store.load(name), store, progress)
        except Exception as exc:
            progress(f"warning: taking it down failed too ({exc}): run `ddpctl down --name {name}`")
        raise
