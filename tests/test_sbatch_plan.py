"""The Slurm planner: the whole generated sbatch script against a golden copy."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ddpctl.infra.launch.sbatch import plan_sbatch
from ddpctl.infra.spec import RunSpec

GOLDEN = Path(__file__).parent / "golden"


def mnist_plan():
    run = RunSpec(job="mnist", args=("--epochs", "2"), nodes=2, nproc_per_node=1, run_id="r1")
    return plan_sbatch(
        run,
        python="/opt/env/bin/python",
        script="/srv/bundle/mnist.py",
        output_dir="/shared/ddpctl/runs",
        cluster_id="c1",
        env_file="/srv/ddpctl.env",
        workdir="/shared/ddpctl",
        gpus_per_node=4,
    )


def test_golden_script() -> None:
    assert mnist_plan().script == (GOLDEN / "mnist-2x1-gpu4.sbatch").read_text()


def test_script_is_valid_bash_and_paths() -> None:
    plan = mnist_plan()
    subprocess.run(["bash", "-n"], input=plan.script, text=True, check=True)
    assert plan.script_path == "/shared/ddpctl/runs/ddpctl-r1.sbatch"
    assert "--output=/shared/ddpctl/runs/ddpctl-%j-%N.out" in plan.script  # one output file per node


def test_no_gpus_no_env_file() -> None:
    run = RunSpec(job="m", nodes=3, nproc_per_node=2, max_restarts=1, run_id="r2", env={"NCCL_DEBUG": "INFO"})
    script = plan_sbatch(run, python="python3", script="/b/m.py", output_dir="/o", cluster_id="c").script
    assert "--gpus-per-node" not in script and ". " not in script.split("srun --kill")[1]
    assert "#SBATCH --nodes=3" in script and "--nproc-per-node 2" in script and "--max-restarts 1" in script
    assert "export NCCL_DEBUG=INFO" in script  # the run's value wins over the default
    commands = [line for line in script.splitlines() if not line.startswith("#")]
    assert not any("hostname --ip-address" in line for line in commands)


def test_explicit_env_wins_over_the_node_env_file() -> None:
    run = RunSpec(job="m", nodes=2, run_id="r3", env={"NCCL_DEBUG": "INFO"})
    script = plan_sbatch(
        run, python="python3", script="/b/m.py", output_dir="/o", cluster_id="c", env_file="/srv/ddpctl.env"
    ).script
    task = script.split("srun --kill")[1]
    assert task.index(". /srv/ddpctl.env") < task.index("export NCCL_DEBUG=INFO") < task.index("exec ")
    assert "NCCL_DEBUG=WARN" not in script  # no default over the file's value
