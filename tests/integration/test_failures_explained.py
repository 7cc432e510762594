"""Failures explained (issue 15), produced for real: small scripts that fail the way users' scripts
do, run on 2 local nodes; the summary names the failing node and says what the failure means
(every signature is also fed through the supervisor in tests/unit/test_supervisor.py). A rendezvous
timeout names the node that never joined."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ddpctl.infra.launch.local_executor import LocalExecutor
from ddpctl.infra.launch.nodes import OutputLine
from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState, NodeInfo
from tests.support.cli import ddpctl
from tests.support.processes import free_port
from tests.support.specs import cluster_spec

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
    assert hint in doc["result"]["hint"] and doc["result"]["cause"] == cause
    assert f"hint: {doc['result']['hint']}" in result.stderr  # under the summary


def test_a_rendezvous_timeout_names_the_node_that_never_joined(tmp_path: Path) -> None:
    """Real: the run's store and node0's torchrun agent (a 5 s join timeout), through the local
    executor; node1's agent never starts (a sleep stands in for it). node0 times out, and the hint
    names node1, from what the store saw join (the agents share an address: told apart by pid)."""
    nodes = [NodeInfo(f"node{i}", "127.0.0.1", str(tmp_path / f"node{i}"), cpus=1, ifname=None) for i in range(2)]
    for node in nodes:
        Path(node.workdir).mkdir()
    spec = cluster_spec(name="c", nodes=2, python=sys.executable)
    cluster = ClusterState(spec=spec, cluster_id="cid-rdzv-timeout", status="up", shared_dir=str(tmp_path), nodes=nodes)
    script = tmp_path / "job.py"
    script.write_text("print('never reached')\n")
    plan = plan_torchrun(
        cluster, RunSpec(job="mnist", nodes=2, run_id="rdzv-timeout"), script=str(script), port=free_port()
    )
    argv = list(plan.nodes[0].argv)
    argv[argv.index("--rdzv-conf") + 1] += ",join_timeout=5"
    sleeper = (sys.executable, "-c", "import time; time.sleep(120)")
    plan = replace(plan, nodes=(replace(plan.nodes[0], argv=tuple(argv)), replace(plan.nodes[1], argv=sleeper)))
    lines: list[OutputLine] = []
    result = LocalExecutor(lines.append, grace_s=1.0).run(plan)
    assert (result.failed_node, result.cause) == ("node0", "rendezvous-timeout"), lines[-5:]
    assert result.hint.startswith("node1 never joined the rendezvous"), result.hint
    assert not any(line.text.startswith("JOINED") for line in lines)  # the store's answer is not output
