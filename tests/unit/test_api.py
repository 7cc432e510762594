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


def test_up_is_composed_once_for_the_cli_and_the_api(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both faces of ``up`` build the spec with ``lifecycle.clusters.new_spec`` and ask
    ``cost_question``: the CLI asks it, the API wants yes=True (the same words, autodown named)."""
    from click.testing import CliRunner

    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.providers import checked_spec
    from ddpctl.main import cli

    made = []
    real = clusters.new_spec
    monkeypatch.setattr(clusters, "new_spec", lambda **kw: made.append(checked_spec(real(**kw))) or real(**kw))
    args = ["up", "--provider", "aws", "--nodes", "2", "--autodown", "30m", "--region", "us-east-1"]
    cli_said = CliRunner().invoke(cli, args, input="")
    with pytest.raises(UsageError) as api_said:
        ddpctl.up(provider="aws", nodes=2, autodown="30m", options={"region": "us-east-1"})
    assert len(made) == 2 and made[0] == made[1]
    question = "create 2 aws node(s) for cluster 'default', about $6.12/h until `ddpctl down` or autodown"
    assert question in cli_said.output and cli_said.exit_code == 2
    assert str(api_said.value) == f"{question}: pass yes=True to confirm"
    assert not list((home / "clusters").glob("*.json")) if home.exists() else True


def test_run_options_are_mapped_once_for_the_cli_and_the_api() -> None:
    """``RUN_FLAGS``: every one is a parameter of the `run` command and a keyword of ``ddpctl.run``, and
    together with the job, its arguments and its variables they fill every field of ``RunOptions``."""
    import dataclasses
    import inspect

    from ddpctl.infra.runs.options import RUN_FLAGS, RunOptions
    from ddpctl.run_command import run as command

    params = {p.name for p in command.params}
    keywords = set(inspect.signature(ddpctl.run).parameters)
    assert set(RUN_FLAGS) <= params and set(RUN_FLAGS) <= keywords
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    assert set(RUN_FLAGS.values()) | {"job", "args", "env", "min_nodes"} == fields
    opts = RunOptions.of_flags("mnist", ["--epochs", "1"], ["A=1"], {**dict.fromkeys(RUN_FLAGS), "nodes": (2, 3)})
    assert (opts.nodes, opts.min_nodes, opts.run_id, opts.env_files, opts.env) == (3, 2, "", (), ("A=1",))
