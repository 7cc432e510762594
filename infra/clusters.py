"""Cluster life cycle across providers: which cluster a command means, up and down."""

from __future__ import annotations

from .errors import ClusterExists, ClusterNotFound, UsageError
from .providers import get_provider
from .providers.base import Progress, Provider
from .spec import ClusterSpec
from .state import ClusterState, StateStore


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


def down(name: str, store: StateStore, progress: Progress) -> ClusterState:
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
