"""The health query (``health.py``) asked by a run, no burn (seconds): while the run goes, of its nodes with
GPUs on a timer (``run --health-every``) and of one that the watcher names slow (``LiveLook``), of an elastic run's lost node before it starts again
(``node_reasons``: a provider that replaces lost nodes replaces an unhealthy one), and of the nodes a run
named (failed, hung, lost, slow) at its end (``after_run``). A node that does not answer is said so,
never named unhealthy."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from ..launch.nodes import OutputLine
from ..launch.watch import SLOW_NOTE
from ..lifecycle import clusters
from ..model.results import RunResult
from ..model.state import ClusterState, NodeInfo
from ..model.store import StateStore
from .health import NO_ANSWER, counted_by, judge_probe, read_probes, run_health


def suspects(result: RunResult, cluster: ClusterState) -> list[NodeInfo]:
    """The nodes a run named (pure): the one that failed or hung it, those it lost, those it named slow; only
    those where configure counted GPUs (a CPU node has no health to look at), in the cluster's order.
    None (an empty list) for a run that succeeded with no node named, or that Ctrl-C ended."""
    named = result.named()
    return [node for node in cluster.nodes if node.name in named and node.gpus]


def answers(cluster: ClusterState, probes: dict[str, list[str]]) -> dict[str, str]:
    """node -> its unhealthy line ("": healthy) for each node that answered the health query in ``probes``
    (``RunResult.probes``: the head's supervisor asked them, by node), judged as ``look`` judges its own;
    a node that printed nothing is not in it."""
    lines = [OutputLine(node, None, text) for node, texts in probes.items() for text in texts]
    read = read_probes(lines)
    counted = counted_by(cluster)
    verdicts = [judge_probe(node, read.get(node.name), counted) for node in cluster.nodes if node.name in probes]
    return _answered(verdicts)


def _answered(verdicts) -> dict[str, str]:
    return {v.node: "" if v.ok else v.line() for v in verdicts if v.problems != [NO_ANSWER]}


def judge(cluster: ClusterState, probes: dict[str, list[str]]) -> list[str]:
    """The unhealthy lines of ``answers``."""
    return [line for line in answers(cluster, probes).values() if line]


def with_found(answered: dict[str, str], found: dict[str, str]) -> list[str]:
    """A run's ``health`` (pure): what the look at its end said of the nodes that answered it (``answers``),
    then what was found unhealthy while it went (``found``: node -> its line) of every other node, one that
    did not answer the end's look included. Attached (``execute``) and from the head's record alike."""
    ended = [line for line in answered.values() if line]
    return ended + [line for node, line in sorted(found.items()) if node not in answered]


def found_in_looks(cluster: ClusterState, looks: dict[str, list[list[str]]]) -> dict[str, str]:
    """node -> its last unhealthy line among the head's looks while the run went (``RunResult.looks``: each
    node's outputs, the latest last), as ``LiveLook.found`` keeps its own (pure)."""
    found: dict[str, str] = {}
    for node, outputs in looks.items():
        for lines in outputs:
            for line in judge(cluster, {node: lines}):
                found[node] = line
    return found


def recorded(cluster: ClusterState, probes: dict[str, list[str]], looks: dict[str, list[list[str]]]) -> list[str]:
    """A head-supervised run's ``health`` from its record (pure): the nodes it named as the look at its end
    judges them, then those its timer found unhealthy that the end's look did not ask."""
    return with_found(answers(cluster, probes), found_in_looks(cluster, looks))


def after_run(
    result: RunResult,
    cluster: ClusterState,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
) -> dict[str, str]:
    """The health query (no burn: seconds) on the nodes the run named (``suspects``), as ``answers``: each
    unhealthy one's line, so that a run that failed, hung or slowed on a sick GPU says so ("": healthy)."""
    nodes = suspects(result, cluster)
    if not nodes:
        return {}
    progress(f"health: looking at {', '.join(n.name for n in nodes)}, named by the run")
    return look_answers(cluster, nodes, executor_for, progress)


def look_answers(
    cluster: ClusterState,
    nodes: list[NodeInfo],
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
) -> dict[str, str]:
    """The health query (no burn) on ``nodes`` of ``cluster``, as ``answers``. A node that does not answer
    is said so (``progress``), not judged."""
    verdicts = run_health(replace(cluster, nodes=nodes), executor_for, progress, burn_s=0)
    for verdict in verdicts.values():
        if verdict.problems == [NO_ANSWER]:
            progress(f"health: {verdict.node} did not answer the health query")
    return _answered(verdicts.values())


def look(
    cluster: ClusterState,
    nodes: list[NodeInfo],
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
) -> list[str]:
    """The unhealthy lines of ``look_answers``."""
    return [line for line in look_answers(cluster, nodes, executor_for, progress).values() if line]


class LiveLook:
    """While a run goes (``execute.py`` hands it every line): the health query, in the background, of the
    run's nodes with GPUs every ``every_s`` seconds (0: never), and at once of one that the run's watcher
    names slow (``watch.SLOW_NOTE``), once a run. An unhealthy node is said then (``health: node1: unhealthy:
    GPU 2: clocks held down: ...``), again only if what it says changes, and kept (``found``) for the run's
    summary. ``ask``: ``look`` on those nodes, its lines."""

    def __init__(
        self,
        cluster: ClusterState,
        ask: Callable[[list[NodeInfo]], list[str]],
        progress: Callable[[str], None],
        every_s: float = 0,
    ) -> None:
        self.cluster, self.ask, self.progress, self.every_s = cluster, ask, progress, every_s
        self.asked: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.found: dict[str, str] = {}  # node -> its last unhealthy line
        self.lock = threading.Lock()
        self.done = threading.Event()
        gpus = [node for node in cluster.nodes if node.gpus]
        if every_s and gpus:
            self._start(self._every, gpus)

    def _start(self, target: Callable[[list[NodeInfo]], None], nodes: list[NodeInfo]) -> None:
        thread = threading.Thread(target=target, args=(nodes,), daemon=True)
        self.threads.append(thread)
        thread.start()

    def line(self, line: OutputLine) -> None:
        found = SLOW_NOTE.match(line.text) if line.rank is None else None
        if found is None or found["node"] in self.asked:
            return
        self.asked.add(found["node"])
        nodes = [node for node in self.cluster.nodes if node.name == found["node"] and node.gpus]
        if nodes:
            self._start(self._look, nodes)

    def _every(self, nodes: list[NodeInfo]) -> None:
        while not self.done.wait(self.every_s):
            self._look(nodes)

    def _look(self, nodes: list[NodeInfo]) -> None:
        try:
            lines = self.ask(nodes)
        except Exception as exc:  # the run goes on; the next look, or its end, looks again
            self.progress(f"health: could not look at {', '.join(n.name for n in nodes)}: {exc}")
            return
        for text in lines:
            node = text.split(":", 1)[0]
            with self.lock:
                new = self.found.get(node) != text
                self.found[node] = text
            if new:
                self.progress(f"health: {text}")

    def wait(self, timeout: float = 60.0) -> None:
        """The timer stopped, and the looks going on given ``timeout`` to say what they found (the run's
        summary comes after them)."""
        self.done.set()
        for thread in self.threads:
            thread.join(timeout)


def node_reasons(
    cluster: ClusterState,
    node: str,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
) -> str:
    """The health query (no burn) on ``node`` of ``cluster``: why it is unhealthy, its reasons in one text;
    "" where it is healthy, or did not answer (an elastic run's lost node, before it is replaced or started
    again: replaced on what its query says, not on its silence)."""
    [info] = [n for n in cluster.nodes if n.name == node]
    verdict = run_health(replace(cluster, nodes=[info]), executor_for, progress, burn_s=0)[node]
    return "" if verdict.ok or verdict.problems == [NO_ANSWER] else "; ".join(verdict.problems)


def lost_node_health(store: StateStore, name: str, progress: Callable[[str], None]) -> Callable[[str], str]:
    """``Provider.replace_lost_nodes``'s ``unhealthy`` for cluster ``name``: a lost node's health asked before
    it is started again (``node_reasons``, on the cluster as ``store`` has it then), wherever the run's
    supervisor is (here: ``execute``; the head: ``head_replace``); a query that cannot run: "" (the node is
    started again as it is), said."""

    def unhealthy(node: str) -> str:
        try:
            targets, executor_for = clusters.job_nodes(store.load(name), progress)
            return node_reasons(targets, node, executor_for, progress)
        except Exception as exc:
            progress(f"health: could not look at {node}: {exc}")
            return ""

    return unhealthy
