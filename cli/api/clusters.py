"""The Python API's cluster verbs: ``up``, ``down``, ``status`` (``cluster_statuses``), ``check``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpctl.infra.lifecycle.faces import LiveStatus
    from ddpctl.infra.model.autodown import Estimate
    from ddpctl.infra.model.state import ClusterState
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.check import CheckReport

from .common import _checked, _env_pairs, _quiet, _store, print_progress


def up(
    nodes: int | None = None,
    *,
    provider: str = "local",
    name: str = "default",
    inventory: str | Path | None = None,
    nproc_per_node: int | None = None,
    port: int | None = None,
    env: Mapping[str, str] | Sequence[str] = (),
    playbook_vars: Sequence[str] = (),
    python: str | None = None,
    options: dict[str, Any] | None = None,
    down_on_failure: bool = True,
    autodown: str | None = None,
    yes: bool = False,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> ClusterState:
    """``ddpctl up``: bring a cluster up and return its state (``status --json``'s cluster).

    ``options`` are the provider's own (``region``, ``instance_type``, ``tags``...: the keys of
    ``ddpctl.toml``'s ``[cluster]``); ``env`` is a mapping ``{"K": "V"}`` (or ``KEY=VALUE`` strings), the
    values every run on the cluster gets (recorded: no secrets; ``run(env_from=...)`` passes those);
    ``playbook_vars`` are ``KEY=VALUE`` strings. A billed
    provider (aws, pcluster) needs ``yes=True``, as the CLI's ``--yes``. ``autodown``: the CLI's
    ``--autodown`` (``"30m"``). ``progress=None``: quiet.
    """
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.lifecycle.faces import check_given
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.env_vars import parse_env
    from ddpctl.infra.model.errors import UsageError

    from ..cluster_commands import up as command

    keywords = ("nodes", "provider", "name", "inventory", "nproc_per_node", "port", "playbook_vars", "python")
    values = locals()
    nodes, provider, name, inventory, nproc_per_node, port, playbook_vars, python = (
        _checked(command, k, values[k]) for k in keywords
    )
    autodown = _checked(command, "autodown", autodown)  # seconds (Click's Duration), None: off
    if options is not None and not isinstance(options, dict):
        raise UsageError(
            f"options={options!r} is {type(options).__name__}: give a dict, e.g. {{'region': 'us-west-2'}}"
        )
    check_given(options or {})
    progress = progress or _quiet
    spec = clusters.new_spec(
        name=name,
        provider=provider,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        port=port,
        env=parse_env(_env_pairs(env)),
        inventory=str(inventory) if inventory else None,
        playbook_vars=parse_env(playbook_vars or (), flag="--playbook-var"),
        options=options or {},
        autodown_s=autodown,
        python=python,
        down_on_failure=down_on_failure,
    )
    store = _store(home)
    with locks.cluster(store, spec.name, "up"):
        provider_impl, state = clusters.plan_up(spec, store, clean=True, progress=progress)
        question = clusters.cost_question(provider_impl, state)
        if question and not yes:
            raise UsageError(f"{question}: pass yes=True to confirm")
        return clusters.up(provider_impl, state, store, progress, down_on_failure=down_on_failure)


def down(
    name: str | None = None,
    *,
    all: bool = False,  # the CLI's --all
    keep_outputs: bool = True,
    yes: bool = False,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> list[str]:
    """``ddpctl down``: take a cluster down (``name``, else the only one; ``all=True``: every one),
    first copying its runs' outputs into their records unless ``keep_outputs=False``. One billed
    cluster (aws, pcluster) needs ``yes=True``, as the CLI's ``--yes``. Returns the names taken
    down (``down --json``'s ``down``)."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs import outputs

    from ..cluster_commands import down as command

    name = _checked(command, "name", name)
    progress = progress or _quiet
    store = _store(home)
    if all and name:
        raise UsageError(f"--all and --name {name} contradict: --all takes every cluster down; give one of them")
    if all:
        names = store.names()
    else:
        resolved = clusters.resolve_name(store, name)
        names = [resolved] if resolved else []
    if not names:
        progress(f"no cluster is up under {store.home}: nothing to take down")

    def ask(question: str) -> None:
        if not yes:
            raise UsageError(f"{question}: pass yes=True to confirm")

    before = outputs.before_down(progress, ask=None if all else ask, keep=keep_outputs)
    return [clusters.down(n, store, progress, before=before) for n in names]


@dataclass
class ClusterStatus:
    """One cluster as ``ddpctl status`` shows it: its recorded state, what its provider says runs
    now (``live``), or why its state file cannot be read (``damaged``)."""

    name: str
    provider: str
    status: str  # up | creating | ... | stopped (by autodown, its head kept with the outputs) | damaged
    state: ClusterState | None = None  # None: damaged
    live: LiveStatus | None = None
    damaged: str = ""  # why the state file cannot be read
    message: str = ""  # a damaged one: the line that says what to do (`down`'s command)
    readable: dict[str, Any] = field(default_factory=dict)  # what `down` can still read of a damaged one
    #: its autodown and when it would fire (None: off); ``infra/hosts/autodown.py``
    autodown: Estimate | None = None
    #: it took itself down (autodown), and this status deleted what was left of it
    took_itself_down: bool = False

    @property
    def nodes(self) -> list:
        return list(self.state.nodes) if self.state is not None else []

    @property
    def age_s(self) -> float:
        """Seconds since ddpctl recorded the cluster (0 for a damaged one)."""
        return time.time() - self.state.created_at if self.state is not None else 0.0

    @property
    def cost_so_far_usd(self) -> float | None:
        """What it has cost so far at list price (None: not billed, or the price is not known)."""
        if self.state is None or self.live is None:
            return None
        from ddpctl.infra.model import costs

        return costs.so_far(self.live.cost_per_hour_usd, self.state.created_at, time.time())

    def to_dict(self) -> dict[str, Any]:
        """``status --json``'s entry for this cluster."""
        if self.took_itself_down:
            return {"name": self.name, "provider": self.provider, "status": "down", "took_itself_down": True}
        if self.state is None:
            return {"name": self.name, "status": "damaged", "damaged": self.damaged, "readable": self.readable}
        from ..output_json import iso

        doc = {**self.state.to_dict(), "created_at": iso(self.state.created_at), "age_s": round(self.age_s)}
        doc["status"] = str(self.status)  # "stopped" where autodown kept the head, as the table says
        doc["autodown"] = self.autodown.to_dict() if self.autodown else None
        if self.live:
            doc["live"] = self.live.to_dict()
            doc["cost_so_far_usd"] = self.cost_so_far_usd
        return doc


def cluster_statuses(
    store: StateStore, name: str | None = None, progress: Callable[[str], None] = _quiet
) -> list[ClusterStatus]:
    """The clusters under the state home (or just ``name``), each with what its provider says runs
    now and its autodown; damaged state files last (what ``ddpctl status`` lists). A cluster that
    took itself down (autodown) has what its nodes could not delete deleted now, said to ``progress``."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model import autodown, locks
    from ddpctl.infra.model.state import DamagedState
    from ddpctl.infra.runs.records import list_runs

    found, damaged = [], []
    runs = None
    for each in [name] if name else store.names():
        try:
            state = store.load(each)
        except DamagedState as exc:  # shown as such: `down` still cleans it up
            salvage = store.salvage(exc.name)
            damaged.append(
                ClusterStatus(
                    exc.name,
                    salvage.provider or "?",
                    "damaged",
                    damaged=exc.reason,
                    message=str(exc),
                    readable=salvage.to_dict(),
                )
            )
            continue
        estimate = None
        if state.spec.autodown_s:
            try:
                with locks.cluster(store, state.name, "status"):  # as `down`: one command changes it
                    if clusters.clean_taken_down(store, store.load(state.name), progress):
                        found.append(ClusterStatus(state.name, state.spec.provider, "down", took_itself_down=True))
                        continue
            except locks.Busy:
                pass  # another command has it now: shown as it is
            runs = list_runs(store) if runs is None else runs
            estimate = autodown.fires_at(state, runs)
        live = clusters.live_status(state)
        phase = "stopped" if live is not None and live.details.get("kept_head") else state.status  # autodown kept it
        found.append(ClusterStatus(state.name, state.spec.provider, phase, state, live, autodown=estimate))
    return found + damaged


def status(
    name: str | None = None, *, home: str | Path | None = None, progress: Callable[[str], None] | None = print_progress
) -> list[ClusterStatus]:
    """``ddpctl status``: the clusters under the state home (or just ``name``), each with its autodown
    (``ClusterStatus.autodown``); one that took itself down is cleaned up (``took_itself_down``)."""
    from ..inspect_commands import status as command

    return cluster_statuses(_store(home), _checked(command, "name", name), progress or _quiet)


def check(
    name: str | None = None,
    *,
    port: int | None = None,
    size_mb: float = 32,
    bandwidth: bool = True,
    health: bool = True,
    burn_seconds: float = 3,
    progress: Callable[[str], None] | None = print_progress,
    home: str | Path | None = None,
) -> CheckReport:
    """``ddpctl check``: each node's health, and every pair of a cluster's nodes, reachability and
    all-reduce bandwidth (``to_dict()`` is ``check --json``'s report; ``.unreachable`` lists the broken
    links, ``.unhealthy`` the unhealthy nodes, ``.health`` each node's verdict)."""
    from ddpctl.infra.runs.check import check_cluster

    from ..inspect_commands import check as command

    name, port, size_mb, burn_s = (
        _checked(command, k, v)
        for k, v in (("name", name), ("port", port), ("size_mb", size_mb), ("burn_seconds", burn_seconds))
    )
    progress = progress or _quiet
    return check_cluster(
        _store(home), name, port, progress, bandwidth=bandwidth, size_mb=size_mb, health=health, burn_s=burn_s
    )[2]
