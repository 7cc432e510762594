"""``ddpctl check``'s health part: is each node fit to run on? Planned here (pure), carried out by the
cluster's own executor as the links are, on every node at once; then judged node by node (pure).

Two launches, each a node program with the node's own Python (no torchrun, no rendezvous: a sick
node cannot hold the others up):

1. ``gpu_health`` on every node: nvidia-smi's query (``nvidia_smi.FIELDS``) and the Xid lines of the
   kernel log;
2. ``gpu_burn`` on every node, where any node's nvidia-smi listed GPUs: a few seconds of matmul on
   every GPU at once (every node, so that the launch's first node is the head, as the executor has it).

A node is unhealthy, with each reason said, when nvidia-smi lists fewer GPUs than configure counted
(or does not answer where it counted some), a GPU has uncorrected ECC errors since the driver loaded
(volatile), the kernel log has an Xid that is not the application's nor one the GPU handled (``Xid.note``),
a GPU's clocks are held down by a hardware or thermal reason (``nvidia_smi.BAD_REASONS``), a GPU's
burn failed or reached less than ``SLOW`` of the median of the cluster's GPUs of its name, or (in
``check.py``) the all-reduce among its GPUs failed. A node where configure counted no GPU and
nvidia-smi lists none (or is missing, or fails) is "no GPU" and passes.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import node_programs
from ..launch.nodes import OutputLine
from ..launch.plan import LaunchPlan, NodeLaunch, node_layers
from ..model.errors import DdpctlError
from ..model.progress import step
from ..model.spec import RunSpec, new_run_id
from ..model.state import ClusterState, NodeInfo
from . import nvidia_smi
from .nvidia_smi import GpuStatus, QueryError, Xid

#: a node's problem where its health query said nothing (it did not run, or the node did not answer)
NO_ANSWER = "its health query said nothing (see the lines above)"
#: a GPU whose burn reaches less than this share of the median of its kind is slow
SLOW = 0.75
BURN_S = 3.0
HEALTH_LINE = re.compile(r"^GPUHEALTH (?P<kind>\w+) ?(?P<text>.*)$")
BURN_LINE = re.compile(r"^burn gpu=(?P<gpu>\d+) tflops=(?P<tflops>[\d.]+) dtype=\S+ name=(?P<name>.*)$")
BURN_FAILED = re.compile(r"^burn failed gpu=(?P<gpu>\d+) (?P<why>.*)$")
BURN_NO_GPU = re.compile(r"^burn no-gpu (?P<why>.*)$")


@dataclass
class Probe:
    """What one node's ``gpu_health`` said, read."""

    gpus: list[GpuStatus] = field(default_factory=list)
    smi: str = ""  # "": it answered; "missing"; "failed ..."
    xids: list[Xid] = field(default_factory=list)
    log: str = ""  # "": read; else why the kernel log could not be read
    done: bool = False
    unreadable: str = ""  # a query line that was not nvidia-smi's fields


@dataclass
class Burn:
    """One node's burn: TFLOPS and name per GPU (CUDA's numbering), the GPUs that failed, or why none ran."""

    tflops: dict[int, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    no_gpu: str = ""


@dataclass
class NodeHealth:
    """One node's verdict: ``problems`` (each a reason it is unhealthy) and ``notes`` (said, not judged)."""

    node: str
    counted: int  # the GPUs configure counted
    found: int | None = None  # the GPUs nvidia-smi lists (None: no nvidia-smi, or it failed)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    burn_tflops: dict[int, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def no_gpu(self) -> bool:
        return not self.found and self.counted == 0

    def line(self) -> str:
        """The one line that names the node and why (or that it is healthy)."""
        if self.problems:
            return f"{self.node}: unhealthy: " + "; ".join(self.problems)
        if self.no_gpu:
            return f"{self.node}: healthy (no GPU)"
        median = f", burn median {statistics.median(self.burn_tflops.values()):.1f} TFLOPS" if self.burn_tflops else ""
        return f"{self.node}: healthy ({self.found} GPU(s){median})"

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "ok": self.ok,
            "gpus_counted": self.counted,
            "gpus_found": self.found,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "burn_tflops": {str(k): v for k, v in sorted(self.burn_tflops.items())},
        }


def _launch(cluster: ClusterState, node: NodeInfo, rank: int, run: RunSpec, argv: tuple[str, ...]) -> NodeLaunch:
    env = node_layers(cluster, run, 1, None, devices=node.devices).merged()
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbers the GPUs as nvidia-smi does
    return NodeLaunch(
        node=node.name,
        host=node.host,
        node_rank=rank,
        argv=node_programs.argv(node.python or cluster.spec.python, *argv),
        env=env,
        cwd=node.workdir,
        log_dir="",
        env_file=node.env_file,
    )


