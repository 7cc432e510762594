"""Issue 41's papercuts that are pure: ddpctl's global flags after the command."""

from __future__ import annotations

from pathlib import Path

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


README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _help(*command: str) -> str:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    "command,help_says,readme_says",
    [
        # --spot: an elastic run goes on without a node AWS took back (the help said the run fails)
        (
            ("up",),
            "an elastic run (--nodes MIN:MAX) goes on without it",
            "an elastic run goes on without a node AWS takes back",
        ),
        # -y: down asks before a billed cluster goes too (the help named only creating and --all)
        (
            ("down",),
            "creating it, taking it down, or taking every cluster down",
            "`down` of a billed cluster, ask first",
        ),
    ],
)
def test_help_and_readme_agree(command: tuple[str, ...], help_says: str, readme_says: str) -> None:
    assert help_says in _help(*command)
    assert readme_says in " ".join(README.split())


def test_dev_demo_takes_torchs_cpu_build_without_a_gpu() -> None:
    """`./dev demo` on a machine without a GPU downloaded the multi-GB CUDA torch with pip's output
    silenced: the demo installs the CPU build first (its progress shown), where no nvidia-smi is."""
    dev = (Path(__file__).resolve().parents[2] / "dev").read_text()
    demo = dev.split("    demo)", 1)[1].split(";;", 1)[0]
    assert "setup train demo" in demo
    helper = dev.split("cpu_torch_for_demo() {", 1)[1].split("\n}\n", 1)[0]
    assert "command -v nvidia-smi" in helper and "download.pytorch.org/whl/cpu" in helper
    assert "--quiet" not in helper  # a download of hundreds of MB shows its progress


@pytest.mark.parametrize("columns", ["60", "80", "100"])
def test_runs_never_cuts_a_result_word(home: Path, columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI's `runs` (80 columns, a run killed with its loss and accuracy kept) read `unfinishe…`: the
    result's first word is folded, never cut, however narrow the terminal."""
    import json

    from click.testing import CliRunner

    run = home / "runs" / "crash2"
    run.mkdir(parents=True)
    options = {"job": "mnist", "args": [], "nodes": 2, "name": "default", "run_id": "crash2"}
    (run / "options.json").write_text(json.dumps({"options": options, "cluster": "default", "ephemeral": True}))
    epoch = {"time": 1.0, "kind": "epoch", "step": 70, "epoch": 2, "loss": 0.2737, "accuracy": 93.6}
    (run / "metrics.jsonl").write_text(json.dumps(epoch) + "\n")
    monkeypatch.setenv("COLUMNS", columns)
    result = CliRunner().invoke(cli, ["runs"])
    assert result.exit_code == 0, result.output
    assert "unfinished:" in result.output and "crash2" in result.output, result.output
