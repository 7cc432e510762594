"""Options shared by several commands (one definition each, as in pip-tools), and the parameter
types that check a value where it is parsed: the rule itself lives in ``ddpctl.infra.model.spec`` (one
function per fact), so a flag, a ``ddpctl.toml`` value and a spec built by the library are judged
alike.
"""

from __future__ import annotations

import math

import click


def _spec_check(check, value, param, ctx, fail):
    """Run one of ``infra.model.spec``'s checks; its UsageError becomes Click's BadParameter (exit 2)."""
    from ddpctl.infra.model.errors import UsageError

    try:
        check(value)
    except UsageError as exc:
        fail(str(exc), param, ctx)
    return value


def _completions(incomplete: str, names: list[str]) -> list:
    from click.shell_completion import CompletionItem

    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


class ClusterName(click.ParamType):
    """A cluster name (``infra.model.spec.check_cluster_name``): also a file name under the state home, so
    ``--name ../runs/ID/options`` never reaches a path. Completes the recorded clusters."""

    name = "NAME"

    def convert(self, value, param, ctx):
        from ddpctl.infra.model.spec import check_cluster_name

        return _spec_check(check_cluster_name, value, param, ctx, self.fail)

    def shell_complete(self, ctx, param, incomplete):
        return _completions(incomplete, open_store().names())


class RunId(click.ParamType):
    """A run id (``infra.model.spec.check_run_id``): torchrun's --rdzv-id and a directory under runs/.
    ``new``: it names a new run (``run --run-id``; not given: ddpctl makes one), so nothing to complete;
    an empty one is refused as any other invalid id."""

    name = "ID"

    def __init__(self, flag: str, new: bool = False) -> None:
        self.flag, self.new = flag, new

    def convert(self, value, param, ctx):
        from ddpctl.infra.model.spec import check_run_id

        return _spec_check(lambda v: check_run_id(v, self.flag), value, param, ctx, self.fail)

    def shell_complete(self, ctx, param, incomplete):
        """The recorded runs, newest first (``--run-id`` names a new one: nothing to complete)."""
        if self.new:
            return []
        from ddpctl.infra.runs.records import list_runs

        return _completions(incomplete, [r.run_id for r in reversed(list_runs(open_store()))])