def _plan(cluster: ClusterState, nodes: list[NodeInfo], job: str, argv: tuple[str, ...]) -> LaunchPlan:
    run = RunSpec(job=job, nodes=len(nodes), run_id=new_run_id())
    launches = tuple(_launch(cluster, node, i, run, argv) for i, node in enumerate(nodes))
    return LaunchPlan(run.run_id, run.job, cluster.name, f"{nodes[0].host}:0", len(nodes), launches)


def plan_query(cluster: ClusterState) -> LaunchPlan:
    """``gpu_health`` on every node at once."""
    return _plan(cluster, cluster.nodes, "check-health", ("gpu_health",))


def plan_burn(cluster: ClusterState, seconds: float) -> LaunchPlan:
    """``gpu_burn`` on every node at once, each on all its GPUs for ``seconds``."""
    return _plan(cluster, cluster.nodes, "check-burn", ("gpu_burn", "--seconds", f"{seconds:g}"))


def read_probes(lines: list[OutputLine]) -> dict[str, Probe]:
    """Each node's ``GPUHEALTH`` lines, read."""
    probes: dict[str, Probe] = {}
    for line in lines:
        m = HEALTH_LINE.match(line.text.strip())
        if not m or not line.node:
            continue
        probe = probes.setdefault(line.node, Probe())
        kind, text = m["kind"], m["text"]
        if kind == "gpu":
            try:
                probe.gpus.extend(nvidia_smi.parse_query(text))
            except QueryError as exc:
                probe.unreadable = str(exc)
        elif kind == "smi":
            probe.smi = text
        elif kind == "xid":
            probe.xids.extend(nvidia_smi.parse_xids([text]))
        elif kind == "log":
            probe.log = text.removeprefix("unreadable ").strip() or "unreadable"
        elif kind == "done":
            probe.done = True
    return probes


def read_burns(lines: list[OutputLine]) -> dict[str, Burn]:
    burns: dict[str, Burn] = {}
    for line in lines:
        text = line.text.strip()
        if not line.node or not text.startswith("burn "):
            continue
        burn = burns.setdefault(line.node, Burn())
        if m := BURN_LINE.match(text):
            burn.tflops[int(m["gpu"])], burn.names[int(m["gpu"])] = float(m["tflops"]), m["name"].strip()
        elif m := BURN_FAILED.match(text):
            burn.failed[int(m["gpu"])] = m["why"]
        elif m := BURN_NO_GPU.match(text):
            burn.no_gpu = m["why"]
    return burns


def _gpu_label(node: NodeInfo, cuda_index: int) -> str:
    """A burn's GPU as nvidia-smi numbers it: CUDA's index in PCI order, through the node's share."""
    shared = [d.strip() for d in node.devices.split(",") if d.strip()] if node.devices else []
    if cuda_index < len(shared):
        return f"GPU {shared[cuda_index]}"
    return f"GPU {cuda_index}"


def counted_by(cluster: ClusterState) -> str:
    """Who counted the nodes' GPUs, in words (``Provider.gpus_counted_by``): configure, or, for
    ParallelCluster's compute nodes (which ddpctl never configures one by one), their instance type."""
    from ..providers import get_provider

    return get_provider(cluster.spec.provider).gpus_counted_by


def judge_probe(node: NodeInfo, probe: Probe | None, counted: str = "configure counted") -> NodeHealth:
    """The query's part of a node's verdict: GPU count, ECC, Xid, clocks event reasons (``counted``: who
    counted its GPUs, ``counted_by``)."""
    health = NodeHealth(node.name, node.gpus)
    if probe is None or not probe.done:
        health.problems.append(NO_ANSWER)
        return health
    if probe.smi == "missing":
        if node.gpus:
            health.problems.append(f"no nvidia-smi, but {counted} {node.gpus} GPU(s)")
        else:
            health.notes.append("no GPU")
        return health
    if probe.smi and not node.gpus:  # an nvidia-smi without a GPU to drive (a driver package on a CPU node)
        health.notes.append(f"no GPU (nvidia-smi {probe.smi})")
        return health
    if probe.smi:
        health.problems.append(f"nvidia-smi {probe.smi} ({counted} {node.gpus} GPU(s))")
        return health
    if probe.unreadable:
        health.problems.append(f"nvidia-smi's query unreadable: {probe.unreadable}")
        return health
    health.found = len(probe.gpus)
    if health.found < node.gpus:
        health.problems.append(f"nvidia-smi lists {health.found} GPU(s), {counted} {node.gpus}")
    elif health.found > node.gpus:
        health.notes.append(
            f"nvidia-smi lists {health.found} GPU(s), {counted} {node.gpus}"
            + (": `ddpctl configure --tags nvidia` counts them again" if counted == "configure counted" else "")
        )
    for gpu in probe.gpus:
        if gpu.ecc_volatile:
            health.problems.append(
                f"GPU {gpu.index}: {gpu.ecc_volatile} uncorrected ECC error(s) since the driver loaded"
            )
        elif gpu.ecc_aggregate:
            health.notes.append(f"GPU {gpu.index}: {gpu.ecc_aggregate} uncorrected ECC error(s) in its lifetime")
        if gpu.bad_reasons:
            health.problems.append(f"GPU {gpu.index}: clocks held down: {', '.join(gpu.bad_reasons)}")
    mine = {gpu.pci for gpu in probe.gpus}
    for xid in probe.xids:
        if node.devices and xid.pci not in mine:
            continue  # the host's kernel log, of a GPU another local node has
        said = f"{nvidia_smi.gpu_of(xid, probe.gpus)}: Xid {xid.code}" + (f" ({xid.text})" if xid.text else "")
        if xid.note:
            health.notes.append(f"{said}: {xid.note}")
        else:
            health.problems.append(said)
    if probe.log:
        health.notes.append(f"Xid not read: kernel log {probe.log}")
    return health


