"""``--env-file`` read as python-dotenv reads a ``.env`` (issue 37), and the Python API's ``env=``
(a mapping of values) and ``env_from=`` (names passed through from the caller's environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.api.common import _env_pairs
from ddpctl.infra.model.env_vars import run_env
from ddpctl.infra.model.errors import UsageError

DOTENV = """\
# how ML users write .env
export WANDB_API_KEY="abc123"  # my key
export HF_HOME='/data/hf # not a comment'
PLAIN=value # a comment after an unquoted value
ESCAPED="tab\\there \\"quoted\\""
EMPTY=
SPACED = spaced
FROM_CALLER
URL=${PLAIN}/x
"""


def test_env_file_reads_what_python_dotenv_reads(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(DOTENV)
    env, secret = run_env((), (str(path),), environ={"FROM_CALLER": "caller's"})
    assert env == {
        "WANDB_API_KEY": "abc123",
        "HF_HOME": "/data/hf # not a comment",
        "PLAIN": "value",
        "ESCAPED": 'tab\there "quoted"',
        "EMPTY": "",
        "SPACED": "spaced",
        "FROM_CALLER": "caller's",
        "URL": "value/x",
    }
    assert secret == set(env)  # every value of a file is a secret


@pytest.mark.parametrize(
    ("text", "line"),
    [("A=1\nthis is not a variable\n", 2), ("A=1\n\nB='unterminated\n", 3), ('export\nA="x" y\n', 2)],
)
def test_a_line_dotenv_cannot_parse_is_one_line_naming_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "bad.env"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        run_env((), (str(path),), environ={})
    message = str(err.value)
    assert message.startswith(f"--env-file {path}, line {line}: ") and "\n" not in message, message


def test_a_multi_line_value_is_refused_as_a_secret_must_be_one_line(tmp_path: Path) -> None:
    path = tmp_path / "multi.env"
    path.write_text('KEY="two\nlines"\n')
    with pytest.raises(UsageError, match="KEY: a secret's value must be one line"):
        run_env((), (str(path),), environ={})


def test_api_env_is_a_mapping_of_values_and_env_from_passes_names() -> None:
    pairs = _env_pairs({"SEED": "1", "LR": 0.5, "N": 3}, ["WANDB_API_KEY"])
    assert pairs == ("SEED=1", "LR=0.5", "N=3", "WANDB_API_KEY")
    env, secret = run_env(pairs, (), environ={"WANDB_API_KEY": "s3cret", "SEED": "from-caller"})
    assert env == {"SEED": "1", "LR": "0.5", "N": "3", "WANDB_API_KEY": "s3cret"}  # SEED: the mapping's value
    assert secret == {"WANDB_API_KEY"}
    assert _env_pairs(["A=1", "B=x=y"]) == ("A=1", "B=x=y")  # the CLI's strings still work


@pytest.mark.parametrize(
    ("env", "env_from", "said"),
    [
        (["WANDB_API_KEY"], (), "'WANDB_API_KEY' is not 'KEY=VALUE'.*env_from"),
        ({"K": None}, (), r"env\['K'\] is None: give each value as a string"),
        ({"K": True}, (), r"env\['K'\] is True"),
        ("A=1", (), "env='A=1' is one string"),
        ({}, "WANDB_API_KEY", "env_from='WANDB_API_KEY' is one string"),
        ({}, ["A=1"], "env_from: 'A=1' is not a variable name"),
    ],
)
def test_api_env_refusals_are_one_line(env, env_from, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        _env_pairs(env, env_from)