def complete_job(ctx, param, incomplete):
    """``run JOB``: the bundled jobs, and .py files and folders as a path."""
    from click.shell_completion import CompletionItem

    from ddpctl.infra.runs.jobs import BUNDLED_JOBS

    if "/" in incomplete or incomplete.startswith("."):
        return [CompletionItem(incomplete, type="file")]
    return [*_completions(incomplete, list(BUNDLED_JOBS)), CompletionItem(incomplete, type="file")]


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` (no comparison is true for it, so it passes any
    range) and ``inf`` (give the range a max)."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value} is not a number in the range {self._describe_range()}", param, ctx)
        return rv


#: ``ctx.meta`` key: this command was given --json (errors are then printed as JSON too).
JSON_META = "ddpctl.json"
#: ``ctx.meta`` keys of ``ddpctl --quiet`` (no progress lines) and ``ddpctl --verbose`` (tracebacks).
QUIET_META, VERBOSE_META = "ddpctl.quiet", "ddpctl.verbose"


def _note_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META] = True
    return value


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    is_eager=True,  # noted before the other options are checked: their errors come as JSON too
    callback=_note_json,
    help="Print one JSON document on stdout (progress goes to stderr).",
)
yes_option = click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Do not ask before what is billed: creating it, taking it down, or taking every cluster down "
    "(needed when stdin is not a terminal, as in scripts and CI).",
)


def confirm(action: str, yes: bool) -> None:
    """Ask before ``action`` (something that costs money or destroys), unless ``--yes``. With no
    terminal to ask on, refuse in one line that says to add --yes: nothing is done."""
    import sys

    from ddpctl.infra.model.errors import DdpctlError, UsageError

    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{action}: add --yes to go ahead (stdin is not a terminal, so ddpctl cannot ask)")
    if not click.confirm(f"{action}. Go ahead?", default=False, err=True):
        raise DdpctlError("nothing was done (answered no)")


dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print what would be created and run, and create nothing."
)


class Duration(click.ParamType):
    """An idle time for autodown (``infra.hosts.autodown.parse``): ``30m``, ``2h``, ``1h30m``, ``600s`` (5 min at least), or ``off``
    (0 seconds); a TOML integer is refused for its missing unit."""

    name = "DURATION"

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def convert(self, value, param, ctx):
        from ddpctl.infra.model.autodown import parse
        from ddpctl.infra.model.errors import UsageError

        try:
            return parse(value, self.flag)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


autodown_option = click.option(
    "--autodown",
    type=Duration("--autodown"),
    default="off",
    metavar="DURATION",
    help="aws: once no run has been active this long (30m, 2h; 5m at least), the nodes shut themselves down, with "
    "no ddpctl running anywhere: EC2 terminates them, but the head node, which stops with the runs' outputs on "
    "its disk until `down` copies them here and deletes it all (spot nodes all terminate). [default: off]",
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
    default=None,  # the upper bound: infra.model.spec.MAX_NPROC
    help="Processes (ranks) per node for runs that give none. [default: each node's own: one per GPU, else 1]",
)
port_option = click.option(
    "--port", type=click.IntRange(1024, 65535), default=None, help="c10d rendezvous port (default: a free port)."
)
env_option = click.option(
    "--env",
    "-e",
    multiple=True,
    metavar="KEY=VALUE",  # checked by infra.model.env_vars.parse_env / run_env, for run and up alike
    help="Extra environment for every rank (repeatable); KEY is letters, digits and '_', not starting with a digit. "
    "run: a bare -e KEY passes your environment's value as a secret (recorded and shown by name only).",
)
python_option = click.option(
    "--python",
    default=None,
    metavar="PATH",
    help="Python with torch on the nodes (local: this interpreter; checked by importing torch with it).",
)


def _as_text(value, sep: str):
    """A count (or counts) that is not text, from ``ddpctl.toml``, the API or Click's own default, as
    the flag's text, so one parser checks them all."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (tuple, list)):
        return sep.join(map(str, value))
    return value


class NprocList(click.ParamType):
    """``2`` (every node), ``2,1`` (one count per node, for nodes with different GPU counts), or
    torchrun's words ``gpu`` (each node's GPUs) and ``auto`` (its GPUs, or 1 on a node without)."""

    name = "N[,N...]|gpu|auto"

    def convert(self, value, param, ctx):
        value = _as_text(value, ",")  # a count from ddpctl.toml or the API is checked as the flag's text
        word = str(value).strip().lower()
        if word in ("gpu", "auto"):  # infra.runs.prepare.NPROC_WORDS (not imported: --help loads Click only)
            return word
        try:
            counts = tuple(int(v) for v in word.split(","))
        except ValueError:
            self.fail(f"{value!r} is not a count, a comma-separated list of counts, gpu or auto", param, ctx)
        if any(c < 1 for c in counts):
            self.fail(f"{value} is not in the range x>=1", param, ctx)
        return counts[0] if len(counts) == 1 else counts


run_nproc_option = click.option(
    "--nproc-per-node",
    type=NprocList(),
    default=None,
    metavar="N[,N...]|gpu|auto",
    help="Processes (ranks) per node: N, one per node (`2,1`), `gpu` (each node's GPUs) or `auto` (its GPUs, "
    "else 1; unlike torchrun's, never the CPU count). [default: each node's own: ddpctl_nproc_per_node in an "
    "on-prem inventory, else `up --nproc-per-node`, else one per GPU the node has (counted at up/configure), else 1]",
)


class NodeCount(click.ParamType):
    """``2`` (nodes) or ``2:3`` (elastic: at least 2, at most 3; torchrun's ``--nnodes MIN:MAX``)."""

    name = "N|MIN:MAX"

    def convert(self, value, param, ctx):
        value = _as_text(value, ":")  # `[run] nodes = 0` in ddpctl.toml is refused as `--nodes 0` is
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
    default=None,
    help="Number of nodes; MIN:MAX makes the run elastic: it goes on while MIN nodes remain "
    "(torchrun --nnodes MIN:MAX; implies --max-restarts 3). [default: every node of the cluster that is up; "
    "1 for the local cluster a run brings up]",
)


EXIT_CODES = """\b
Exit codes:
  0    success
  1    an error ddpctl could not get past, or the job failed on a node
  2    bad input (a flag, a path, a port, the config file): nothing was created
  130  interrupted (Ctrl-C); every process of the run was stopped
"""


def open_store():
    """The state store under DDPCTL_HOME (default ~/.ddpctl)."""
    from ddpctl.infra.model.store import StateStore

    store = StateStore()
    store.check_home()
    return store


down_on_failure_option = click.option(
    "--down-on-failure/--no-down-on-failure",
    default=True,
    show_default=True,
    help="aws: if `up` fails, delete what it made. Ctrl-C never deletes: it stops and says how.",
)  # of every billed provider (``Provider.check_up_flags``), not a spec's


def provider_options(func):
    """The options the providers declare (``infra.providers.all_options``: aws's, pcluster's) as
    Click options of ``up``, in the registry's order. Their values are checked by ``ClusterSpec``."""
    from ddpctl.infra.lifecycle.faces import all_options

    for option in reversed(all_options()):
        func = _click_option(option)(func)
    return func


def _click_option(option):
    """One declared option as Click's: a flag (a pair, showing its default, for one on by default),
    a repeatable KEY=VALUE for a table, an integer range, or text. Not given: None (or the flag's default)."""
    if option.kind is bool:
        if "/" in option.flag:
            return click.option(option.flag, option.name, default=option.empty, show_default=True, help=option.help)
        return click.option(option.flag, option.name, is_flag=True, help=option.help)
    if option.kind is dict:
        return click.option(option.flag, option.name, multiple=True, metavar=option.metavar, help=option.help)
    kind = click.IntRange(*option.bounds) if option.bounds else option.kind
    return click.option(option.flag, option.name, type=kind, default=None, metavar=option.metavar, help=option.help)


def given_options(values: dict) -> dict:
    """``up``'s values of the providers' options, as ``ClusterSpec.options`` takes them: those given
    (a flag at its default too), a table's ``KEY=VALUE`` items as a dict."""
    from ddpctl.infra.lifecycle.faces import all_options, check_given
    from ddpctl.infra.model.env_vars import parse_env

    given = {}
    for option in all_options():
        value = values[option.name]
        if option.kind is dict:
            value = parse_env(value, flag=option.flag)
        if value is not None:
            given[option.name] = value
    check_given(given)
    return given
