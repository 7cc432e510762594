"""What ``--dry-run`` prints: the cluster a command would create and the launch it would start."""

from __future__ import annotations

import shlex

import click


def print_cluster_plan(state, note: str = "") -> None:
    click.echo(f"Would create {state.spec.provider} cluster {state.name!r}{note}:")
    for res in state.resources:
        click.echo(f"  {res.kind:<10} {res.id}")
    for node in state.nodes:
        where = f" (workdir {node.workdir})" if node.workdir else ""
        click.echo(f"  node       {node.name} at {node.host}{where}")


def print_launch_plan(plan) -> None:
    if hasattr(plan, "script"):  # an sbatch plan
        click.echo(f"Would submit run {plan.run_id} with sbatch as {plan.script_path}:")
        click.echo(plan.script, nl=False)
        return
    click.echo(
        f"Would run {plan.job} as run {plan.run_id}: world size {plan.world_size}, rendezvous {plan.rdzv_endpoint}"
    )
    for node in plan.nodes:
        click.echo(f"  {node.node} ({node.host}):")
        click.echo(f"    cwd:  {node.cwd}")
        for key, value in node.shown_env().items():
            click.echo(f"    env:  {key}={value}")
        click.echo(f"    argv: {shlex.join(node.argv)}")
