"""Options shared by several commands (one definition each, as in pip-tools)."""

from __future__ import annotations

import click

json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document on stdout (progress goes to stderr)."
)
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print what would be created and run, and create nothing."
)
name_option = click.option(
    "--name", default=None, metavar="NAME", help="Cluster name (default: the only cluster, or 'default')."
)
nodes_option = click.option(
    "--nodes", "-n", type=click.IntRange(min=1), default=1, show_default=True, help="Number of nodes."
)
nproc_option = click.option(
    "--nproc-per-node", type=click.IntRange(min=1), default=None,
    help="Processes (ranks) per node; one per GPU on GPU nodes. [default: 1, or the cluster's]",
)  # fmt: skip
port_option = click.option(
    "--port", type=click.IntRange(1024, 65535), default=None, help="c10d rendezvous port (default: a free port)."
)
env_option = click.option(
    "--env", "-e", multiple=True, metavar="KEY=VALUE", help="Extra environment for every rank (repeatable)."
)
python_option = click.option(
    "--python", default=None, metavar="PATH", help="Python with torch on the nodes (local: this interpreter)."
)
