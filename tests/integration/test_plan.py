"""The torchrun planner: argv and env per node, pure and fast.

Its pure tests (no process beyond Python) are in tests/unit/test_plan.py.
"""

from __future__ import annotations

import shlex
import subprocess

from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import NodeInfo
from tests.support.plan import cluster


def test_a_nodes_env_file_may_set_ddpctls_defaults_but_not_what_was_asked(tmp_path) -> None:
    """The SSH launch line exports ddpctl's defaults (OMP_NUM_THREADS from the node's CPUs...), then
    sources the node's env file (the playbooks' nccl_env: an admin's OMP_NUM_THREADS, say), then sets
    the cluster's and the run's values and the markers, which win over the file. Run by a real shell."""
    c = cluster(2, env={"NCCL_DEBUG": "INFO"})
    env_file = tmp_path / "ddpctl.env"
    env_file.write_text("OMP_NUM_THREADS=1\nNCCL_DEBUG=WARN\nDDPCTL_RUN_ID=nope\nA=file\n")
    c.nodes = [NodeInfo(n.name, n.host, str(tmp_path), cpus=8, ifname="eth0", env_file=str(env_file)) for n in c.nodes]
    run = RunSpec(job="m", nodes=2, run_id="r2", env={"A": "run"})
    launch = plan_torchrun(c, run, script="s.py", port=1).nodes[1]
    assert launch.env["OMP_NUM_THREADS"] == "8" and "OMP_NUM_THREADS" in launch.defaults
    assert "NCCL_DEBUG" not in launch.defaults and "A" not in launch.defaults
    line = launch.shell().replace(shlex.join(launch.argv), "env")  # the environment the agent would get
    seen = dict(
        kv.split("=", 1)
        for kv in subprocess.run(["sh", "-c", line], capture_output=True, text=True).stdout.split("\n")
        if "=" in kv
    )
    assert seen["OMP_NUM_THREADS"] == "1"  # the file's, over ddpctl's default
    assert seen["NCCL_DEBUG"] == "INFO" and seen["A"] == "run"  # the cluster's and the run's, over the file
    assert seen["DDPCTL_RUN_ID"] == "r2" and seen["NCCL_SOCKET_IFNAME"] == "eth0"
