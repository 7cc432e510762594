"""Cluster life cycle across providers: which cluster a command means, up, configure and down."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from . import locks
from .errors import ClusterExists, ClusterNotFound, UsageError
from .providers import get_provider
from .providers.base import Progress, Provider
from .spec import PLAYBOOK_PROVIDERS, ClusterSpec
from .state import ClusterState, StateStore

if TYPE_CHECKING:
    from .ansible import PlayReport


def plan_up(spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> tuple[Provider, ClusterState]:
    """Check ``spec`` can be brought up and return the plan, creating nothing."""
    provider = get_provider(spec.provider)
    store.check_writable()
    if store.exists(spec.name):
        raise ClusterExists(
            f"cluster {spec.name!r} already exists: use it, take it down with `ddpctl down --name {spec.name}`, "
            "or pick another --name"
        )
    return provider, provider.plan(spec, store, ephemeral=ephemeral)


def up(provider: Provider, state: ClusterState, store: StateStore, progress: Progress) -> ClusterState:
    """Create a planned cluster; if that fails, take down what was made and re-raise."""
    try:
        return provider.up(state, store, progress)
    except BaseException:
        if store.exists(state.name):
            progress(f"bringing {state.name!r} up failed: taking down what was created")
            provider.down(store.load(state.name), store, progress)
        raise


def configure(
    store: StateStore, name: str | None, progress: Progress, playbook_vars: dict[str, str], tags: str | None
) -> tuple[ClusterState, PlayReport]:
    """site.yml again on a cluster that is up, with its recorded variables plus ``playbook_vars``
    (recorded too once the play succeeds); ``tags``: only these roles."""
    from .configure import check_tags

    tags = check_tags(tags)
    resolved = resolve_name(store, name)
    if resolved is None:
        raise ClusterNotFound(f"no cluster is up under {store.home}: start one with `ddpctl up`")
    with locks.cluster(store, resolved, "configure"):
        return _configure(store, resolved, progress, playbook_vars, tags)


def _configure(
    store: StateStore, name: str, progress: Progress, playbook_vars: dict[str, str], tags: str | None
) -> tuple[ClusterState, PlayReport]:
    state = store.load(name)
    if state.spec.provider not in PLAYBOOK_PROVIDERS:
        raise UsageError(
            f"{state.spec.provider} clusters run no playbooks: `ddpctl configure` is for {', '.join(PLAYBOOK_PROVIDERS)}"
        )
    if state.status not in ("up", "configuring"):  # configuring: an `up` stopped in its configure step
        raise UsageError(
            f"cluster {state.name!r} is {state.status}, not up: `ddpctl down --name {state.name}`, then `ddpctl up`"
        )
    state.spec = replace(state.spec, playbook_vars={**state.spec.playbook_vars, **playbook_vars})  # checked here
    report = get_provider(state.spec.provider).configure(state, store, progress, tags)
    store.save(state)
    return state, report


def down(name: str, store: StateStore, progress: Progress) -> ClusterState:
    with locks.cluster(store, name, "down"):
        state = store.load(name)
        get_provider(state.spec.provider).down(state, store, progress)
    return state


def resolve_name(store: StateStore, name: str | None) -> str | None:
    """The cluster a command means: the one named, else the only one recorded, else None."""
    if name is not None:
        return name
    names = store.names()
    if len(names) > 1:
        raise UsageError(f"several clusters are up ({', '.join(names)}): say which with --name")
    return names[0] if names else None


def load(store: StateStore, name: str | None) -> ClusterState:
    resolved = resolve_name(store, name)
    if resolved is None:
        raise ClusterNotFound(f"no cluster is up under {store.home}: start one with `ddpctl up`")
    return store.load(resolved)
