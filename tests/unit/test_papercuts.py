"""Issue 41's papercuts that are pure: ddpctl's global flags after the command."""

from __future__ import annotations

import pytest

from ddpctl.main import cli, hoisted


@pytest.mark.parametrize(
    "argv,want",
    [
        (["status", "-q"], ["-q", "status"]),
        (["runs", "--json", "-v"], ["-v", "runs", "--json"]),
        (["-q", "status"], ["-q", "status"]),  # where it always worked
        (["run", "mnist", "-q", "--", "-v"], ["-q", "run", "mnist", "--", "-v"]),  # after --: the job's
        (["run", "x.py", "--", "-q"], ["run", "x.py", "--", "-q"]),
        (["--config", "c.toml", "down", "-y", "--verbose"], ["--config", "c.toml", "--verbose", "down", "-y"]),
        (["-h"], ["-h"]),
        ([], []),
    ],
)
def test_global_flags_anywhere_before_the_double_dash(argv: list[str], want: list[str]) -> None:
    assert hoisted(argv, cli.commands) == want
