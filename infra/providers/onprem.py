"""The on-prem provider: existing hosts from an Ansible inventory, configured by playbooks/site.yml.

``up`` checks every host answers over SSH (and changes nothing if one does not), runs ``site.yml``
through ansible-runner, and records what the play reported about each node (its Python, env file,
bundle). Runs go over SSH (``launch/ssh_executor.py``). ``down`` stops the cluster's processes on every host
and removes ddpctl's work directories; what the playbooks installed stays.
"""

from __future__ import annotations

import shlex
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..hosts.ansible import Play, PlayReport
from ..hosts.connections import check_reachable, connect, remote_stop
from ..hosts.inventory import load_inventory
from ..hosts.site_play import reconfigure, record_nodes, run_site
from ..launch.ssh_executor import SshExecutor
from ..launch.supervise import OutputLine
from ..model.details import Detail
from ..model.errors import DdpctlError, UsageError
from ..model.host import Host
from ..model.spec import ClusterSpec
from ..model.state import ClusterPhase, ClusterState, LaunchKind, NodeInfo, Resource, ResourcePhase, Salvage
from ..model.store import StateStore
from ..tools.procs import CLUSTER_KEY
from .base import Progress, Provider


@dataclass(frozen=True)
class HostConfigDetail(Detail):
    """What the plan records of each host it configures (``infra/model/details.py``)."""

    kind = "host-config"
    address: str = ""


class OnpremProvider(Provider):
    name = "onprem"
    no_autodown_why = "its hosts are your own machines, which ddpctl never shuts down"
    runs_playbooks = True
    head_supervises = True
    takes_inventory = True

    def default_nodes(self, inventory: str) -> int:
        """Every host in the inventory."""
        return len(load_inventory(inventory)) if inventory else 1

    def plan(self, spec: ClusterSpec, store: StateStore, *, ephemeral: bool = False) -> ClusterState:
        if not spec.inventory:
            raise UsageError("--provider onprem needs --inventory FILE (an Ansible INI or YAML inventory)")
        hosts = load_inventory(spec.inventory)
        if spec.nodes > len(hosts):
            raise UsageError(
                f"--nodes {spec.nodes} but {spec.inventory} lists {len(hosts)} host(s): "
                f"use --nodes {len(hosts)} or fewer, or add hosts"
            )
        hosts = hosts[: spec.nodes]
        root = store.cluster_dir(spec.name)
        cluster_id = uuid.uuid4().hex[:12]
        nodes = [NodeInfo(name=h.name, host=h.address, workdir="", ssh=h, nproc=host_nproc(h)) for h in hosts]
        resources = [Resource("dir", str(root)), Resource("dir", str(root / "keys"))]
        resources += [HostConfigDetail(address=h.address).resource(h.name) for h in hosts]
        resources += [Resource("processes", f"{CLUSTER_KEY}={cluster_id}")]
        return ClusterState(
            spec=spec,
            cluster_id=cluster_id,
            status=ClusterPhase.PLANNED,
            nodes=nodes,
            resources=resources,
            ephemeral=ephemeral,
        )

    def ready(self, state: ClusterState, store: StateStore, progress: Progress) -> Callable[[], str]:
        hosts = [_host(n) for n in state.nodes]
        progress(f"checking SSH to {len(hosts)} host(s)")
        cpus = check_reachable(hosts)  # nothing is recorded or changed before every host answers

        def create() -> str:
            root = store.cluster_dir(state.name)
            for res in state.resources:
                if res.kind == "dir":
                    Path(res.id).mkdir(parents=True, exist_ok=True, mode=0o700)
                    res.status = ResourcePhase.CREATED
            store.save(state)
            report = run_site(
                state.spec.inventory,
                state.nodes,
                root / "keys",
                progress,
                state.spec.playbook_vars,
                work_folder=work_folder(state.name, state.cluster_id),
            )
            nodes = record_nodes(state.nodes, report, cpus)
            state.nodes = nodes
            state.launcher = LaunchKind.SBATCH if slurm_answers(hosts[0]) else LaunchKind.TORCHRUN
            if state.launcher == LaunchKind.SBATCH:
                progress(f"Slurm answers on {hosts[0].name}: jobs go through sbatch (--launcher torchrun to bypass it)")
            for res in state.resources:
                res.status = ResourcePhase.CREATED
            return f"on-prem cluster {state.name!r} is up: {', '.join(n.name for n in nodes)}"

        return create

    def delete(self, state: ClusterState, store: StateStore, progress: Progress, *, persisted: bool) -> str:
        own = work_folder(state.name, state.cluster_id)

        def ours(workdir: str) -> bool:  # the cluster's own folder, named for it, at an absolute path
            path = PurePosixPath(workdir)
            return path.is_absolute() and path.name == own and ".." not in path.parts

        shared = sorted({n.workdir for n in state.nodes if n.workdir and not ours(n.workdir)})
        if shared:  # an older ddpctl's cluster, configured before each had its own folder
            progress(
                f"warning: {', '.join(shared)} on the hosts of {state.name!r} may hold other clusters' runs "
                "(ddpctl gave each cluster its own folder only later): it stays"
            )
        owned = [(_host(n), n.workdir if ours(n.workdir) else "") for n in state.nodes]
        _clean_hosts(owned, state.cluster_id, progress)
        return f"on-prem cluster {state.name!r} is down (what the playbooks installed stays)"

    def down_damaged(self, name: str, found: Salvage, store: StateStore, progress: Progress) -> None:
        """Stop the cluster's processes on the inventory's hosts by their marker, if the damaged
        file still names the inventory and the cluster id; its work directories stay."""
        try:
            hosts = load_inventory(found.inventory) if found.inventory else []
        except DdpctlError as exc:
            hosts = []
            progress(f"warning: cannot read the inventory {found.inventory}: {exc}")
        if hosts and found.cluster_id:
            _clean_hosts([(h, "") for h in hosts], found.cluster_id, progress)
        else:
            progress(
                f"warning: the damaged state of {name!r} no longer says its {'cluster id' if hosts else 'inventory'}: "
                "processes of its runs may still run on its hosts (their environment has DDPCTL_CLUSTER_ID)"
            )
        progress(
            f"warning: ddpctl's work directories on the hosts of {name!r} were named in the damaged file: they stay"
        )
        store.remove_tree(name, store.cluster_dir(name))
        progress(f"on-prem cluster {name!r} is down (what the playbooks installed stays)")

    def configure(self, state: ClusterState, store: StateStore, progress: Progress, play: Play) -> PlayReport:
        """site.yml again (``ddpctl configure``), after the same SSH check as ``up``."""
        progress(f"checking SSH to {len(state.nodes)} host(s)")
        check_reachable([_host(n) for n in state.nodes])
        keys = store.cluster_dir(state.name) / "keys"
        return reconfigure(state, state.spec.inventory, keys, progress, play, work_folder(state.name, state.cluster_id))

    def preflight(self, state: ClusterState) -> None:
        """site.yml verified every node's Python env; `run` checks reachability as it connects."""

    def executor(self, state: ClusterState, sink: Callable[[OutputLine], None]) -> SshExecutor:
        return SshExecutor({n.name: _host(n) for n in state.nodes}, sink, head_node=state.nodes[0])


