"""``ddpctl.toml``: defaults for the command-line options, fed to Click's ``default_map``.

    [cluster]            # ddpctl up (and run, when it brings a local cluster up)
    name = "default"
    provider = "local"
    nodes = 2
    nproc_per_node = 1
    port = 29500
    python = "/opt/venv/bin/python"
    inventory = "hosts.ini"   # --provider onprem
    region = "us-west-2"      # a provider's options, as its flags of `up` without the dashes
    instance_type = "g5.xlarge"   # (the providers declare them: infra/providers/<name>/options.py)
    spot = true
    autodown = "30m"          # aws: the cluster takes itself down after 30 min without a run

    [cluster.env]        # extra environment for every rank
    NCCL_DEBUG = "INFO"

    [cluster.playbook_vars]   # variables for playbooks/site.yml (onprem, aws, pcluster)
    nvidia_cuda_version = "12.8"

    [cluster.tags]       # tags on everything ddpctl creates (aws, pcluster)
    team = "ml"

    [run]                # ddpctl run
    nodes = 2
    max_restarts = 1
    snapshot_dir = "s3://my-bucket/snapshots"
    requirements = "requirements-gpu.txt"  # the project's packages on every node (none: no packages)
    all_lines = true          # every agent line on the terminal (--all-lines)

Flags given on the command line win. Unknown sections or keys are refused.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (Ubuntu 22.04's)
    import tomli as tomllib

from ddpctl.infra.lifecycle.faces import all_options
from ddpctl.infra.model.errors import UsageError

#: The TOML type each key takes (a value of another type is refused, never coerced: `nodes = 2.7`
#: is not 2). What the value may be (a range, a known provider...) is the option's own check.
STR, INT, BOOL, TABLE = (str,), (int,), (bool,), (dict,)
CLUSTER_TYPES: dict[str, tuple[type, ...]] = {
    "name": STR,
    "provider": STR,
    "nodes": INT,
    "nproc_per_node": INT,
    "port": INT,
    "python": STR,
    "env": TABLE,
    "inventory": STR,
    "down_on_failure": BOOL,
    "autodown": STR,
    "playbook_vars": TABLE,
    # the providers' own options: region, instance_type, spot, tags...
    **{option.name: (option.kind,) for option in all_options()},
}
RUN_TYPES: dict[str, tuple[type, ...]] = {
    "name": STR,
    "nodes": (int, str),
    "nproc_per_node": (int, str),
    "max_restarts": INT,
    "port": INT,
    "python": STR,
    "env": TABLE,
    "snapshot_dir": STR,
    "requirements": STR,
    "hang_timeout": INT,
    "health_every": INT,
    "all_lines": BOOL,
}
CLUSTER_KEYS, RUN_KEYS = set(CLUSTER_TYPES), set(RUN_TYPES)
EXAMPLES = {str: '"text"', int: "2", bool: "true"}


def load_default_map(path: Path) -> DefaultMap:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"config file {path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - {"cluster", "run"}
    if unknown:
        raise UsageError(f"unknown section(s) {sorted(unknown)} in {path}: use [cluster] and [run]")
    sections, errors = {}, {}
    for title, types in (("cluster", CLUSTER_TYPES), ("run", RUN_TYPES)):
        try:
            sections[title] = _section(data.get(title, {}), types, title, path)
        except UsageError as exc:  # only the commands that read this section fail on it
            sections[title], errors[title] = {}, exc
    cluster, run = sections["cluster"], sections["run"]
    # A run that brings its own cluster up takes the cluster's defaults too.
    run_defaults = {k: v for k, v in cluster.items() if k in RUN_KEYS} | run
    down = _only(cluster, {"name", "region"})
    return DefaultMap(
        {
            "up": cluster,
            "run": run_defaults,
            "down": down,
            "status": _only(cluster, {"name"}),
            "check": _only(cluster, {"name"}),
            "configure": _only(cluster, {"name"}),
            "ssh": _only(cluster, {"name"}),
        },
        {command: [errors[t] for t in titles if t in errors] for command, titles in READS.items()},
    )


#: The sections each command's defaults come from: a mistake in one fails only these commands.
READS = {
    "up": ("cluster",),
    "run": ("cluster", "run"),
    "down": ("cluster",),
    "status": ("cluster",),
    "check": ("cluster",),
    "configure": ("cluster",),
    "ssh": ("cluster",),
}


class DefaultMap(dict):
    """Click's ``default_map``, which raises a section's error when a command that reads it starts
    (Click looks a command's defaults up with ``get`` as it makes the command's context)."""

    def __init__(self, defaults: dict[str, dict[str, Any]], errors: dict[str, list[UsageError]]) -> None:
        super().__init__(defaults)
        self.errors = errors

    def get(self, command: str, default: Any = None) -> Any:
        if self.errors.get(command):
            raise self.errors[command][0]
        return super().get(command, default)


def _section(section: Any, types: dict[str, tuple[type, ...]], title: str, path: Path) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise UsageError(
            f"[{title}] in {path} is {_kind(section)}, not a table: write [{title}] on a line of its own, "
            "then key = value lines"
        )
    unknown = set(section) - set(types)
    if unknown:
        raise UsageError(f"unknown key(s) {sorted(unknown)} in [{title}] of {path}: allowed are {sorted(types)}")
    out = dict(section)
    for key, value in section.items():
        allowed = types[key]
        if isinstance(value, bool) != (bool in allowed) or not isinstance(value, allowed):
            example = (
                f'[{title}.{key}] and NAME = "value" below it'
                if allowed[0] is dict
                else f"{key} = {EXAMPLES[allowed[0]]}"
            )
            raise UsageError(
                f"[{title}] {key} in {path} is {_kind(value)} ({_show(value)}): give {_kind(allowed[0]())}, "
                f"e.g. {example}"
            )
    for key in [k for k, kinds in types.items() if kinds == TABLE]:  # -> the repeated --env, --tag... option
        if key in out:
            out[key] = [f"{k}={_scalar(v, f'{title}.{key}', k, path)}" for k, v in out[key].items()]
    return out


def _scalar(value: Any, table: str, key: str, path: Path) -> str:
    """A value of [cluster.env] or [cluster.playbook_vars]: a string, or a number written as one."""
    if isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return str(value)
    raise UsageError(f'[{table}] {key} in {path} is {_kind(value)} ({_show(value)}): give a string, e.g. {key} = "1"')


def _kind(value: Any) -> str:
    for kind, name in (
        (bool, "true/false"),
        (int, "an integer"),
        (float, "a decimal number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    ):
        if isinstance(value, kind):
            return name
    return "a date or time"


def _show(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)[:60]


def _only(section: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k in keys}
