"""The Python API (issue 30, cli/api/): ``import ddpctl`` stays light; a real local run from Python,
its result, its logs read back by the CLI and by ``ddpctl.logs``; ``status()``/``runs()`` the same
values as ``status --json``/``runs --json``; bad input raises the CLI's UsageError.
Its pure tests (no process beyond Python) are in tests/unit/test_api.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ddpctl
from ddpctl.infra.model.errors import UsageError
from tests.support.cli import ddpctl as cli
from tests.support.processes import assert_nothing_left, spawn, wait_for_worker
from tests.support.scripts import FAIL


def test_import_ddpctl_loads_no_torch_boto3_or_ansible() -> None:
    code = (
        "import sys, ddpctl; ddpctl.run, ddpctl.status, ddpctl.runs, ddpctl.logs, ddpctl.up, ddpctl.down, ddpctl.check; "
        "print(sorted(m for m in ('torch', 'boto3', 'botocore', 'ansible', 'ansible_runner', 'fabric', 'paramiko', "
        "'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_bad_input_message_is_the_clis(home: Path) -> None:
    """The same one line as the CLI's ``Error:`` for an input the library checks."""
    with pytest.raises(UsageError) as raised:
        ddpctl.run("./no-such-script.py", nodes=1)
    res = cli("run", "./no-such-script.py", "--nodes", "1")
    assert res.returncode == 2
    assert f"Error: {raised.value}" in res.stderr


def test_a_run_from_python_read_back_by_the_cli(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = []
    result = ddpctl.run("message-passing", nodes=2, on_line=lines.append, progress=None)
    assert result.ok and result.exit_code == 0 and not result.hint and result.failed_node is None
    assert result.exit_codes == {"node0": 0, "node1": 0}
    assert result.log == home / "runs" / result.run_id / "output.log"
    assert result.metrics == [] and result.metrics_file is None  # message-passing writes no metrics.jsonl
    assert {line.rank for line in lines} >= {0, 1}
    assert capsys.readouterr().out == ""  # on_line took the lines, progress=None: nothing printed

    # its record, as the CLI reads it
    doc = json.loads(cli("runs", "--json").stdout)
    assert [r["run_id"] for r in doc["runs"]] == [result.run_id]
    assert [r.to_dict() | {"started": d["started"]} for r, d in zip(ddpctl.runs(), doc["runs"])] == doc["runs"]
    assert ddpctl.runs()[0].result == "succeeded"
    printed = cli("logs", result.run_id).stdout.splitlines()
    from_api = ddpctl.logs(result.run_id)
    assert printed == [f"[{x.node}{'' if x.rank is None else f' r{x.rank}'}] {x.text}" for x in from_api]
    assert [(x.node, x.rank, x.text) for x in from_api] == [(x.node, x.rank, x.text) for x in lines]
    assert [x.text for x in ddpctl.logs(result.run_id, rank=1, tail=1)] == [x.text for x in lines if x.rank == 1][-1:]
    run_json = json.loads((home / "runs" / result.run_id / "run.json").read_text())
    assert run_json["result"] == result.to_dict()


def test_a_failing_run_from_python(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    raise SystemExit(3)\n"
        "dist.barrier()\n"
    )
    result = ddpctl.run(str(script), nodes=2, on_line=None, progress=None)
    assert not result.ok and result.exit_code == 1 and result.failed_node
    assert result.exit_codes[result.failed_node] not in (0, None)


def test_status_matches_status_json(home: Path) -> None:
    assert ddpctl.status() == []
    state = ddpctl.up(2, name="apitest", progress=None)
    try:
        assert state.name == "apitest" and len(state.nodes) == 2
        found = ddpctl.status()
        doc = json.loads(cli("status", "--json").stdout)
        ageless = [{k: v for k, v in d.items() if k != "age_s"} for d in doc["clusters"]]  # read a moment apart
        assert [{k: v for k, v in c.to_dict().items() if k != "age_s"} for c in found] == ageless
        assert [(c.name, c.provider, c.status) for c in found] == [("apitest", "local", "up")]
        report = ddpctl.check(bandwidth=False, progress=None)
        assert report.unreachable == []  # local nodes share a host: nothing to reach
    finally:
        assert ddpctl.down(progress=None) == ["apitest"]
    assert ddpctl.status() == []


def test_the_default_output_is_the_clis(home: Path, tmp_path: Path) -> None:
    """``run``'s defaults print as ``ddpctl run`` does: job lines on stdout (a failure's secondary
    traces left out, and counted), ddpctl's messages on stderr."""
    (tmp_path / "fail.py").write_text(FAIL)
    code = f"import ddpctl; r = ddpctl.run({str(tmp_path / 'fail.py')!r}, nodes=2); print('ok', r.ok, r.failed_node)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    out = res.stdout.splitlines()
    assert out[-1] == "ok False node1", res.stdout + res.stderr
    assert sum(line.endswith("ValueError: rank 1 fails on purpose") for line in out) == 1
    assert not any("ChildFailedError" in line for line in out)
    assert any("traces left out" in line for line in out)
    assert "run r" in res.stderr and "[node" not in res.stderr


def test_ctrl_c_stops_the_run_and_raises(home: Path) -> None:
    """A notebook's interrupt (SIGINT) while ``ddpctl.run`` waits: every process of the run stopped,
    its cluster taken down, then KeyboardInterrupt."""
    code = (
        "import ddpctl\n"
        "try:\n"
        "    ddpctl.run('mnist', '--epochs', '5', nodes=2, run_id='rapiint')\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt', flush=True)\n"
    )
    proc = spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_worker("rapiint", 1)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert out.splitlines()[-1] == "KeyboardInterrupt", out
    assert_nothing_left("rapiint", home)
    assert ddpctl.runs()[0].result == "interrupted"
    assert ddpctl.status() == []