def judge_burns(cluster: ClusterState, verdicts: dict[str, NodeHealth], burns: dict[str, Burn]) -> None:
    """The burn's part: a GPU that failed, or one below ``SLOW`` of the median of the cluster's GPUs of its name."""
    by_name: dict[str, list[float]] = {}
    for burn in burns.values():
        for gpu, tflops in burn.tflops.items():
            by_name.setdefault(burn.names.get(gpu, ""), []).append(tflops)
    medians = {name: statistics.median(values) for name, values in by_name.items()}
    for node in cluster.nodes:
        burn, health = burns.get(node.name), verdicts[node.name]
        if health.found is None or not health.found:
            continue  # no GPU to burn
        if burn is None:
            health.problems.append("its burn said nothing (see the lines above)")
            continue
        if burn.no_gpu:
            health.notes.append(f"burn not run: {burn.no_gpu}")
            continue
        health.burn_tflops = dict(burn.tflops)
        for gpu, why in sorted(burn.failed.items()):
            health.problems.append(f"{_gpu_label(node, gpu)}: burn failed: {why}")
        for gpu, tflops in sorted(burn.tflops.items()):
            median = medians[burn.names.get(gpu, "")]
            if len(by_name[burn.names.get(gpu, "")]) > 1 and tflops < SLOW * median:
                health.problems.append(
                    f"{_gpu_label(node, gpu)}: slow: {tflops:.1f} TFLOPS in its burn, "
                    f"{tflops / median:.0%} of the median {median:.1f} of the cluster's {burn.names.get(gpu, '')}"
                )


def run_health(
    cluster: ClusterState,
    executor_for: Callable[[Callable[[OutputLine], None]], object],
    progress: Callable[[str], None],
    *,
    burn_s: float = BURN_S,
) -> dict[str, NodeHealth]:
    """Every node's verdict, by name, in the cluster's order (the in-node all-reduce: ``check.py``)."""
    nodes = cluster.nodes
    progress(f"health: nvidia-smi's query and the kernel log's Xids on {len(nodes)} node(s)")
    lines: list[OutputLine] = []
    with step(progress, f"health query ({len(nodes)} nodes)"):
        executor_for(lines.append).run(plan_query(cluster))
    probes = read_probes(lines)
    verdicts = {node.name: judge_probe(node, probes.get(node.name), counted_by(cluster)) for node in nodes}
    burning = [node for node in nodes if verdicts[node.name].found]
    if burning and burn_s > 0:
        progress(f"health: a {burn_s:g} s matmul burn on every GPU of {len(burning)} node(s) at once")
        lines = []
        with step(progress, f"GPU burn ({len(burning)} nodes)"):
            executor_for(lines.append).run(plan_burn(cluster, burn_s))
        burns = read_burns(lines)
        judge_burns(cluster, verdicts, burns)
    return verdicts


def choose_healthy(
    cluster: str, verdicts: dict[str, NodeHealth], nodes: int | None, min_nodes: int
) -> tuple[tuple[str, ...], int, int]:
    """``run --healthy-only`` (pure): the healthy nodes, in the cluster's order, and the run's node
    count and elastic MIN on them: ``nodes`` (None: every node) where that many are healthy, else,
    elastic (``min_nodes``), as many as are healthy while at least MIN are. Too few: one line naming
    the unhealthy nodes and why (``DdpctlError``), and nothing is started."""
    healthy = tuple(name for name, verdict in verdicts.items() if verdict.ok)
    sick = [f"{v.node} ({'; '.join(v.problems)})" for v in verdicts.values() if not v.ok]
    want = nodes or len(verdicts)
    needed = min_nodes or want
    if len(healthy) < needed:
        asked = f"--nodes {min_nodes}:{want}" if min_nodes else f"--nodes {want}" if nodes else "every node"
        raise DdpctlError(
            f"--healthy-only: {len(healthy)} healthy node(s) of {len(verdicts)} in cluster {cluster!r}, {needed} "
            f"needed ({asked}); unhealthy: {', '.join(sick)}"
        )
    count = min(want, len(healthy))
    return healthy, count, min(min_nodes, count)
