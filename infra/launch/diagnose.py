"""Failures explained: a failed run's output matched against the causes users keep meeting, for one
line of what it means and what to do (the run summary prints it; ``--json`` has it as ``hint``).

Pure: lines in, a hint out. The failing node's own lines are read first (a lost peer makes every
other node print connection errors too), then everyone's.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from .nodes import OutputLine


@dataclass(frozen=True)
class Cause:
    name: str
    pattern: re.Pattern[str]
    hint: str


def _cause(name: str, pattern: str, hint: str) -> Cause:
    return Cause(name, re.compile(pattern, re.IGNORECASE), hint)


#: Most specific first: the first cause whose pattern a line matches explains the failure.
CAUSES = (
    _cause(
        "cuda-oom",
        r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory",
        "a GPU ran out of memory: lower the per-rank batch size (e.g. -- --batch-size 32), or use more GPUs",
    ),
    _cause(
        "interface",
        r"Address family not supported|Unable to find address for|no such (device|interface)|"
        r"SOCKET_IFNAME.*(not found|invalid)|bind: Cannot assign requested address",
        "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME names an interface (or address) a node lacks: leave it out, "
        "or set it per node (the playbooks' nccl_env role writes each node's own)",
    ),
    _cause(
        "port-in-use",
        r"EADDRINUSE|Address already in use|failed to listen on any local network address",
        "the rendezvous port is in use on the head node (another run, or a process that kept it): give another "
        "with --port, or leave --port out",
    ),
    _cause(
        "rendezvous-timeout",
        r"RendezvousTimeoutError|Timed out waiting for clients|has not joined|rendezvous .*timed? ?out",
        "not every node joined the rendezvous in time: check that each one reaches the head's port "
        "(`ddpctl check`), and that every node of --nodes starts",
    ),
    _cause(
        "unreachable-head",
        r"(Connection refused|No route to host|Network is unreachable|connect\(\) timed out).*"
        r"|(RendezvousConnectionError|DistNetworkError)",
        "a node could not reach the head node's rendezvous port: `ddpctl check` names the link, and a "
        "firewall or security group must let the nodes reach each other",
    ),
    _cause(
        "nccl",
        r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclRemoteError|NCCL WARN",
        "an NCCL error: run again with -e NCCL_DEBUG=INFO to see which transport or link failed",
    ),
    _cause(
        "oom-killed",
        r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b",
        "a worker was killed with SIGKILL, usually by the kernel's OOM killer (`dmesg` says): lower the batch "
        "size or the ranks per node",
    ),
    _cause(
        "abort-at-exit",
        r"Signal 6 \(SIGABRT\)|exitcode\s*:\s*-6\b|terminate called without an active exception",
        "a rank aborted (SIGABRT), often at interpreter exit after its work was done: end the script with "
        "dist.destroy_process_group()",
    ),
)

RENDEZVOUS_TIMEOUT = next(cause for cause in CAUSES if cause.name == "rendezvous-timeout")


@dataclass
class Diagnosis:
    """Fed every line of a run; says which known cause, if any, explains its failure."""

    seen: dict[str, list[Cause]] = field(default_factory=dict)  # node -> causes, in the order met
    order: list[Cause] = field(default_factory=list)

    def feed(self, line: OutputLine) -> None:
        for cause in CAUSES:
            if cause.pattern.search(line.text):
                self.seen.setdefault(line.node, []).append(cause)
                self.order.append(cause)
                return

    def cause(self, failed_node: str | None) -> Cause | None:
        """The failure's cause: the failing node's most specific one, else anyone's."""
        mine = self.seen.get(failed_node or "", [])
        for found in (mine, self.order):
            if found:
                return min(found, key=CAUSES.index)
        return None

    def hint(self, failed_node: str | None) -> str:
        """The hint for the failure (``cause``'s), or ""."""
        cause = self.cause(failed_node)
        return cause.hint if cause else ""


@dataclass(frozen=True)
class Agent:
    """A node's agent as the rendezvous knows it: torchrun's ``--local-addr`` (the node's host) and,
    where the launcher knows it (a local subprocess), the agent's pid."""

    node: str
    addr: str
    pid: int | None = None


def never_joined(agents: Sequence[Agent], joined: Collection[str]) -> list[str] | None:
    """The nodes whose agent the rendezvous never saw, from the store's ``ADDR:PID`` list
    (``node_programs/rdzv_store.py``); None where that cannot be told: nodes that share an address
    (this machine's) and whose pids are not known."""
    seen = {tuple(member.rsplit(":", 1)) for member in joined}
    addrs = [agent.addr for agent in agents]
    missing = []
    for agent in agents:
        if agent.pid is not None:
            found = (agent.addr, str(agent.pid)) in seen
        elif addrs.count(agent.addr) == 1:
            found = any(addr == agent.addr for addr, _ in seen)
        else:
            return None
        if not found:
            missing.append(agent.node)
    return missing


def rendezvous_hint(missing: Sequence[str]) -> str:
    """The rendezvous-timeout hint, naming the nodes that never joined (the general one if none is named)."""
    if not missing:
        return RENDEZVOUS_TIMEOUT.hint
    if len(missing) == 1:
        return (
            f"{missing[0]} never joined the rendezvous: check that it reaches the head's port "
            "(`ddpctl check`) and that its torchrun agent starts"
        )
    return (
        f"{', '.join(missing)} never joined the rendezvous: check that they reach the head's port "
        "(`ddpctl check`) and that their torchrun agents start"
    )
