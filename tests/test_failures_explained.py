"""Failures explained (issue 15), produced for real: small scripts that fail the way users' scripts
do, run on 2 local nodes; the summary names the failing node and says what the failure means
(every signature is also fed through the supervisor in tests/test_supervisor.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import ddpctl

SCRIPTS = {
    "abort-at-exit": (
        "import os, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "print('work done', flush=True)\n"
        "os.abort()  # as a C++ teardown does when the process group was never destroyed\n",
        (),
        "end the script with dist.destroy_process_group()",
    ),
    "oom-killed": (
        "import os, signal, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does\n"
        "dist.barrier()\n",
        (),
        "usually by the kernel's OOM killer",
    ),
    "interface": (
        "import torch.distributed as dist\ndist.init_process_group('gloo')\ndist.barrier()\n",
        ("-e", "GLOO_SOCKET_IFNAME=nosuch0"),
        "names an interface (or address) a node lacks",
    ),
}


@pytest.mark.parametrize("cause", SCRIPTS)
def test_a_real_failure_is_explained(cause: str, home: Path, tmp_path: Path) -> None:
    source, run_args, hint = SCRIPTS[cause]
    script = tmp_path / f"{cause.replace('-', '_')}.py"
    script.write_text(source)
    result = ddpctl("run", str(script), "--nodes", "2", *run_args, "--json")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["result"]["failed_node"] in ("node0", "node1")
    assert hint in doc["result"]["hint"]
    assert f"hint: {doc['result']['hint']}" in result.stderr  # under the summary
