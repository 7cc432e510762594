"""One launcher interface, after TorchX's scheduler API: a run submitted to a launcher that keeps
it on the cluster's side gets a ``Handle``, recorded with the run (``options.json``), and every such
launcher answers the same verbs for it, from any later ddpctl: ``describe``, ``logs``, ``attach``
and ``cancel``.

Two launchers keep a run on the cluster's side: the run's supervisor on the head node (``head``,
``launch/head.py``) and Slurm (``slurm``, ``launch/slurm_executor.py``). A run supervised by this
machine's ddpctl (the local provider's processes, ``DDPCTL_SUPERVISOR=here``, an elastic spot run)
records no handle: it ends with its ddpctl; the same verbs for it, and for any run while its ddpctl
here holds it, are ``runs/here.py``'s (``HereLauncher``: that process and the run's record here).

Which of the three keeps a run (``Supervision``: here, head, slurm) is chosen in one place, ``choose``,
when the run is prepared (``runs/prepare.py``); the plan carries it to its executor.

Each launcher that keeps a run on the cluster's side submits it too (``HeadLauncher.submit``: the
supervisor started on the head; ``SlurmLauncher.submit``: install, then sbatch), as its executor's
first step: ``Executor.run`` submits through its launcher, hands the handle to its ``submitted``
callback, then follows the run with the launcher's ``attach``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

from ..model.state import LaunchKind
from ..model.words import Word

if TYPE_CHECKING:  # pragma: no cover
    from ..model.host import Host
    from .nodes import OutputLine, RunResult


class Phase(Word):
    """Where a submitted run is, as its launcher says."""

    RUNNING = "running"  # (or pending: waiting for Slurm's nodes)
    ENDED = "ended"  # its record is there
    GONE = "gone"  # the launcher knows nothing of it any more (Slurm forgot the job; a head node wiped)


class Supervision(Word):
    """Who keeps a run going, from its start to its record."""

    HERE = "here"  # this machine's ddpctl: the run ends with it (no handle recorded)
    HEAD = "head"  # the run's supervisor on the head node (``launch/head.py``): it outlives this ddpctl
    SLURM = "slurm"  # Slurm, through sbatch on the login node (``launch/slurm_executor.py``)


#: ``DDPCTL_SUPERVISOR=here``: a torchrun launch that would be supervised on the head node is supervised here
SUPERVISOR_ENV = "DDPCTL_SUPERVISOR"


def choose(
    launch: LaunchKind,
    *,
    head_supervises: bool,
    replaces_nodes: bool,
    environ: Mapping[str, str],
    head_replaces: bool = False,
) -> Supervision:
    """The one place the launcher kind is chosen. ``launch``: the run's ``--launcher`` or its
    cluster's (sbatch: Slurm). A torchrun launch is supervised on the head node where the provider's
    nodes have ddpctl's SSH mesh from there (``head_supervises``: aws, onprem; not pcluster's compute
    nodes, nor this machine's processes), unless a lost node may be replaced by a new machine
    (``replaces_nodes``: an elastic spot run) that only this machine can make (the cloud's credentials
    are here; ``head_replaces``: the head has its own, ``Provider.head_replacer``), or
    ``DDPCTL_SUPERVISOR=here`` says so; else here."""
    if launch == LaunchKind.SBATCH:
        return Supervision.SLURM
    replaced_here = replaces_nodes and not head_replaces
    if head_supervises and not replaced_here and environ.get(SUPERVISOR_ENV, "head") != "here":
        return Supervision.HEAD
    return Supervision.HERE


#: a handle's ``ref``: a supervisor's pid or a Slurm job id, digits (an array task's with _N; it goes into commands run on
#: the cluster: ``scancel REF``; a record that says otherwise is damaged)
REF_RE = re.compile(r"[0-9]{1,20}(_[0-9]{1,9})?")  # a pid, a Slurm job id (an array task's: _N)


@dataclass(frozen=True)
class Handle:
    """A run on the cluster's side, as its launcher finds it again."""

    kind: str  # the launcher: "head" | "slurm" (``KINDS``)
    ref: str  # head: its supervisor's pid; slurm: the job id
    folder: str  # head: the run's folder on the head node; slurm: the job's output folder on the login node
    run_id: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: object) -> Handle | None:
        """From a run's ``options.json`` (None: no handle, or not one this ddpctl reads). What goes
        into commands on the cluster is checked here: ``ref`` is a pid (head) or a Slurm job id
        (``1234``, an array's ``1234_5``), and ``run_id`` a run id, else the record is not read
        (a damaged or edited record never runs ``scancel 1; rm -rf ~`` on the login node)."""
        if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
            return None
        fields = [doc.get(k) for k in ("kind", "ref", "folder", "run_id")]
        if not all(isinstance(f, str) for f in fields):
            return None
        kind, ref, folder, run_id = fields
        from ..model.spec import RUN_ID_RE

        if not re.fullmatch(REF_PATTERNS[kind], ref) or not RUN_ID_RE.fullmatch(run_id) or not folder:
            return None
        return cls(kind, ref, folder, run_id)


@dataclass(frozen=True)
class Described:
    phase: Phase
    #: ENDED: the run's record as ``runs/<id>/run.json`` keeps it (``result``, and ``plan`` where the
    #: launcher has it)
    record: dict | None = None


class Launcher(Protocol):
    """The verbs for a submitted run, on an open connection to its cluster (``reopen``)."""

    def describe(self, handle: Handle) -> Described: ...

    def logs(self, handle: Handle, sink: Callable[[str], None], *, seen: list[str], follow: bool) -> None:
        """The run's output lines (``[NODE rRANK] text``, as ``runs/<id>/output.log`` has them)
        after those this machine has (``seen``) to ``sink``; ``follow``: as they come, until the
        run ends. Ctrl-C goes up (the run goes on)."""
        ...

    def attach(
        self,
        handle: Handle,
        sink: Callable[[OutputLine], None],
        *,
        seen: list[str],
        progress: Callable[[str], None] | None = None,
    ) -> RunResult:
        """Follow the run to its end as an attached ``ddpctl run`` does (the lines after ``seen`` to
        ``sink``); Ctrl-C cancels it."""
        ...

    def cancel(self, handle: Handle) -> None:
        """Stop the run as Ctrl-C does, and return once it has ended."""
        ...

    def close(self) -> None: ...


#: what each launcher's ``ref`` looks like: a pid; a Slurm job id, an array task's with ``_N``
REF_PATTERNS = {"head": r"[1-9]\d{0,9}", "slurm": r"\d{1,12}(_\d{1,9})?"}

#: each launcher's name in a handle -> "module:class", opened with ``reopen``
KINDS = {"head": "head:HeadLauncher", "slurm": "slurm_executor:SlurmLauncher"}


def reopen(handle: Handle, host: Host) -> Launcher:
    """The launcher of ``handle``, connected to its cluster's head (login) node ``host``; raises
    where it cannot be reached."""
    import importlib

    module, name = KINDS[handle.kind].split(":")
    cls = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    return cls.open(host)
