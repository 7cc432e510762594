"""Options shared by several commands (one definition each, as in pip-tools), and the parameter
types that check a value where it is parsed: the rule itself lives in ``ddpctl.infra.spec`` (one
function per fact), so a flag, a ``ddpctl.toml`` value and a spec built by the library are judged
alike.
"""

from __future__ import annotations

import math

import click


def _spec_check(check, value, param, ctx, fail):
    """Run one of ``infra.spec``'s checks; its UsageError becomes Click's BadParameter (exit 2)."""
    from ddpctl.infra.errors import UsageError

    try:
        check(value)
    except UsageError as exc:
        fail(str(exc), param, ctx)
    return value


class ClusterName(click.ParamType):
    """A cluster name (``infra.spec.check_cluster_name``): also a file name under the state home, so
    ``--name ../runs/ID/options`` never reaches a path."""

    name = "NAME"

    def convert(self, value, param, ctx):
        from ddpctl.infra.spec import check_cluster_name

        return _spec_check(check_cluster_name, value, param, ctx, self.fail)


class RunId(click.ParamType):
    """A run id (``infra.spec.check_run_id``): torchrun's --rdzv-id and a directory under runs/.
    ``allow_empty``: "" means a new one (``run --run-id``)."""

    name = "ID"

    def __init__(self, flag: str, allow_empty: bool = False) -> None:
        self.flag, self.allow_empty = flag, allow_empty

    def convert(self, value, param, ctx):
        from ddpctl.infra.spec import check_run_id

        if value == "" and self.allow_empty:
            return value
        return _spec_check(lambda v: check_run_id(v, self.flag), value, param, ctx, self.fail)


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` (no comparison is true for it, so it passes any
    range) and ``inf`` (give the range a max)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value} is not a number in the range {self._describe_range()}", param, ctx)
        return rv


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document on stdout (progress goes to stderr)."
)
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print what would be created and run, and create nothing."
)
name_option = click.option(
    "--name",
    type=ClusterName(),
    default=None,
    metavar="NAME",
    help="Cluster name: lowercase letters, digits and '-' (default: the only cluster, or 'default').",
)
nproc_option = click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    default=None,  # the upper bound: infra.spec.MAX_NPROC
    help="Processes (ranks) per node; one per GPU on GPU nodes. [default: 1, or the cluster's]",
)
port_option = click.option(
    "--port", type=click.IntRange(1024, 65535), default=None, help="c10d rendezvous port (default: a free port)."
)
env_option = click.option(
    "--env",
    "-e",
    multiple=True,
    metavar="KEY=VALUE",  # checked by infra.spec.parse_env, for run and up alike
    help="Extra environment for every rank (repeatable); KEY is letters, digits and '_', not starting with a digit.",
)
python_option = click.option(
    "--python",
    default=None,
    metavar="PATH",
    help="Python with torch on the nodes (local: this interpreter; checked by importing torch with it).",
)


class NprocList(click.ParamType):
    """``2`` (every node) or ``2,1`` (one count per node, for nodes with different GPU counts)."""

    name = "N[,N...]"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, tuple)):
            return value
        try:
            counts = tuple(int(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"{value!r} is not a count or a comma-separated list of counts", param, ctx)
        if any(c < 1 for c in counts):
            self.fail(f"{value} is not in the range x>=1", param, ctx)
        return counts[0] if len(counts) == 1 else counts


run_nproc_option = click.option(
    "--nproc-per-node",
    type=NprocList(),
    default=None,
    help="Processes (ranks) per node, one per GPU on GPU nodes; `2,1` gives each node its own. "
    "[default: each node's (on-prem: ddpctl_nproc_per_node in the inventory), else the cluster's, else 1]",
)


class NodeCount(click.ParamType):
    """``2`` (nodes) or ``2:3`` (elastic: at least 2, at most 3; torchrun's ``--nnodes MIN:MAX``)."""

    name = "N|MIN:MAX"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, tuple)):
            return value
        parts = str(value).split(":")
        try:
            counts = tuple(int(v) for v in parts)
        except ValueError:
            self.fail(f"{value!r} is not a node count (2) or a range (2:3)", param, ctx)
        if len(counts) > 2 or any(c < 1 for c in counts) or counts[0] > counts[-1]:
            self.fail(f"{value!r}: give N >= 1, or MIN:MAX with 1 <= MIN <= MAX", param, ctx)
        return counts[0] if len(counts) == 1 else counts


run_nodes_option = click.option(
    "--nodes",
    "-n",
    type=NodeCount(),
    default=1,
    show_default=True,
    help="Number of nodes; MIN:MAX makes the run elastic: it goes on while MIN nodes remain "
    "(torchrun --nnodes MIN:MAX; implies --max-restarts 3).",
)
