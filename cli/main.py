"""The ``ddpctl`` command line: thin Click commands over ``ddpctl.infra``.

Start-up stays light: nothing here imports torch, boto3, ansible or fabric (providers that need
them are imported only when used).
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ddpctl import __version__
from ddpctl.infra.model.errors import DdpctlError

from . import access_commands, cluster_commands, inspect_commands, run_command
from .options import EXIT_CODES, JSON_META, QUIET_META, VERBOSE_META
from .output_json import dumps, envelope

# Commands import the library (ddpctl.infra, rich) when they run, not at start-up: `--help` stays fast.


class DdpctlGroup(click.Group):
    """Prints every error as one line ("Error: ...") and exits with its code; under --json, also
    as the JSON envelope (``output.envelope``) on stdout."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BaseException as exc:  # which command failed, and whether it was asked for JSON
            where = (ctx.meta.get(JSON_META, False), ctx.invoked_subcommand, ctx.meta.get(VERBOSE_META, False))
            exc.ddpctl_where = where  # type: ignore[attr-defined]
            raise

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> NoReturn:
        extra.pop("standalone_mode", None)
        self.argv = hoisted(list(args) if args is not None else sys.argv[1:], self.commands)
        try:
            rv = super().main(self.argv, prog_name, standalone_mode=False, **extra)
        except click.ClickException as exc:
            hint = " (see --help)" if isinstance(exc, click.UsageError) else ""
            self.where_from_argv(exc)
            _fail(exc, f"{exc.format_message()}{hint}", exc.exit_code)
        except DdpctlError as exc:
            self.where_from_argv(exc)
            _fail(exc, str(exc), exc.exit_code)
        except (click.Abort, KeyboardInterrupt) as exc:
            _fail(exc, "interrupted", 130)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            from ddpctl.infra.model.store import default_home

            where = f" writing {exc.filename}" if exc.filename else f" (the state home is {default_home()})"
            _fail(
                exc, f"no space left on the device{where}: free some space and try again (`ddpctl down` still works)", 1
            )
        sys.exit(rv if isinstance(rv, int) else 0)

    def where_from_argv(self, exc: BaseException) -> None:
        """An error before the command parsed its --json (an unknown option, a bad value, a config
        file's error): whether --json was asked for is read from the command line, up to a ``--``
        (after it, the words are the job's or a node's command)."""
        as_json, command, verbose = getattr(exc, "ddpctl_where", (False, None, False))
        words = self.argv[: self.argv.index("--")] if "--" in self.argv else self.argv
        command = command or next((w for w in words if w in self.commands), None)
        exc.ddpctl_where = (as_json or "--json" in words, command, verbose)  # type: ignore[attr-defined]


#: ddpctl's own flags, taken anywhere before ``--`` (``ddpctl status -q`` as ``ddpctl -q status``)
GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose")


def hoisted(argv: list[str], commands: dict[str, click.Command]) -> list[str]:
    """``argv`` with the global flags given after the command moved before it (pure), as users of
    git, kubectl and the AWS CLI write them; never those after ``--`` (the job's, a node command's),
    nor one the command itself takes."""
    at = next((i for i, w in enumerate(argv) if w in commands), None)
    if at is None:
        return argv
    own = {opt for p in commands[argv[at]].params for opt in (*p.opts, *p.secondary_opts)}
    end = argv.index("--") if "--" in argv[at:] else len(argv)
    moved = [w for w in argv[at + 1 : end] if w in GLOBAL_FLAGS and w not in own]
    if not moved:
        return argv
    rest = [w for w in argv[at + 1 : end] if w not in moved]
    return [*argv[:at], *moved, argv[at], *rest, *argv[end:]]


def _fail(exc: BaseException, message: str, code: int) -> NoReturn:
    as_json, command, verbose = getattr(exc, "ddpctl_where", (False, None, False))
    if verbose:
        import traceback

        traceback.print_exception(exc)
    click.echo(f"Error: {message}", err=True)
    if as_json:  # from the parsed --json (an eager option), not from a "--json" anywhere in argv
        click.echo(dumps(envelope(command, False, error={"code": code, "message": message})))
    sys.exit(code)


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    path = Path(value) if value else Path("ddpctl.toml")
    if value or path.is_file():
        from .config_file import load_default_map

        ctx.default_map = load_default_map(path)
    return value


@click.group(cls=DdpctlGroup, epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpctl")
@click.option(
    "--config",
    callback=_load_config,
    is_eager=True,
    expose_value=False,
    metavar="FILE",
    envvar="DDPCTL_CONFIG",
    help="Defaults for the options below, from a TOML file (or $DDPCTL_CONFIG). [default: ./ddpctl.toml if present]",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="No progress lines: only the job's output, results and errors (anywhere before --).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="On an error, also the traceback behind it, for a bug report (anywhere before --).",
)
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: bool) -> None:
    """Multi-node PyTorch DDP, from nothing to a finished run and back to nothing.

    \b
    Quick start (this machine, no cloud, no root):
      ddpctl run mnist --nodes 2            # brings 2 local nodes up, trains, takes them down
    A cluster that stays up between runs:
      ddpctl up --nodes 2
      ddpctl run message-passing --nodes 2
      ddpctl status
      ddpctl down

    State lives in ~/.ddpctl (set DDPCTL_HOME to move it).
    """
    ctx.meta[QUIET_META], ctx.meta[VERBOSE_META] = quiet, verbose


for command in (
    cluster_commands.up,
    inspect_commands.status,
    cluster_commands.configure,
    cluster_commands.down,
    cluster_commands.autodown,
    run_command.run,
    inspect_commands.runs,
    inspect_commands.metrics,
    inspect_commands.check,
    access_commands.ssh,
    access_commands.logs,
    access_commands.stop,
    access_commands.download,
    access_commands.playbooks,
):
    cli.add_command(command)
