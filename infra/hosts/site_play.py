"""Configuring nodes with playbooks/site.yml and recording them as the play reported them.

Shared by every provider whose nodes are hosts ddpctl reaches over SSH (onprem, aws): the same
extravars, the same ``ddpctl_node`` fact, the same ``NodeInfo``.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from ..model.errors import DdpctlError, UsageError
from ..model.progress import Progress
from ..model.state import ClusterState, NodeInfo
from .ansible import ANSIBLE_CFG, PLAYBOOKS, WHOLE_PLAY, Play, PlayReport, run_playbook

#: The playbook as a user finds it: in the repository, or in the installed package (`ddpctl playbooks`).
SITE = PLAYBOOKS / "site.yml"

#: The roles of playbooks/site.yml, in order: what ``ddpctl configure --tags`` may name.
ROLES = ("common", "ssh_mesh", "nvidia", "python_env", "nccl_env", "bundle", "head_controller")


def check_tags(tags: str | None) -> str | None:
    """``--tags`` as Ansible gets it (comma-separated roles), every one a role of site.yml."""
    if tags is None:
        return None
    names = [t.strip() for t in tags.split(",") if t.strip()]
    unknown = [t for t in names if t not in ROLES]
    if unknown or not names:
        raise UsageError(f"--tags {tags!r}: give roles of {SITE}, comma-separated, from {', '.join(ROLES)}")
    return ",".join(names)


def changed_summary(report: PlayReport) -> str:
    """``node0 2 changed, node1 ok``: the play's recap, one entry per host."""
    return ", ".join(
        f"{host} {stats['changed']} changed" if stats.get("changed") else f"{host} ok"
        for host, stats in sorted(report.stats.items())
    )


def reconfigure(
    state: ClusterState, inventory: str, key_dir: Path, progress: Progress, play: Play, work_folder: str = ""
) -> PlayReport:
    """site.yml again on every node of a cluster that is up, with its recorded variables; the nodes
    as the play now reports them (in check mode, as they were: nothing changed)."""
    report = run_site(
        inventory, state.nodes, key_dir, progress, state.spec.playbook_vars, play=play, work_folder=work_folder
    )
    if not play.check:
        state.nodes = record_nodes(state.nodes, report, {n.name: n.cpus for n in state.nodes})
    return report


def run_site(
    inventory: str,
    nodes: list[NodeInfo],
    key_dir: Path,
    progress: Progress,
    playbook_vars: dict[str, str] | None = None,
    play: Play = WHOLE_PLAY,
    limit: list[str] | None = None,
    work_folder: str = "",
) -> PlayReport:
    """playbooks/site.yml on ``nodes`` of ``inventory``; the cluster's node key pair lives in ``key_dir``.

    ``playbook_vars`` (``up --playbook-var``) are extra vars: they win over the inventory's.
    ``play``: only some roles (``--tags``), check mode, diffs, as ``ansible-playbook`` takes them.
    ``limit``: only these of ``nodes`` (a replaced node), the others still the cluster's (its head).
    ``work_folder``: the cluster's own folder under the hosts' work root (hosts several clusters
    share: ``ddpctl_cluster_folder``); "": the work root itself (nodes the cluster owns).
    """
    limit = limit or [n.name for n in nodes]
    progress(f"{'checking (changing nothing)' if play.check else 'configuring'} {len(limit)} node(s) with {SITE}")
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return run_playbook(
        "site.yml",
        inventory,
        progress,
        extravars=site_extravars(nodes, key_dir, playbook_vars, work_folder),
        limit=",".join(limit),
        play=play,
    )


def site_extravars(
    nodes: list[NodeInfo], key_dir: Path, playbook_vars: dict[str, str] | None = None, work_folder: str = ""
) -> dict[str, str]:
    """What ddpctl adds to the inventory for site.yml: the user's variables, the cluster's key dir,
    the rendezvous address (the head node's) and the cluster's own work folder where it has one."""
    own = {"ssh_mesh_controller_key_dir": str(key_dir), "nccl_env_master_addr": nodes[0].host}
    if work_folder:
        own["ddpctl_cluster_folder"] = work_folder
    return {**(playbook_vars or {}), **own}


def site_command(
    inventory: str, nodes: list[NodeInfo], key_dir: Path, playbook_vars: dict[str, str] | None = None
) -> str:
    """The plain ``ansible-playbook`` command line that configures ``nodes`` as ``run_site`` does,
    runnable as printed from any directory (absolute paths, ddpctl's ansible.cfg where there is one)."""
    exe = Path(sys.executable).with_name("ansible-playbook")
    argv = [
        str(exe) if exe.exists() else "ansible-playbook",
        "-i",
        inventory,
        "-e",
        json.dumps(site_extravars(nodes, key_dir, playbook_vars)),
        str(PLAYBOOKS / "site.yml"),
    ]
    config = f"ANSIBLE_CONFIG={shlex.quote(str(ANSIBLE_CFG))} " if ANSIBLE_CFG.is_file() else ""
    return config + shlex.join(argv)


def _counted(value: object, recorded: int) -> int:
    """A count the play reports, or the recorded one where this play did not count (-1: a partial
    play, e.g. `configure --tags bundle`, which skips the nvidia role)."""
    try:
        count = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return recorded
    return recorded if count < 0 else count


def record_nodes(nodes: list[NodeInfo], report: PlayReport, cpus: dict[str, int]) -> list[NodeInfo]:
    """The nodes as the play reported them (the ``ddpctl_node`` fact of playbooks/site.yml)."""
    out = []
    for node in nodes:
        facts = report.facts.get(node.name, {}).get("ddpctl_node")
        if not facts:
            raise DdpctlError(
                f"{SITE} did not report node {node.name}'s layout (ddpctl_node): is that copy of the playbooks current?"
            )
        out.append(
            replace(
                node,
                cpus=cpus.get(node.name, node.cpus),
                workdir=facts["workdir"],
                python=facts["python"],
                env_file=facts["env_file"],
                bundle_dir=facts["bundle_dir"],
                ssh_config=facts.get("ssh_config", ""),
                gpus=_counted(facts.get("gpus"), node.gpus),
                torch=facts.get("torch") or node.torch,  # "": the play ran without python_env (--tags)
                controller=facts.get("controller", ""),
            )
        )
    return out
