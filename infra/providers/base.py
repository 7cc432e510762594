"""The one interface every provider implements (after SkyPilot's ``sky/provision``).

Every verb that any caller uses is declared here once, with a default that either works or raises
one clear error; a provider overrides what it does differently. What a provider can do is said by
its class attributes (``runs_playbooks``, ``remote_nodes``, ``billed``, ``disks_go_with_down``,
``takes_inventory``, ``options``), never by comparing its name: nothing outside ``infra/providers/`` looks at a
provider's name.

``plan`` is pure: it returns the state ``up`` would record, which ``--dry-run`` prints. ``up`` and
``down`` are written once, here, as templates: ``up`` runs the provider's checks (``ready``), records
the plan before creating anything, lets the provider create resource by resource (recording each),
and marks the cluster up; ``down`` marks it deleting, lets the provider delete whatever the state
(and, for clouds, the tags) says may exist (``delete``), and removes its record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..model.errors import UsageError
from ..model.progress import Progress
from ..model.state import ClusterPhase

if TYPE_CHECKING:
    from ..hosts.ansible import Play, PlayReport
    from ..launch.launcher import Handle
    from ..launch.plan import LaunchPlan, Renew
    from ..launch.supervise import OutputLine, RunResult
    from ..model.spec import ClusterSpec, RunSpec
    from ..model.state import ClusterState, Salvage
    from ..model.store import StateStore
    from .options import Option

Sink = Callable[["OutputLine"], None]


class Executor(Protocol):
    def run(
        self,
        plan: LaunchPlan,
        renew: Renew | None = None,
        progress: Progress | None = None,
        submitted: Callable[[Handle], None] | None = None,
    ) -> RunResult:
        """Carry out ``plan``, its lines to the executor's sink; ``progress``: what this machine does
        meanwhile (a lost connection to the head node made again), not part of the run's output;
        ``submitted``: the run's handle (``launch/launcher.py``) once it runs on the cluster's side
        (the head node's supervisor, Slurm), before it is followed; never called for a run this
        process supervises."""
        ...


ExecutorFor = Callable[[Sink], Executor]


@dataclass(frozen=True)
class TakenDown:
    """A cluster whose nodes took it down (autodown). ``kept_head``: the head node's instance,
    stopped rather than terminated so that its disk keeps the runs' outputs until ``down`` copies
    them ("": nothing kept, every node gone)."""

    kept_head: str = ""


@dataclass(frozen=True)
class LiveStatus:
    """What a provider's API says runs for a cluster now, and what that costs per hour."""

    summary: str  # one phrase for the status table, e.g. "EC2: 2 running"
    billed_instances: int
    cost_per_hour_usd: float | None  # None: the price is not known
    error: str = ""  # the API could not be asked: why
    details: dict[str, Any] = field(default_factory=dict)  # the provider's own words, for --json
    #: where the price came from when it is not the cloud's own answer of today (a dated table): said under
    #: the status table
    price_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        doc = {**self.details, "summary": self.summary, "billed_instances": self.billed_instances}
        doc["cost_per_hour_usd"] = self.cost_per_hour_usd
        if self.price_note:
            doc["price_note"] = self.price_note
        if self.error:
            doc["error"] = self.error
        return doc


class DryRunReport(Protocol):
    """What ``up --dry-run`` found beyond the plan (checks against the cloud, cost)."""

    lines: list[str]

    def to_dict(self) -> dict[str, Any]: ...


class Provider:
    """Base of every provider. Subclasses set ``name`` and implement ``plan``, ``ready`` and ``delete``
    (the steps of ``up`` and ``down``, which are written here) and ``executor``; every other verb has a
    default here."""

    name: ClassVar[str]
    #: Its nodes are configured by playbooks/site.yml (``--playbook-var``, ``ddpctl configure``).
    runs_playbooks: ClassVar[bool] = False
    #: Its nodes are other hosts (reached over SSH): a run first checks they reach the head's port.
    remote_nodes: ClassVar[bool] = True
    #: What it creates is billed while it exists. A failed ``up`` deletes it (unless
    #: ``--no-down-on-failure``); an interrupted one keeps it and says how to finish or delete it.
    #: Not billed: any failure or Ctrl-C of ``up`` takes down what was made at once.
    billed: ClassVar[bool] = False
    #: ``down`` deletes its nodes and their disks, not only ddpctl's folders on them: a run's
    #: ``--snapshot-dir`` there goes too, so ``down`` copies it back first (``infra/runs/outputs.py``).
    disks_go_with_down: ClassVar[bool] = False
    #: It takes ``--inventory`` (the hosts of an Ansible inventory).
    takes_inventory: ClassVar[bool] = False
    #: The options it takes beyond the common ones, as its ``options`` module declares them (the
    #: registry's ``_OPTIONS`` names that module, so ``--help`` reads it without the provider).
    options: ClassVar[tuple[Option, ...]] = ()
    #: Its nodes can take the cluster down themselves once idle (``--autodown``: a program on the head
    #: node shuts every node down, and that ends what is billed); ``set_autodown`` installs it.
    autodown: ClassVar[bool] = False
    #: Why not, where it cannot: the end of ``--autodown``'s refusal.
    no_autodown_why: ClassVar[str] = "nothing of it is billed by the hour"
    #: Who counted its job nodes' GPUs (``NodeInfo.gpus``), in the words of ``check``'s health:
    #: configure (``nvidia-smi -L`` at up/configure), or a node's instance type where none configures them.
    gpus_counted_by: ClassVar[str] = "configure counted"
    #: A torchrun launch on its nodes may be supervised on the head node (``launch/head.py``): ddpctl's
    #: SSH mesh from the head reaches every node; where, is ``launch.launcher.choose``'s.
    head_supervises: ClassVar[bool] = False

    @classmethod
    def option_names(cls) -> set[str]:
        return {o.name for o in cls.options}

    # ---- the life cycle ---------------------------------------------------------------------------

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        """The cluster ``up`` would create, with every resource listed as ``planned``."""
        raise NotImplementedError

    def up(self, state: ClusterState, store: StateStore, progress: Progress) -> ClusterState:
        """Create what ``state`` plans, the same way for every provider: the checks that need the world
        first (``ready``: nothing is recorded or created before they pass); then the cluster is recorded
        as ``creating`` with every resource it plans; the provider's steps create them one by one, each
        recorded as made (what ``ready`` returned); last the cluster is recorded ``up`` and that is said."""
        create = self.ready(state, store, progress)
        state.status = ClusterPhase.CREATING
        store.save(state)
        said = create()
        state.status = ClusterPhase.UP
        store.save(state)
        progress(said)
        return state

    def down(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        """Delete everything the cluster may have created, the same way for every provider; safe to
        repeat. It is recorded as ``deleting`` (where it has a state file: ``down`` of a lost cluster has
        none); the provider deletes what it made, in order (``delete``: where something could not be
        deleted it raises, and the record stays for the next ``down``); last the cluster's folder under
        the state home and its state file go, and that is said."""
        persisted = store.exists(state.name)
        if persisted:
            state.status = ClusterPhase.DELETING
            store.save(state)
        said = self.delete(state, store, progress, persisted=persisted)
        store.remove_tree(state.name, store.cluster_dir(state.name))
        store.delete(state.name)
        progress(said)

    def ready(self, state: ClusterState, store: StateStore, progress: Progress) -> Callable[[], str]:
        """``up``'s checks, before anything is recorded or created (a check may fill in the plan's
        details). Returns the steps that create every resource (each recorded as made, the cluster's
        state saved as they go), which return the line that says the cluster is up."""
        raise NotImplementedError

    def delete(self, state: ClusterState, store: StateStore, progress: Progress, *, persisted: bool) -> str:
        """``down``'s steps: delete whatever the cluster may have made, in order, marking each resource
        deleted (and saving the state where it is ``persisted``); raise with what could not be deleted
        and how to try again. Returns the line that says the cluster is down."""
        raise NotImplementedError

    def hourly_cost(self, spec: ClusterSpec) -> float | None:
        """What bringing ``spec`` up costs per hour (USD, list price), for the question ``up`` asks
        before it creates anything billed. Default: not known."""
        return None

    def down_lost(self, name: str, region: str, store: StateStore, progress: Progress) -> None:
        """``ddpctl down --name X --region R`` with no state file: delete what is found by tag."""
        raise UsageError(
            f"{self.name} clusters have no resources to find by tag: --region is for {_who(lambda p: p.billed)}"
        )

    def down_damaged(self, name: str, found: Salvage, store: StateStore, progress: Progress) -> None:
        """``ddpctl down`` of a cluster whose state file cannot be read, from what could be read of it.

        Default: what is found by tag in the region (``down_lost``); the caller deletes the state file.
        """
        if not found.region:
            raise UsageError(
                f"the state file of {name!r} is damaged ({found.reason}) and does not say its region: "
                f"`ddpctl down --name {name} --region REGION` finds its resources by tag"
            )
        self.down_lost(name, found.region, store, progress)

    def keep_outputs(self, state: ClusterState, run: RunSpec, dest: Path) -> bool:
        """Before a cluster brought up for one run is taken down: copy what the run wrote to its own
        snapshot folder into ``dest`` (under the run's record). Default: nothing (its nodes are not
        this machine; a run that must keep its results there gives ``--snapshot-dir``)."""
        return False

    def set_autodown(self, state: ClusterState, idle_s: int, progress: Progress) -> None:
        """Autodown after ``idle_s`` seconds without a run (0: off) on the nodes of a cluster that is
        up (``autodown`` providers only; ``check_spec`` refuses ``--autodown`` for the others)."""
        raise UsageError(self._no_autodown())

    def took_itself_down(self, state: ClusterState) -> TakenDown | None:
        """The cluster's nodes took it down (autodown): what is left (network, key pair...) is for
        ``down`` to delete, and, with a ``kept_head``, the runs' outputs on its disk for ``down`` to
        copy first (``start_kept_head``). Default: never (None)."""
        return None

    def start_kept_head(self, state: ClusterState, store: StateStore, progress: Progress) -> None:
        """Start the head node that autodown stopped (``TakenDown.kept_head``) and make it reachable
        again, so that ``down`` can copy the runs' outputs off its disk."""
        raise UsageError(f"{self.name} clusters keep no stopped head node")

    def _no_autodown(self) -> str:
        return f"autodown is for --provider {_who(lambda p: p.autodown)}, not {self.name}: {self.no_autodown_why}"

    def configure(self, state: ClusterState, store: StateStore, progress: Progress, play: Play) -> PlayReport:
        """site.yml again on a cluster that is up (``ddpctl configure``): the roles, check mode and
        diffs ``play`` asks for."""
        raise UsageError(
            f"{self.name} clusters run no playbooks: `ddpctl configure` is for {_who(lambda p: p.runs_playbooks, ', ')}"
        )

    # ---- checks before anything is made ------------------------------------------------------------

    def check_spec(self, spec: ClusterSpec) -> None:
        """Refuse what this provider does not take: playbook variables where no playbook runs, and
        another provider's options (``--inventory`` among them) given a value, by their flags.
        Cheap: every ``ClusterSpec`` is checked with it as it is made."""
        if spec.playbook_vars and not self.runs_playbooks:
            raise UsageError(
                f"--playbook-var is for --provider {_who(lambda p: p.runs_playbooks)} (they run "
                f"playbooks/site.yml), not {self.name}"
            )
        if spec.autodown_s and not self.autodown:
            raise UsageError(self._no_autodown())
        from .registry import all_options

        given = {"inventory": "--inventory"} if spec.inventory and not self.takes_inventory else {}
        given |= {  # another provider's options, given a value
            o.name: o.given_flag
            for o in all_options()
            if o not in self.options and spec.options.get(o.name, o.empty) != o.empty
        }
        if given:
            flags = ", ".join(given.values())
            takers = _who(lambda p: all(f == "inventory" and p.takes_inventory or f in p.option_names() for f in given))
            verb = "is" if len(given) == 1 else "are"
            if not takers:  # flags of different providers
                raise UsageError(f"{flags} are not for --provider {self.name}")
            raise UsageError(f"{flags} {verb} for --provider {takers}, not {self.name}")

    def take_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """``ClusterSpec.options``: every option it takes (``options``), from ``given`` or at its
        empty value, each checked (``Option.validate``); a key no provider declares is refused.
        Another provider's options are left out (``check_spec`` refused any given a value)."""
        from .options import take
        from .registry import all_options

        unknown = sorted(set(given) - {o.name for o in all_options()})
        if unknown:
            raise UsageError(f"unknown provider option(s) {unknown}: known are {sorted(o.name for o in all_options())}")
        return take(self.options, given)

    def check_up(self, spec: ClusterSpec) -> None:
        """What bringing this spec up needs, found before anything is made (local: CPUs, Python)."""

    def check_up_flags(self, *, down_on_failure: bool) -> None:
        """The flags of ``up`` that are not part of the spec."""
        if not down_on_failure and not self.billed:
            raise UsageError(f"--no-down-on-failure is for --provider {_who(lambda p: p.billed)}, not {self.name}")

    def check_run(self, cluster: ClusterState, run: RunSpec, python: str | None, *, cluster_exists: bool) -> None:
        """What a run on this provider's nodes needs, found before the launch (local: CPUs, Python)."""

    def default_nodes(self, inventory: str) -> int:
        """``--nodes`` when not given."""
        return 1

    def preflight(self, state: ClusterState) -> None:
        """Check the nodes can run a job (torch importable...) before anything starts."""

    # ---- reports ----------------------------------------------------------------------------------

    def dry_run(self, state: ClusterState, store: StateStore, progress: Progress) -> DryRunReport | None:
        """``up --dry-run`` beyond the plan (None: the plan says it all)."""
        return None

    def status(self, state: ClusterState) -> LiveStatus | None:
        """What runs now according to the provider's API (None: the state file says it all)."""
        return None

    # ---- running jobs -----------------------------------------------------------------------------

    def rdzv_port(self, state: ClusterState, requested: int | None) -> int:
        """A rendezvous port on the head node (``requested`` checked, or a free one)."""
        from ..model.spec import DEFAULT_PORT

        return requested or state.spec.port or DEFAULT_PORT

    def executor(self, state: ClusterState, sink: Sink) -> Executor:
        """What runs a launch plan on the nodes, streaming their lines to ``sink``."""
        raise NotImplementedError

    def replace_lost_nodes(
        self,
        state: ClusterState,
        store: StateStore,
        nodes: list[str],
        progress: Progress,
        unhealthy: Callable[[str], str] | None = None,
    ) -> ClusterState | None:
        """Of ``nodes``, which an elastic run lost, those whose machines the provider took back (aws:
        a spot instance interrupted or gone), and those of the others that ``unhealthy`` finds unhealthy
        (node -> its reasons, "" where healthy: the health query, asked only of machines that are still
        there), each replaced by a new machine configured as they were; the cluster's state with them,
        recorded; None: none was replaced (the run tries their hosts again as they are). Default: None."""
        return None

    def replaces_lost_nodes(self, state: ClusterState, store: StateStore) -> bool:
        """An elastic run's lost node may be replaced by a new machine (``replace_lost_nodes``): its
        supervisor then runs here, where the credentials are, not on the head node, unless the head
        may replace nodes itself (``head_replacer``). Default: False."""
        return False

    def head_replacer(self, state: ClusterState, store: StateStore) -> Callable[[Any, str], list[str]] | None:
        """An elastic run's lost nodes replaced by the run's supervisor on the head node itself, with
        credentials of the head's own (aws: ``--spot`` with ``--head-instance-profile``, and the head's
        ddpctl environment, ``NodeInfo.controller``): given a connection to the head and a folder there,
        what the head needs is put there, and the command line it runs for a lost node returned (the
        node's name appended; ``Renew.on_head``). None (the default): not on the head."""
        return None

    def machine_of(self, state: ClusterState, node: str) -> str:
        """The id of the machine ``node`` runs on, as the provider knows it (aws: its instance); "": none."""
        return ""

    def adopt_replacements(
        self, state: ClusterState, store: StateStore, replaced: dict[str, dict[str, str]], progress: Progress
    ) -> None:
        """The nodes the head's supervisor replaced (``RunResult.replaced``: each one's new instance and
        address) recorded in ``state`` here, and saved, so that ``status``, ``ssh`` and the next run reach
        them. Default: nothing (no provider of it replaces nodes on the head)."""

    def check_targets(self, state: ClusterState, progress: Progress) -> tuple[ClusterState, ExecutorFor]:
        """The nodes jobs run on and the executor that reaches them: what ``ddpctl check`` tests, and
        the nodes ``ddpctl ssh NODE`` opens beyond the recorded ones. Default: the cluster's own."""
        return state, lambda sink: self.executor(state, sink)


def _who(can: Callable[[type[Provider]], bool], sep: str = " or ") -> str:
    """The providers that ``can``, for a message (``registry.who``)."""
    from .registry import who

    return who(can, sep)
