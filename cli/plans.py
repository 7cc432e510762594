"""What ``--dry-run`` prints: the cluster a command would create and the launch it would start."""

from __future__ import annotations

import shlex

import click

#: how --dry-run names the store's program in its argv (infra/node_programs/rdzv_store.py)
STORE_PROGRAM = "node program rdzv_store.py"


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
    if plan.store is not None:  # a node program's text is long: its name stands for it
        argv = [
            f"<{STORE_PROGRAM}>" if i == 2 and plan.store.argv[1] == "-c" else a for i, a in enumerate(plan.store.argv)
        ]
        _print_launch(f"rendezvous store on {plan.store.node}", plan.store, argv)
    for node in plan.nodes:
        _print_launch(node.node, node, node.argv)


def _print_launch(what: str, launch, argv) -> None:
    click.echo(f"  {what} ({launch.host}):")
    click.echo(f"    cwd:  {launch.cwd}")
    for key, value in launch.shown_env().items():
        click.echo(f"    env:  {key}={value}")
    click.echo(f"    argv: {shlex.join(argv)}")
