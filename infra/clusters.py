"""Cluster life cycle across providers: which cluster a command means, up, configure and down."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from . import costs, locks
from .errors import ClusterExists, ClusterNotFound, DdpctlError, UsageError
from .progress import step
from .providers import NAMES, get_provider
from .providers.base import Progress, Provider
from .spec import ClusterSpec
from .state import ClusterState, DamagedState, DownStore, StateStore

if TYPE_CHECKING:
    from .ansible import Play, PlayReport


def plan_up(spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> tuple[Provider, ClusterState]:
    """Check ``spec`` can be brought up and return the plan, creating nothing."""
    provider = get_provider(spec.provider)
    store.check_writable()
    if store.exists(spec.name):
        raise ClusterExists(
            f"cluster {spec.name!r} already exists: use it, take it down with `ddpctl down --name {spec.name}`, "
            "or pick another --name"
        )
    provider.check_up(spec)
    return provider, provider.plan(spec, store, ephemeral=ephemeral)


def up(
    provider: Provider, state: ClusterState, store: StateStore, progress: Progress, *, down_on_failure: bool = True
) -> ClusterState:
    """Create a planned cluster, with the provider's policy for failures (``Provider.billed``)."""
    provider.check_up_flags(down_on_failure=down_on_failure)
    if not provider.billed:
        try:
            return provider.up(state, store, progress)
        except BaseException:  # Ctrl-C too: nothing billed, nothing worth keeping
            if store.exists(state.name):
                progress(f"bringing {state.name!r} up failed: taking down what was created")
                provider.down(store.load(state.name), store, progress)
            raise
    name = state.name
    try:
        return provider.up(state, store, progress)
    except KeyboardInterrupt:  # stop creating at once; the user decides what happens to what was made
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


def configure(
    store: StateStore, name: str | None, progress: Progress, playbook_vars: dict[str, str], play: Play
) -> tuple[ClusterState, PlayReport]:
    """site.yml again on a cluster that is up, with its recorded variables plus ``playbook_vars``
    (recorded too once the play succeeds, unless in check mode); ``play``: roles, check, diff."""
    from .configure import check_tags

    play = replace(play, tags=check_tags(play.tags))
    resolved = resolve_name(store, name)
    if resolved is None:
        raise ClusterNotFound(f"no cluster is up under {store.home}: start one with `ddpctl up`")
    with locks.cluster(store, resolved, "configure"):
        return _configure(store, resolved, progress, playbook_vars, play)


def _configure(
    store: StateStore, name: str, progress: Progress, playbook_vars: dict[str, str], play: Play
) -> tuple[ClusterState, PlayReport]:
    state = store.load(name)
    provider = get_provider(state.spec.provider)
    if not provider.runs_playbooks:  # its own one-line refusal, before anything else is said
        provider.configure(state, store, progress, play)
    if state.status not in ("up", "configuring"):  # configuring: an `up` stopped in its configure step
        raise UsageError(
            f"cluster {state.name!r} is {state.status}, not up: `ddpctl down --name {state.name}`, then `ddpctl up`"
        )
    state.spec = replace(state.spec, playbook_vars={**state.spec.playbook_vars, **playbook_vars})  # checked here
    report = provider.configure(state, store, progress, play)
    if not play.check:  # check mode changed nothing: nothing to record
        store.save(state)
    return state, report


def down(
    name: str,
    store: StateStore,
    progress: Progress,
    *,
    provider: str | None = None,
    region: str | None = None,
    ask: Callable[[str], None] | None = None,
    keep_outputs: bool = True,
) -> str:
    """Take cluster ``name`` down. A damaged state file is cleaned up from what can still be read of
    it (``provider``/``region``: what the user says where it cannot be read). First, the runs'
    outputs that exist only on the cluster are copied into their records (unless not
    ``keep_outputs``); a billed provider's ``down`` is put to ``ask`` (which raises to stop), naming them."""
    store = DownStore(store.home, progress)  # a full disk does not stop `down`
    with locks.cluster(store, name, "down"):
        slot = locks.RunSlot(store, name, "down")  # its run slot's files, of runs killed meanwhile, go too
        if slot.try_take():
            slot.release()
        try:
            state = store.load(name)
        except DamagedState:
            _down_damaged(name, store, progress, provider, region)
            return name
        provider = get_provider(state.spec.provider)
        _keep_outputs(provider, state, store, progress, ask=ask, keep=keep_outputs)
        live = provider.status(state) if provider.billed else None  # what it costs per hour, asked first
        with step(progress, f"taking {name!r} down"):
            provider.down(state, store, progress)
    if live is not None and live.cost_per_hour_usd:
        spent = costs.so_far(live.cost_per_hour_usd, state.created_at, time.time())
        progress(
            f"cluster {name!r} was up {costs.age_text(time.time() - state.created_at)}: about ${spent:,.2f} "
            f"at ${live.cost_per_hour_usd:,.2f}/h list price"
        )
    return name


def _keep_outputs(
    provider: Provider,
    state: ClusterState,
    store: StateStore,
    progress: Progress,
    *,
    ask: Callable[[str], None] | None,
    keep: bool,
) -> None:
    """Before ``down``: the runs' outputs that exist only on the cluster (``infra/outputs.py``), named
    in the question a billed provider's ``down`` asks, then copied into their run records."""
    from . import outputs

    found = []
    if state.status == "up" and state.nodes:  # runs only ever ran on a cluster that was up
        wanted = outputs.to_keep(outputs.recorded(store), state, disks_go=provider.disks_go_with_down)
        try:
            found = outputs.measure(state, wanted)
        except DdpctlError as exc:
            if keep and provider.disks_go_with_down:  # the nodes go: what is on them would be lost
                raise DdpctlError(
                    f"{exc}: its runs' outputs cannot be kept; `ddpctl down --name {state.name} --no-keep-outputs` "
                    "takes it down without them"
                ) from exc
            # nodes that stay: a node `down` cannot reach keeps what is on it
            progress(f"warning: {exc}: the runs' outputs there are not copied back")
    if ask is not None and provider.billed:
        ask(outputs.question(state, found, keep=keep, runs_dir=store.home / "runs"))
    if keep:
        outputs.keep(store, state, found, progress)


def _down_damaged(name: str, store: StateStore, progress: Progress, provider: str | None, region: str | None) -> None:
    found = store.salvage(name)
    found = replace(found, provider=provider or found.provider, region=region or found.region)
    if found.provider not in NAMES:
        raise UsageError(
            f"the state file of {name!r} is damaged ({found.reason}) and does not say which provider made it: "
            f"`ddpctl down --name {name} --provider PROVIDER` (with --region REGION for aws and pcluster)"
        )
    read = ", ".join(f"{k} {v}" for k, v in found.to_dict().items() if k != "reason" and v) or "nothing"
    progress(f"the state file of {name!r} is damaged ({found.reason}); cleaning up from what it still says: {read}")
    with step(progress, f"taking {name!r} down"):
        get_provider(found.provider).down_damaged(name, found, store, progress)
    store.delete(name)


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
