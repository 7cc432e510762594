"""What ``--dry-run`` prints: the cluster a command would create and the launch it would start."""

from __future__ import annotations

import click


def print_cluster_plan(state, note: str = "") -> None:
    click.echo(f"Would create {state.spec.provider} cluster {state.name!r}{note}:")
    for res in state.resources:
        click.echo(f"  {res.kind:<10} {res.id}")
    for node in state.nodes:
        where = f" (workdir {node.workdir})" if node.workdir else ""
        gpus = f", GPUs {node.devices}" if node.devices else ""  # its share of its host's (local nodes)
        click.echo(f"  node       {node.name} at {node.host}{where}{gpus}")


def print_launch_plan(plan) -> None:
    for line in plan.dry_run_lines():
        click.echo(line)