def work_folder(name: str, cluster_id: str) -> str:
    """The cluster's own folder under the hosts' work root (``ddpctl_cluster_folder`` of site.yml):
    hosts may serve several clusters, each with its runs' snapshots; ``down`` removes only this one."""
    return f"{name}-{cluster_id}"


def _clean_hosts(hosts: list[tuple[Host, str]], cluster_id: str, progress: Progress) -> None:
    """On every host at once: stop the cluster's processes and remove its work directory ("": none)."""

    def clean(host: Host, workdir: str) -> str | None:
        try:
            conn = connect(host)
        except DdpctlError as exc:
            return str(exc)
        try:
            remote_stop(conn, CLUSTER_KEY, cluster_id, "stop")
            if workdir:
                conn.run(f"rm -rf {shlex.quote(workdir)}", hide=True, warn=True, in_stream=False)
        finally:
            conn.close()
        return None

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        problems = [p for p in pool.map(lambda hw: clean(*hw), hosts) if p]
    for problem in problems:
        progress(f"warning: could not clean up {problem}; processes of this cluster may still run there")


def slurm_answers(login: Host, tries: int = 3, pause_s: float = 5.0) -> bool:
    """True when the head node has Slurm's client and its controller answers. A busy controller may
    be slow, or refuse for a moment: ``tries`` tries, ``pause_s`` apart, while ``sinfo`` says it could
    not reach the controller; where it has no configuration to find one, there is no Slurm to wait for."""
    conn = connect(login)
    try:
        if not conn.run("command -v sinfo", hide=True, warn=True, in_stream=False).ok:
            return False
        for attempt in range(tries):
            if attempt:
                time.sleep(pause_s)
            result = conn.run("timeout 30 sinfo -h -o %D", hide=True, warn=True, in_stream=False)
            verdict = sinfo_verdict(result.exited, result.stderr)
            if verdict != "retry":
                return verdict == "slurm"
        return False
    finally:
        conn.close()


#: What ``sinfo`` prints where no Slurm is set up: no slurm.conf, and no configless source (DNS SRV).
NO_SLURM_CONFIG = ("could not establish a configuration source", "unable to process configuration file")


def sinfo_verdict(exit_code: int, stderr: str) -> str:
    """``slurm`` (it answered), ``none`` (no Slurm set up here: sinfo found no configuration), or
    ``retry`` (a configured controller did not answer, or ``timeout`` stopped sinfo)."""
    if exit_code == 0:
        return "slurm"
    if any(text in stderr.lower() for text in NO_SLURM_CONFIG):
        return "none"
    return "retry"


def host_nproc(host: Host) -> int:
    """The inventory's ``ddpctl_nproc_per_node`` for ``host`` (0: not set)."""
    value = host.vars.get("ddpctl_nproc_per_node", 0)
    try:
        nproc = int(value)
    except (TypeError, ValueError):
        nproc = -1
    if nproc < 0:
        raise UsageError(f"{host.name}: ddpctl_nproc_per_node={value!r} in the inventory is not a count: use e.g. 2")
    return nproc


def _host(node: NodeInfo) -> Host:
    return node.ssh


PROVIDER = OnpremProvider()
