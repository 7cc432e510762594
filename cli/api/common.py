"""What the Python API's functions share: the terminal's output for a run, the state home, and
values checked as the CLI checks its flags."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ddpctl.infra.model.results import OutputLine
    from ddpctl.infra.model.store import StateStore


def print_progress(message: str) -> None:
    """The default progress callback: the line on stderr, as the CLI prints it."""
    print(message, file=sys.stderr, flush=True)


def print_line(line: OutputLine) -> None:
    """The default job-line callback: ``[node1 r3] text`` on stdout, as ``ddpctl run`` prints it."""
    label = f"[{line.node} r{line.rank}]" if line.rank is not None else f"[{line.node}]"
    print(f"{label} {line.text}", flush=True)


def _quiet(_: Any) -> None:
    pass


class _Terminal:
    """``run``'s default: the lines as ``ddpctl run`` prints them (``print_line``), less the
    repeated agent lines (``repeats.py``) and a failure's secondary traces (``failures.py``)."""

    def __init__(self, run_id: str) -> None:
        from ..failures import SecondaryTraces
        from ..repeats import RepeatedAgentLines

        self.repeats, self.traces = RepeatedAgentLines(run_id), SecondaryTraces(run_id)

    def line(self, line: OutputLine) -> None:
        show = self.repeats.take(line)
        self._say(self.repeats.note())
        for each in self.traces.take(line) if show else []:
            print_line(each)

    def end(self) -> None:
        self.repeats.end()
        self._say(self.repeats.note())
        for each in self.traces.end():
            self._say(each) if isinstance(each, str) else print_line(each)
        self._say(self.traces.note())

    @staticmethod
    def _say(note: str | None) -> None:
        if note:
            print(note, flush=True)


def _store(home: str | Path | None) -> StateStore:
    from ddpctl.infra.model.store import StateStore

    if home is not None and not isinstance(home, (str, os.PathLike)):
        from ddpctl.infra.model.errors import UsageError

        raise UsageError(f"home={home!r} is {_python_kind(home)}: give the state home's path as a str or Path")
    store = StateStore(Path(home)) if home is not None else StateStore()
    store.check_home()
    return store


def _python_kind(value: Any) -> str:
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _checked(command: Any, param_name: str, value: Any, keyword: str | None = None) -> Any:
    """``value`` of the API's keyword ``keyword`` as the CLI's ``command`` takes its parameter
    ``param_name``: the same Click type checks it (its range, its choices, its name or id rules),
    refused with the CLI's words. The API takes Python values, so a value of another Python type
    (``port="abc"``, ``env="A=1"`` where a list is meant) is refused first, by the keyword's name;
    None: not given."""
    import click

    from ddpctl.infra.model.errors import UsageError

    if value is None:
        return None
    param = next(p for p in command.params if p.name == param_name)
    flag = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
    keyword = keyword or param_name
    if param.multiple or param.nargs == -1:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            example = f'["{param.metavar or "VALUE"}"]' if param.metavar else '["VALUE"]'
            raise UsageError(
                f"{keyword}={value!r} is {_python_kind(value)}: give a list of strings (each as one {flag}), "
                f"e.g. {keyword}={example}"
            )
        return tuple(_one(param, flag, keyword, v) for v in value)
    return _one(param, flag, keyword, value)


def _one(param: Any, flag: str, keyword: str, value: Any) -> Any:
    import click

    from ddpctl.infra.model.errors import UsageError

    from ..options import ClusterName, NodeCount, NprocList, RunId

    kind = param.type
    if isinstance(kind, (NodeCount, NprocList)):  # a count, a tuple of them, or the flag's text
        wants: tuple[type, ...] = (int, str, tuple, list)
        what = "an int, a tuple of ints or the flag's text"
    elif isinstance(kind, click.types.IntParamType):
        wants, what = (int,), "an int"
    elif isinstance(kind, click.types.FloatParamType):
        wants, what = (int, float), "a number"
    elif isinstance(kind, click.Path):
        wants, what = (str, os.PathLike), "a str or Path"
    else:  # text: a choice, a name, an id, a duration
        wants, what = (str,), "a str"
    if isinstance(value, bool) or not isinstance(value, wants):
        raise UsageError(f"{keyword}={value!r} is {_python_kind(value)}: give {what} (as the CLI's {flag})")
    if isinstance(kind, click.Path):
        value = os.fspath(value)
    try:
        return kind.convert(value, param, None)
    except click.BadParameter as exc:  # a rule of infra.model.spec says the flag itself: its words alone
        words = exc.message if isinstance(kind, (ClusterName, RunId)) else f"Invalid value for {flag!r}: {exc.message}"
        raise UsageError(words) from None


def _env_pairs(env: Any, env_from: Any = (), flag: str = "env") -> tuple[str, ...]:
    """The API's ``env=`` as the CLI's ``-e`` strings: a mapping ``{"K": "V"}`` is those values
    (``K=V``); a sequence of ``"K=V"`` strings is taken as the CLI takes them. ``env_from``: names
    whose values come from the caller's environment (``-e K``), passed as secrets (recorded and shown by
    name only)."""
    from collections.abc import Mapping

    from ddpctl.infra.model.errors import UsageError

    if isinstance(env, str) or isinstance(env_from, str):
        which, value = ("env", env) if isinstance(env, str) else ("env_from", env_from)
        raise UsageError(f"{which}={value!r} is one string: give a mapping {{'K': 'V'}} or a list")
    pairs: list[str] = []
    if isinstance(env, Mapping):
        for key, value in env.items():
            if not isinstance(key, str) or not key:
                raise UsageError(f"{flag}: key {key!r} is not a variable name: give names as strings")
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise UsageError(f"{flag}[{key!r}] is {value!r}: give each value as a string")
            pairs.append(f"{key}={value}")
    else:
        for item in env:
            if not isinstance(item, str) or "=" not in item:
                raise UsageError(
                    f"{flag}: {item!r} is not 'KEY=VALUE': give a mapping {{'K': 'V'}}, or names to pass through "
                    "from your environment as env_from=[...]"
                )
            pairs.append(item)
    for name in env_from:
        if not isinstance(name, str) or not name or "=" in name:
            raise UsageError(f"env_from: {name!r} is not a variable name: give names, e.g. ['WANDB_API_KEY']")
        pairs.append(name)
    return tuple(pairs)
