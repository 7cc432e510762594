"""Issue 42's inputs (audit reliability-turn4.md), the pure part: the Python API raises only
``UsageError``/``DdpctlError``, from the CLI's own parameter types (``cli/api/common._checked``);
options that are given empty; autodown's floor; a Slurm handle's ``ref``. The CLI rows (real
``ddpctl`` processes, AWS on moto) are in tests/integration/test_inputs_turn4.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import ddpctl
from ddpctl.infra.model.errors import DdpctlError, UsageError

#: (audit row, call, words the refusal has)
API_ROWS = [
    ("P30", lambda: ddpctl.logs(tail=10**30), "--tail"),
    ("P9", lambda: ddpctl.run("mnist", port="abc"), "port='abc' is a str: give an int"),
    ("P9b", lambda: ddpctl.run("mnist", port=80), "--port"),
    ("P20", lambda: ddpctl.run("mnist", max_restarts="3"), "max_restarts='3' is a str"),
    ("P31", lambda: ddpctl.logs(rank="abc"), "rank='abc' is a str"),
    ("P11", lambda: ddpctl.run(123), "job=123 is an int"),
    ("P26", lambda: ddpctl.runs(home=5), "home=5 is an int"),
    ("P29", lambda: ddpctl.metrics(5), "run_id=5 is an int"),
    ("P10", lambda: ddpctl.run("mnist", env="A=1"), "env='A=1' is a str: give a list"),
    ("P42", lambda: ddpctl.up(env="A=1"), "env='A=1' is a str: give a list"),
    ("P14", lambda: ddpctl.run("mnist", launcher="mpirun"), "'mpirun' is not one of 'torchrun', 'sbatch'"),
    ("P34", lambda: ddpctl.down(name="../runs/r899c76537a/options"), "invalid cluster name"),
    ("P52", lambda: ddpctl.status(name="../runs/r899c76537a/options"), "invalid cluster name"),
    ("run-id-empty", lambda: ddpctl.run("mnist", run_id=""), "invalid --run-id ''"),
    ("nodes-0", lambda: ddpctl.run("mnist", nodes=0), "--nodes"),
    ("nodes-bool", lambda: ddpctl.run("mnist", nodes=True), "nodes=True is a bool"),
    ("args-int", lambda: ddpctl.run("mnist", "--epochs", 1), "args=1"),
    ("check-port", lambda: ddpctl.check(port="x"), "port='x' is a str"),
    ("up-autodown-int", lambda: ddpctl.up(autodown=30), "autodown=30 is an int"),
    ("up-options", lambda: ddpctl.up(options="region=x"), "give a dict"),
    ("up-empty-option", lambda: ddpctl.up(provider="aws", options={"region": ""}), "--region '' is empty"),
    ("download-to", lambda: ddpctl.download("r1", to=5), "to=5 is an int"),
    ("env-files", lambda: ddpctl.run("mnist", env_files="a.env"), "env_files='a.env' is a str"),
]


@pytest.mark.parametrize(("row", "call", "words"), API_ROWS, ids=[r[0] for r in API_ROWS])
def test_the_api_raises_only_its_documented_errors(home: Path, row: str, call, words: str) -> None:
    with pytest.raises(DdpctlError) as raised:  # not TypeError, OverflowError; no run started
        call()
    assert isinstance(raised.value, UsageError), row
    assert words in str(raised.value)
    assert not (home / "clusters").exists() or not list((home / "clusters").iterdir()), "nothing created"
