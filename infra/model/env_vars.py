"""The environment a run's ranks get from the user (``run -e``, ``--env-file``, ``up -e``): the names and
values it may hold, the ``--env-file`` as python-dotenv reads it, and the variables ddpctl keeps for itself.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import UsageError

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_env_name(key: str, flag: str = "--env") -> None:
    """An environment variable name, as a POSIX shell takes it (the remote launch line exports it)."""
    if not ENV_NAME_RE.fullmatch(key):
        raise UsageError(
            f"invalid environment variable name {key!r} in {flag}: use letters, digits and '_', "
            "not starting with a digit (e.g. NCCL_DEBUG=INFO)"
        )


def check_env_names(env: dict[str, str], flag: str = "--env") -> None:
    """Every name (``check_env_name``) and value of an environment: a value is one line (the launch
    line and the plan carry it as one; a newline would split them), with no NUL (no environment holds one)."""
    for key, value in env.items():
        check_env_name(key, flag)
        if not isinstance(value, str) or any(c in value for c in "\n\r\0"):
            raise UsageError(f"{flag} {key}: its value must be one line of text, without a newline: give {key}=VALUE")


#: the ranks' variables ddpctl sets itself, which `run -e` / `--env-file` may not: what to use instead
RESERVED_RUN_ENV = {
    "DDPCTL_SNAPSHOT_DIR": "use --snapshot-dir (checked on every node and recorded)",
    "DDPCTL_RESUME_FROM": "use --resume-from RUN_ID",
    "DDPCTL_SHARED_DIR": "it is the cluster's shared directory",
    "DDPCTL_RUN_ID": "use --run-id",
    "DDPCTL_CLUSTER_ID": "it marks the cluster's processes",
    "DDPCTL_NODE": "it marks a node's processes",
    "DDPCTL_RDZV_STORE": "it marks the run's rendezvous store",
    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "ddpctl reads each rank's lines by it",
}
#: an --env-file larger than this is refused (it is read whole, and every value travels to every node)
MAX_ENV_FILE_BYTES = 1024 * 1024


def read_env_file(path: str) -> list[tuple[int, str, str | None]]:
    """An ``--env-file`` as python-dotenv reads it: ``(line number, key, value)`` for each variable,
    ``None`` for a bare ``KEY`` (its value from the caller's environment). ``export KEY=...``, single
    and double quotes (escapes in double quotes), inline `` # comments`` after unquoted values, and
    ``${VAR}`` from the file or the caller's environment, as ``dotenv_values`` does; a line it cannot
    parse is refused naming the file and the line. A regular file of at most MAX_ENV_FILE_BYTES
    (``/dev/zero`` would never end)."""
    import io

    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    flag = f"--env-file {path}"
    try:
        found = Path(path).stat()
        if not stat.S_ISREG(found.st_mode):
            raise UsageError(f"{flag} is not a regular file: give a file of KEY=VALUE lines")
        if found.st_size > MAX_ENV_FILE_BYTES:
            raise UsageError(f"{flag} is larger than 1 MiB: give a file of KEY=VALUE lines")
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag}: cannot read it ({exc}): give a readable KEY=VALUE file") from None
    bindings = []
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            bad = binding.original.string
            line = binding.original.line + bad[: len(bad) - len(bad.lstrip())].count("\n")  # blank lines before it
            said = (bad.strip().splitlines() or [""])[0][:80]
            raise UsageError(
                f"{flag}, line {line}: {said!r} is not KEY=VALUE (python-dotenv's format: "
                "KEY=VALUE, export KEY=VALUE, quoted values, # comments)"
            )
        if binding.key is not None:
            bindings.append((binding.original.line, binding.key))
    values = dotenv_values(stream=io.StringIO(text), interpolate=True)  # every line parsed: no warning
    return [(line, key, values.get(key)) for line, key in bindings]


def run_env(
    pairs: tuple[str, ...] | list[str], env_files: tuple[str, ...] = (), environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], frozenset[str]]:
    """``run``'s environment and which of its names are secrets.

    ``KEY=VALUE`` is recorded and shown as given. A bare ``KEY`` takes the caller's value (as
    ``docker run -e KEY`` does), and every value of an ``--env-file`` (read as python-dotenv reads a
    ``.env``: ``read_env_file``; a bare ``KEY`` from the caller's environment too) is a secret: it reaches the ranks,
    but run records, ``--dry-run`` and ddpctl's own command line show only its name.
    """
    environ = os.environ if environ is None else environ
    env: dict[str, str] = {}
    secret: set[str] = set()

    def take(key: str, value: str | None, flag: str, from_file: bool) -> None:
        check_env_name(key, flag)
        if key in RESERVED_RUN_ENV:
            raise UsageError(f"{flag} {key}: {key} is set by ddpctl: {RESERVED_RUN_ENV[key]}")
        is_secret = from_file or value is None
        if value is None:
            if key not in environ:
                raise UsageError(f"{flag} {key}: {key} is not set in your environment: export it, or give {key}=VALUE")
            value = environ[key]
        if is_secret and ("\n" in value or "\r" in value):
            raise UsageError(f"{flag} {key}: a secret's value must be one line (it travels as one)")
        env[key] = value
        if is_secret:
            secret.add(key)
        else:
            secret.discard(key)

    for path in env_files:
        seen: dict[str, int] = {}
        for number, key, value in read_env_file(path):
            if key in seen:
                raise UsageError(
                    f"--env-file {path} sets {key} twice (lines {seen[key]} and {number}): keep one of them"
                )
            seen[key] = number
            take(key, value, f"--env-file {path}", True)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not key:
            raise UsageError(f"--env {pair!r} is not KEY=VALUE (or KEY, for a value from your environment)")
        take(key, value if sep else None, "--env", False)
    return env, frozenset(secret)


def parse_env(pairs: tuple[str, ...] | list[str], flag: str = "--env") -> dict[str, str]:
    """``("A=1", "B=x")`` -> ``{"A": "1", "B": "x"}``; anything without '=' is refused.

    ``--env`` names are checked here too (``check_env_name``, the rule ClusterSpec and RunSpec
    apply), so ``run`` and ``up`` refuse the same names; ``--playbook-var`` names are Ansible's
    (``check_playbook_vars``).
    """
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if flag == "--env" and not sep and key:
            raise UsageError(
                f"--env {key}: a value from your environment (a secret) is for `ddpctl run -e {key}`, which records "
                f"only its name; `up` records the values it is given: use {key}=VALUE"
            )
        if not sep or not key:
            raise UsageError(f"{flag} {pair!r} is not KEY=VALUE")
        if flag == "--env":
            check_env_name(key, flag)
        if key in env:  # the last one silently winning hides a typo or a clash
            raise UsageError(f"{flag} {key} is given twice ({key}={env[key]} and {key}={value}): give it once")
        env[key] = value
    return env
