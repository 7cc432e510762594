"""Cluster life cycle across providers: which cluster a command means, up, configure and down."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..hosts import autodown
from ..model import costs, locks
from ..model.errors import ClusterExists, ClusterNotFound, DdpctlError, UsageError
from ..model.progress import step
from ..model.spec import ClusterSpec
from ..model.state import ClusterPhase, ClusterState, DamagedState
from ..model.store import DownStore, StateStore
from ..providers import NAMES, checked_spec, get_provider
from ..providers.base import ExecutorFor, LiveStatus, Progress, Provider, TakenDown

if TYPE_CHECKING:
    from ..hosts.ansible import Play, PlayReport


#: What a caller of ``down`` does first, with the cluster's provider, state and store (raises to stop).
BeforeDown = Callable[[Provider, ClusterState, StateStore], None]


def new_spec(
    *,
    name: str | None,
    provider: str | None,
    nodes: int | None,
    nproc_per_node: int | None,
    port: int,
    env: Mapping[str, str],
    inventory: str | None,
    playbook_vars: Mapping[str, str],
    options: Mapping[str, object],
    autodown_s: int | None,
    python: str | None,
    down_on_failure: bool,
) -> ClusterSpec:
    """``up``'s spec from its values, typed (the CLI's flags, the API's keywords): the provider's
    defaults filled in (its node count, from the inventory for onprem), what it refuses refused."""
    impl = get_provider(provider or "local")
    impl.check_up_flags(down_on_failure=down_on_failure)
    return ClusterSpec(
        name=name or "default",
        provider=provider or "local",
        nodes=impl.default_nodes(inventory or "") if nodes is None else nodes,
        nproc_per_node=nproc_per_node or 0,
        port=port,
        env=dict(env),
        inventory=str(Path(inventory).resolve()) if inventory else "",
        playbook_vars=dict(playbook_vars),
        options=dict(options),
        autodown_s=autodown_s or 0,
        **({"python": python} if python else {}),
    )


def cost_question(provider: Provider, state: ClusterState) -> str | None:
    """What ``up`` asks before it creates billed nodes (None where nothing is billed): the CLI asks
    it, the API wants ``yes=True``."""
    if not provider.billed:
        return None
    spec = state.spec
    cost = provider.hourly_cost(spec)
    price = f", about ${cost:.2f}/h" if cost is not None else ""
    until = "until `ddpctl down` or autodown" if spec.autodown_s else "until `ddpctl down`"
    return f"create {spec.nodes} {spec.provider} node(s) for cluster {spec.name!r}{price} {until}"


def plan_up(
    spec: ClusterSpec,
    store: StateStore,
    *,
    ephemeral: bool = False,
    clean: bool = False,
    progress: Progress = lambda _: None,
) -> tuple[Provider, ClusterState]:
    """Check ``spec`` can be brought up (its provider's checks too, here once) and return the plan,
    creating nothing but (``clean``, with the cluster's lock held) the leftovers of a cluster of that
    name that took itself down."""
    spec = checked_spec(spec)
    provider = get_provider(spec.provider)
    store.check_writable()
    if clean and store.exists(spec.name):
        try:
            clean_taken_down(store, store.load(spec.name), progress)
        except DamagedState:
            pass  # refused below, with `down`'s command
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
    state = _up(provider, state, store, progress, down_on_failure=down_on_failure)
    if state.spec.autodown_s:  # the cluster is up and recorded: a failure here leaves it so, and says how
        try:
            _set_autodown(provider, state, store, state.spec.autodown_s, progress)
        except DdpctlError as exc:
            state.spec = replace(state.spec, autodown_s=0)  # recorded as it is: off
            store.save(state)
            raise DdpctlError(
                f"cluster {state.name!r} is up, but its autodown could not be started ({exc}): "
                f"`ddpctl autodown {state.name} {autodown.flag_text(state.spec.autodown_s)}` "
                f"tries again, `ddpctl down --name {state.name}` deletes it"
            ) from None
    return state


def _up(
    provider: Provider, state: ClusterState, store: StateStore, progress: Progress, *, down_on_failure: bool
) -> ClusterState:
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
        if store.exists(name) and state.status == ClusterPhase.CONFIGURING:
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
    store: StateStore,
    name: str | None,
    progress: Progress,
    playbook_vars: dict[str, str],
    *,
    tags: str | None = None,
    check: bool = False,
    diff: bool = False,
) -> tuple[ClusterState, PlayReport]:
    """site.yml again on a cluster that is up, with its recorded variables plus ``playbook_vars``
    (recorded too once the play succeeds, unless in check mode); only the roles ``tags`` (``--tags``:
    comma-separated), or
    ``check`` (Ansible's check mode) showing the ``diff``."""
    from ..hosts.ansible import Play
    from ..hosts.site_play import check_tags

    play = Play(tags=check_tags(tags), check=check, diff=diff)
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
    if state.status not in (
        ClusterPhase.UP,
        ClusterPhase.CONFIGURING,
    ):  # configuring: an `up` stopped in its configure step
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
    before: BeforeDown | None = None,
) -> str:
    """Take cluster ``name`` down. A damaged state file is cleaned up from what can still be read of
    it (``provider``/``region``: what the user says where it cannot be read). ``before`` runs first,
    under the cluster's lock (the caller's: ``runs/outputs.before_down`` asks and keeps the runs'
    outputs that exist only on the cluster); it raises to stop."""
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
        taken = provider.took_itself_down(state)
        if taken:
            progress(_taken_down_note(state, taken))
            if taken.kept_head and before is not None:  # the runs' outputs on its disk: copied first
                provider.start_kept_head(state, store, progress)
                before(provider, state, store)
            provider.down(state, store, progress)
            return name
        if before is not None:
            before(provider, state, store)
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


def set_autodown(store: StateStore, name: str | None, idle_s: int, progress: Progress) -> ClusterState:
    """``ddpctl autodown [--name NAME] 30m|off``: on a cluster that is up, recorded in its state."""
    resolved = resolve_name(store, name)
    if resolved is None:
        raise ClusterNotFound(f"no cluster is up under {store.home}: start one with `ddpctl up --autodown 30m`")
    # shared, as a run's: a run going does not stop it (the program on the head node waits for it),
    # while `down` or `configure`, which hold it alone, do
    with locks.cluster(store, resolved, "autodown", shared=True):
        state = store.load(resolved)
        provider = get_provider(state.spec.provider)
        if not provider.autodown:
            raise UsageError(provider._no_autodown())
        if state.status != ClusterPhase.UP:
            raise UsageError(
                f"cluster {resolved!r} is {state.status}, not up: finish it (`ddpctl configure --name {resolved}`) "
                "or take it down first"
            )
        _set_autodown(provider, state, store, idle_s, progress)
    return state


def _set_autodown(provider: Provider, state: ClusterState, store: StateStore, idle_s: int, progress: Progress) -> None:
    provider.set_autodown(state, idle_s, progress)
    state.spec = replace(state.spec, autodown_s=idle_s)
    state.autodown_at = time.time() if idle_s else 0.0
    store.save(state)


def clean_taken_down(store: StateStore, state: ClusterState, progress: Progress) -> bool:
    """A cluster whose nodes took it down (autodown): what they could not delete (network, security
    group, key pair...) deleted now and said so; True if it was one. The caller holds its lock."""
    provider = get_provider(state.spec.provider)
    taken = provider.took_itself_down(state)
    if not taken or taken.kept_head:  # a stopped head keeps the runs' outputs: only `down` copies them first
        return False
    progress(_taken_down_note(state, taken))
    provider.down(state, DownStore(store.home, progress), progress)
    return True


def _taken_down_note(state: ClusterState, taken: TakenDown) -> str:
    said = f"cluster {state.name!r} took itself down (autodown after {autodown.text(state.spec.autodown_s)} idle)"
    if taken.kept_head:
        head = state.nodes[0].name if state.nodes else "its head node"
        return f"{said}; {head} was stopped with the runs' outputs on its disk: copying them here, then deleting it all"
    return f"{said}: deleting what its nodes could not (network, security group, key pair)"


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


def changed_summary(report: PlayReport) -> str:
    """``node0 ok, node1 changed 3``: what a play changed, node by node (``configure``'s line)."""
    from ..hosts.site_play import changed_summary as summary

    return summary(report)


def down_lost(store: StateStore, name: str, region: str, provider: str | None, progress: Progress) -> None:
    """``down --name X --region R`` where the state file is gone: what is found by the cluster's
    tags deleted (aws by default; ``provider``: pcluster), with the cluster's lock held."""
    with locks.cluster(store, name, "down"):
        get_provider(provider or "aws").down_lost(name, region, store, progress)


def live_status(state: ClusterState) -> LiveStatus | None:
    """What the cluster's provider says runs now (its instances, stacks...), for ``status``."""
    return get_provider(state.spec.provider).status(state)


def job_nodes(state: ClusterState, progress: Progress) -> tuple[ClusterState, ExecutorFor]:
    """The nodes jobs run on (pcluster: its compute nodes, through the head) and the executor that
    reaches them: what ``check`` tests and the nodes ``ssh NODE`` opens beyond the recorded ones."""
    return get_provider(state.spec.provider).check_targets(state, progress)


def rdzv_port(state: ClusterState, port: int | None) -> int:
    """The port a run (or ``check``) rendezvouses on: ``port``, else the cluster's own."""
    return get_provider(state.spec.provider).rdzv_port(state, port)


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
