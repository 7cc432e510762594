"""How many ranks each node of a run gets (pure): ``--nproc-per-node`` as given, else each node's own count
(its inventory's, the cluster's, one per GPU, else 1), in words for the run's first line; and the check
that no node of a GPU job runs more ranks than it has GPUs."""

from __future__ import annotations

from ..model.errors import UsageError
from ..model.spec import RunSpec
from ..model.state import ClusterState, NodeInfo


def node_nprocs(cluster: ClusterState, nodes: int, given: int | tuple[int, ...] | str | None) -> tuple[int, ...]:
    """Processes on each of the first ``nodes`` nodes of ``cluster`` (pure).

    ``given`` (``--nproc-per-node``): a count for every node, one per node, ``gpu`` or ``auto``
    (``NPROC_WORDS``). Not given, each node's own: its inventory's ``ddpctl_nproc_per_node``, else
    the cluster's ``up --nproc-per-node``, else one per GPU it has (``NodeInfo.gpus``, counted at
    up/configure), else 1. A cluster that lists fewer nodes (ParallelCluster's head node stands for
    its compute fleet) repeats its last one; where that is wrong, the planner refuses ``--nodes``.
    """
    if isinstance(given, int):
        return (given,) * nodes
    if isinstance(given, tuple):
        return given  # RunSpec checks there is one per node
    return tuple(count for count, _ in _node_counts(cluster, nodes, given))


def nproc_source(cluster: ClusterState, nodes: int, given: int | tuple[int, ...] | str | None) -> str:
    """Where ``node_nprocs``'s counts come from, in words ("" where --nproc-per-node gave them)."""
    if isinstance(given, (int, tuple)):
        return ""
    said: list[str] = []
    for _, why in _node_counts(cluster, nodes, given):
        if why not in said:
            said.append(why)
    return ", ".join(said)


def _node_counts(cluster: ClusterState, nodes: int, given: str | None) -> list[tuple[int, str]]:
    """Each node's count and where it comes from, by ``node_nprocs``'s rule (``given``: None or a word)."""
    listed = cluster.nodes or [NodeInfo(name="node0", host="", workdir="")]
    out = []
    for i in range(nodes):
        node = listed[min(i, len(listed) - 1)]
        if given == "gpu" and not node.gpus:
            raise UsageError(
                f"--nproc-per-node gpu: node {node.name} of cluster {cluster.name!r} has no GPU (none counted at "
                "up/configure): give a count (e.g. --nproc-per-node 1) or auto"
            )
        if given is None and node.nproc:
            out.append((node.nproc, "ddpctl_nproc_per_node"))
        elif given is None and cluster.spec.nproc_per_node:
            out.append((cluster.spec.nproc_per_node, "the cluster's --nproc-per-node"))
        elif node.gpus:
            out.append((node.gpus, "one per GPU"))
        else:
            out.append((1, "1 on a node without GPUs"))
    return out


#: a run that sets this itself (``run -e``, ``up -e``) has chosen which GPUs its ranks see (empty: none)
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def check_ranks_fit_gpus(cluster: ClusterState, run: RunSpec) -> None:
    """No node of a GPU job runs more ranks than it has GPUs (pure; every provider and launcher, from
    ``NodeInfo.gpus`` as up/configure counted them): each rank takes the GPU of its LOCAL_RANK, and
    one past the last fails in CUDA ("invalid device ordinal") after everything started.

    A GPU job is any run on a node with GPUs (the bundled jobs use CUDA wherever it is there; a
    script of one's own is taken to), unless the run says which GPUs its ranks see: its own
    ``CUDA_VISIBLE_DEVICES`` (``run -e`` or the cluster's ``up -e``; empty: none, ranks on the CPU)
    is the user's choice, not checked. Nodes without GPUs run what they are asked (CPU ranks)."""
    if VISIBLE_DEVICES in run.env or VISIBLE_DEVICES in cluster.spec.env:
        return
    listed = cluster.nodes or [NodeInfo(name="node0", host="", workdir="")]
    for i, count in enumerate(run.nprocs()):
        node = listed[min(i, len(listed) - 1)]
        if node.gpus and count > node.gpus:
            raise UsageError(
                f"{count} process(es) on node {node.name} of cluster {cluster.name!r}, which has {node.gpus} GPU(s) "
                f"(counted at up/configure): each rank of a GPU job needs a GPU of its own: give --nproc-per-node "
                f"{node.gpus} or fewer, or -e {VISIBLE_DEVICES}= (empty) for ranks that use no GPU"
            )
