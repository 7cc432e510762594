"""The Python API (issue 30, cli/api/): ``import ddpctl`` stays light; a real local run from Python,
its result, its logs read back by the CLI and by ``ddpctl.logs``; ``status()``/``runs()`` the same
values as ``status --json``/``runs --json``; bad input raises the CLI's UsageError.
Its tests that start processes (real parts) are in tests/integration/test_api.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ddpctl
from ddpctl.infra.model.errors import UsageError


def test_the_api_is_documented() -> None:
    for name in ddpctl.__all__:
        if name != "__version__":
            assert getattr(ddpctl, name).__doc__, name


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ddpctl.run("message-passing", nodes=0), "Invalid value for '--nodes'"),
        (lambda: ddpctl.run("message-passing", nodes="3:2"), "give N >= 1, or MIN:MAX"),
        (lambda: ddpctl.run("message-passing", nproc_per_node="x"), "is not a count"),
        (lambda: ddpctl.run("./no-such-script.py", nodes=1), None),
        (lambda: ddpctl.logs("r0000000000"), None),
        (lambda: ddpctl.down("x", all=True), "--all and --name x contradict"),
    ],
)
def test_bad_input_raises_the_clis_usage_error(home: Path, call, message: str | None) -> None:
    with pytest.raises(UsageError) as raised:
        call()
    assert not home.exists() or not list((home / "clusters").glob("*.json")), "bad input created nothing"
    if message:
        assert message in str(raised.value)
