"""Issue 42's inputs (audit ../shared/audits/reliability-turn4.md), through the real ``ddpctl``: bad
input that exited 0 (F15, W2, W9, turn 3's --run-id '' and -e with a newline), --autodown under
its floor (A9/A12/H19), unknown options of ``ssh`` taken as NODE; on moto: the plan's autodown (A31),
--ssh-cidr warnings (W30, turn 3's /1), ``autodown`` on --no-configure nodes (AD-1) and the hint for
an aws head that cannot be reached (AD-2); a queued run as logs, metrics, download and run --resume
see it. The Python API's rows are in tests/unit/test_inputs_turn4.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.aws_env import UP, Env, error_line
from tests.support.cli import ddpctl, ended, start_ddpctl, tree, wait_for_line
from tests.support.moto import SSH_CIDR

AWS_PLAN = ("up", "--provider", "aws", "--dry-run", "--ssh-cidr", SSH_CIDR)

#: (audit row, args, files written into the cwd first, words of the one Error line); exit 2, nothing created
CASES = [
    ("turn3-run-id-empty", ["run", "mnist", "--dry-run", "--run-id", ""], {}, "invalid --run-id ''"),
    ("turn3-env-newline", ["run", "mnist", "--dry-run", "-e", "A=x\ny"], {}, "--env A: its value must be one line"),
    ("env-newline-up", ["up", "--dry-run", "-e", "A=x\ry"], {}, "--env A: its value must be one line"),
    ("F15", ["run", "message-passing", "--dry-run"], {"ddpctl.toml": "[run]\nnodes = 0\n"}, "give N >= 1"),
    ("F15-nproc", ["run", "message-passing", "--dry-run"], {"ddpctl.toml": "[run]\nnproc_per_node = 0\n"}, "x>=1"),
    ("W2", [*AWS_PLAN, "--instance-type", ""], {}, "--instance-type '' is empty"),
    ("W9", [*AWS_PLAN, "--region", ""], {}, "--region '' is empty"),
    ("W2-toml", list(AWS_PLAN), {"ddpctl.toml": '[cluster]\ninstance_type = ""\n'}, "--instance-type '' is empty"),
    ("A9", [*AWS_PLAN, "--autodown", "1s"], {}, "--autodown 1s is under 5 min"),
    ("A12", [*AWS_PLAN, "--autodown", "0h1s"], {}, "--autodown 0h1s is under 5 min"),
    ("H19", list(AWS_PLAN), {"ddpctl.toml": '[cluster]\nautodown = "1s"\n'}, "is under 5 min"),
    ("autodown-cmd", ["autodown", "t", "4m59s"], {}, "DURATION 4m59s is under 5 min"),
    ("turn3-ssh-json", ["ssh", "--json"], {}, "No such option '--json'"),
    ("turn3-ssh-bogus", ["ssh", "--bogus"], {}, "No such option '--bogus'"),
    ("ssh-bogus-node", ["ssh", "--bogus", "node0"], {}, "No such option '--bogus'"),
]


@pytest.mark.parametrize(("args", "files", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(home: Path, tmp_path: Path, args: list[str], files: dict[str, str], words: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, text in files.items():
        (cwd / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("DDPCTL_CONFIG", "AWS_PROFILE")}
    result = ddpctl(*args, cwd=cwd, env=env, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert words in lines[0]
    assert tree(home) == []


# ---- on moto ---------------------------------------------------------------------------------------

#: (audit row, --ssh-cidr and more, the warning's words; "" : none)
CIDR_WARNINGS = [
    ("W30", ["--ssh-cidr", "127.0.0.1/32"], "is this machine's own (loopback or link-local)"),
    ("W30-private", ["--ssh-cidr", "10.1.2.3/32"], "is a private network"),
    ("W30-private-ip", ["--ssh-cidr", "10.1.2.3/32", "--private-ip"], ""),
    ("turn3-slash1", ["--ssh-cidr", "0.0.0.0/1"], "opens SSH on the nodes to 2,147,483,648 addresses"),
    ("slash7", ["--ssh-cidr", "8.0.0.0/7"], "much of the internet"),
    ("slash0", ["--ssh-cidr", "0.0.0.0/0"], "to the whole internet"),
    ("own", ["--ssh-cidr", SSH_CIDR], ""),
]


@pytest.mark.parametrize(("args", "words"), [c[1:] for c in CIDR_WARNINGS], ids=[c[0] for c in CIDR_WARNINGS])
def test_ssh_cidr_warnings(aws: Env, args: list[str], words: str) -> None:
    out = aws.ok("up", "--provider", "aws", "--dry-run", *args).stdout
    warnings = [line for line in out.splitlines() if "warning: --ssh-cidr" in line]
    assert (words in warnings[0]) if words else warnings == [], out
    aws.assert_clean()


def test_the_plan_shows_autodown(aws: Env) -> None:
    """A31: the plan said nothing of --autodown, and its cost line ran "until `ddpctl down`"."""
    out = aws.ok(*AWS_PLAN, "--autodown", "30m").stdout
    assert "a day until `ddpctl down` or autodown (30 min idle)" in out
    assert "  autodown: after 30 min without a run the nodes shut themselves down" in out
    assert "autodown" not in aws.ok(*AWS_PLAN).stdout


def _edit_state(home: Path, name: str, change) -> None:
    path = home / "clusters" / f"{name}.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_autodown_on_unconfigured_nodes_and_an_unreachable_head(aws: Env) -> None:
    """AD-1: `ddpctl autodown` on a --no-configure cluster is refused as `up --no-configure --autodown`
    is, before any SSH. AD-2: a head that cannot be reached is explained in aws's terms."""
    refused = aws.run(*UP, "--autodown", "30m")
    assert refused.returncode == 2 and "--autodown needs configured nodes" in error_line(refused)
    aws.ok(*UP)
    try:

        def unreachable(doc: dict) -> None:
            doc["nodes"][0]["ssh"].update(address="127.0.0.1", port=1, ssh_config=None)

        _edit_state(aws.home, "c1", unreachable)
        result = aws.run("autodown", "c1", "30m")
        assert result.returncode == 2, result.stderr
        line = error_line(result)
        assert "--autodown needs configured nodes" in line and "`ddpctl configure --name c1` first" in line
        assert "could not reach" not in result.stderr  # refused before SSH

        def configured(doc: dict) -> None:  # as `ddpctl configure` records it
            doc["spec"]["options"]["configure"] = True

        _edit_state(aws.home, "c1", configured)
        result = aws.run("autodown", "c1", "30m")
        assert result.returncode == 1, result.stderr
        line = error_line(result)
        assert "could not reach node0 over SSH for autodown" in line
        assert "ansible_host" not in line and "check that the cluster's instances run (`ddpctl status`)" in line
    finally:
        aws.ok("down", "--name", "c1", "--yes")
    aws.assert_clean()


