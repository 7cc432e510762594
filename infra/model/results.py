"""A run's output and result as every floor sees them: a line of a node's output (``OutputLine``), how
each node's part ended (``NodeResult``, ``NodeStatus``), the run's result (``RunResult``), as the
supervisor reports them, run records keep them and the CLI and the API show them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .words import Word


@dataclass(frozen=True)
class OutputLine:
    node: str
    rank: int | None  # global rank, None for the agent's own lines
    text: str


class NodeStatus(Word):
    """How a node's part of a run ended: equal to, written and shown as its word."""

    OK = "ok"
    FAILED = "failed"
    STOPPED = "stopped"  # ddpctl stopped it: Ctrl-C, `ddpctl stop`, another node failed first, a cancelled job
    LOST = "lost"  # elastic: the run went on without it


@dataclass
class NodeResult:
    node: str
    exit_code: int | None
    status: NodeStatus

    def __post_init__(self) -> None:
        self.status = NodeStatus(self.status)


@dataclass
class RunResult:
    run_id: str
    exit_code: int  # 0 ok, 1 a node failed, 130 interrupted
    wall_s: float
    nodes: list[NodeResult] = field(default_factory=list)
    failed_node: str | None = None
    interrupted: bool = False
    hint: str = ""  # a failure's known cause, what it means and what to do (launch/diagnose.py)
    cause: str = ""  # that cause's name (launch/diagnose.py's CAUSES, or "hung": launch/watch.py)
    slow: list[str] = field(default_factory=list)  # the nodes named slow while it ran: "node1 (1.60x)"
    #: the health of the nodes the run named (failed, hung, lost, slow) looked at after it: each unhealthy
    #: one's line, "node1: unhealthy: GPU 0: Xid 79 (...)" (runs/health_in_runs.py ``after_run``)
    health: list[str] = field(default_factory=list)
    #: a supervisor away from ddpctl (the head node's): the health query's lines from the nodes it named, by
    #: node, judged into ``health`` by the controller (runs/health_in_runs.py ``judge``), then dropped
    probes: dict[str, list[str]] = field(default_factory=dict)
    #: the same supervisor's looks while the run went (``run --health-every``): each node's distinct outputs
    #: of the health query, the latest last, judged into ``health`` by the controller, then dropped
    looks: dict[str, list[list[str]]] = field(default_factory=dict)
    #: the same supervisor's replacements of lost nodes (``Renew.on_head``): each replaced node's new instance
    #: and private address, by node ({"instance": ..., "host": ...}), recorded in the cluster's state by the
    #: controller (``Provider.adopt_replacements``), then dropped
    replaced: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict:
        """As ``run.json`` and ``run --json`` keep it: ``probes``, ``looks`` and ``replaced`` only where there
        are any (the head's record)."""
        doc = asdict(self)
        for key in ("probes", "looks", "replaced"):
            if not doc[key]:
                del doc[key]
        return doc

    def named(self) -> set[str]:
        """The nodes the run named, whose health is worth a look: the one that failed or hung it, those
        it lost, those it named slow; none for a run that Ctrl-C ended."""
        if self.interrupted:
            return set()
        named = {self.failed_node} if self.failed_node else set()
        named |= {n.node for n in self.nodes if n.status == NodeStatus.LOST}
        return named | {text.split(" ")[0] for text in self.slow}


def result_of(doc: dict) -> RunResult:
    """The result in a run's record (``run.json``)."""
    r = dict(doc["result"])
    r["nodes"] = [NodeResult(**n) for n in r.get("nodes", [])]
    return RunResult(**r)
