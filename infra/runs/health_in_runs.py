"""The health query (``health.py``) asked by a run, no burn (seconds): of a node with GPUs that the watcher
names slow while the run goes (``LiveLook``), of an elastic run's lost node before it starts again
(``node_reasons``: a provider that replaces lost nodes replaces an unhealthy one), and of the nodes a run
named (failed, hung, lost, slow) at its end (``after_run``). A node that does not answer is said so,
never named unhealthy."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from ..launch.nodes import OutputLine
from ..launch.watch import SLOW_NOTE
from ..model.results import NodeStatus, RunResult
from ..model.state import ClusterState, NodeInfo
from .health import NO_ANSWER, run_health


def suspects(result: RunResult, cluster: ClusterState) -> list[NodeInfo]:
    """The nodes a run named (pure): the one that failed or hung it, those it lost, those it named slow; only
    those where configure counted GPUs (a CPU node has no health to look at), in the cluster's order.
    None (an empty list) for a run that succeeded with no node named, or that Ctrl-C ended."""
    if result.interrupted:
        return []
    named = {result.failed_node} if result.failed_node else set()
    named |= {n.node for n in result.nodes if n.status == NodeStatus.LOST}
    named |= {text.split(" ")[0] for text in result.slow}
    return [node for node in cluster.nodes if node.name in named and node.gpus]


def after_run(
    result: RunResult,
    cluster: ClusterState,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
) -> list[str]:
    """The health query (no burn: seconds) on the nodes the run named (``suspects``): each unhealthy one's
    line, so that a run that failed, hung or slowed on a sick GPU says so (a healthy node: nothing said)."""
    nodes = suspects(result, cluster)
    if not nodes:
        return []
    progress(f"health: looking at {', '.join(n.name for n in nodes)}, named by the run")
    return look(cluster, nodes, executor_for, progress)


def look(
    cluster: ClusterState,
    nodes: list[NodeInfo],
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
) -> list[str]:
    """The health query (no burn) on ``nodes`` of ``cluster``: the unhealthy ones' lines. A node that does
    not answer is said so (``progress``), not judged."""
    verdicts = run_health(replace(cluster, nodes=nodes), executor_for, progress, burn_s=0)
    for verdict in verdicts.values():
        if verdict.problems == [NO_ANSWER]:
            progress(f"health: {verdict.node} did not answer the health query")
    return [verdict.line() for verdict in verdicts.values() if not verdict.ok and verdict.problems != [NO_ANSWER]]


class LiveLook:
    """While a run goes (``execute.py`` hands it every line): a node with GPUs that the run's watcher names
    slow (``watch.SLOW_NOTE``) is asked the health query at once, in the background, once a run; an
    unhealthy one is said then (``health: node1: unhealthy: GPU 2: clocks held down: ...``), not only in
    the run's summary. ``ask``: ``look`` on those nodes, its lines."""

    def __init__(
        self,
        cluster: ClusterState,
        ask: Callable[[list[NodeInfo]], list[str]],
        progress: Callable[[str], None],
    ) -> None:
        self.cluster, self.ask, self.progress = cluster, ask, progress
        self.asked: set[str] = set()
        self.threads: list[threading.Thread] = []

    def line(self, line: OutputLine) -> None:
        found = SLOW_NOTE.match(line.text) if line.rank is None else None
        if found is None or found["node"] in self.asked:
            return
        self.asked.add(found["node"])
        nodes = [node for node in self.cluster.nodes if node.name == found["node"] and node.gpus]
        if nodes:
            thread = threading.Thread(target=self._look, args=(nodes,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _look(self, nodes: list[NodeInfo]) -> None:
        try:
            for text in self.ask(nodes):
                self.progress(f"health: {text}")
        except Exception as exc:  # the run goes on; its end looks again
            self.progress(f"health: could not look at {', '.join(n.name for n in nodes)}: {exc}")

    def wait(self, timeout: float = 60.0) -> None:
        """Until the looks going on have said what they found (the run's summary comes after them)."""
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