# ---- a queued run ----------------------------------------------------------------------------------

SLEEPER = "import sys, time\nprint('slept', sys.argv[1], flush=True)\ntime.sleep(float(sys.argv[1]))\n"


def test_a_queued_run_is_said_to_be_queued(home: Path, tmp_path: Path) -> None:
    """Queued-runs rows: behind another run, `logs`, `metrics`, `download` and `run --resume` said
    "no output", "no run" or "still running (kill PID)"; `logs --follow` gave up at once."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    assert ddpctl("up", "--nodes", "2").returncode == 0
    follow = None
    try:
        first = ddpctl("run", str(script), "--nodes", "2", "--detach", "--run-id", "rfirst", "--", "600")
        assert first.returncode == 0, first.stderr
        second = ddpctl("run", str(script), "--nodes", "2", "--detach", "--run-id", "rsecond", "--", "0")
        assert second.returncode == 0, second.stderr
        behind = "run rsecond is queued on cluster 'default' behind `ddpctl run rfirst (sleeper)`"
        for args in (
            ["logs", "rsecond"],
            ["metrics", "rsecond"],
            ["download", "rsecond"],
            ["run", "--resume", "rsecond", "--dry-run"],
        ):
            result = ddpctl(*args)
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 1, (args, result.stderr)
            assert len(lines) == 1 and lines[0].startswith(f"Error: {behind}"), (args, result.stderr)
            assert "it has not started" in lines[0]
        follow = start_ddpctl("logs", "--follow", "rsecond")
        said = wait_for_line(follow, "waiting for its turn")
        assert behind in said[-1]
        assert ddpctl("stop", "rfirst").returncode == 0
        out, _ = follow.communicate(timeout=300)
        assert follow.returncode == 0, out
        assert "slept 0" in out  # followed once its turn came, to its end
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
        ddpctl("stop", "rfirst")
        ended(dict(os.environ), "rsecond")
        down = ddpctl("down")
        assert down.returncode == 0, down.stderr


def test_a_run_id_that_is_no_run_is_still_one_line(home: Path) -> None:
    result = ddpctl("logs", "--follow", "rnothere")
    assert result.returncode == 2 and "has no output" in result.stderr, result.stderr
