"""The Slurm planner: the whole generated sbatch script against a golden copy; and the script run
by bash for real, with a fake ``srun``/``scontrol`` (tests/support/fake_slurm.py) and real torchrun
agents on this machine, for what the script itself does with the rendezvous store.
Its tests that start processes (real parts) are in tests/integration/test_sbatch_plan.py.
"""

from __future__ import annotations

from ddpctl.infra.launch.sbatch import plan_sbatch
from ddpctl.infra.model.spec import RunSpec
from tests.support import GOLDEN
from tests.support.sbatch_plan import mnist_plan


def test_golden_script() -> None:
    assert mnist_plan().script == (GOLDEN / "mnist-2x1-gpu4.sbatch").read_text()


def test_no_gpus_no_env_file() -> None:
    run = RunSpec(job="m", nodes=3, nproc_per_node=2, max_restarts=1, run_id="r2", env={"NCCL_DEBUG": "INFO"})
    script = plan_sbatch(run, python="python3", script="/b/m.py", output_dir="/o", cluster_id="c").script
    assert "--gpus-per-node" not in script and ". " not in script.split("srun --kill")[1]
    assert "#SBATCH --nodes=3" in script and "--nproc-per-node 2" in script and "--max-restarts 1" in script
    assert "--rdzv-conf is_host=0 " in script  # every agent joins the run's own store
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


def test_the_script_starts_the_store_before_srun_and_stops_it_on_exit() -> None:
    script = mnist_plan().script
    store_line = next(line for line in script.splitlines() if "DDPCTL_RDZV_STORE=r1" in line)
    # on this node (the batch script's, the first), in the background, with the node's env file and Python
    assert store_line.startswith(
        "(set -a; . /srv/ddpctl.env; set +a; exec env DDPCTL_RDZV_STORE=r1 /opt/env/bin/python -c "
    )
    assert script.index(store_line) < script.index("until grep -qs '^READY '") < script.index("srun --kill-on-bad-exit")
    assert script.index("trap ") < script.index("srun --kill-on-bad-exit")
    srun = next(line for line in script.splitlines() if line.startswith("srun --kill-on-bad-exit"))
    assert "--rdzv-conf is_host=0 " in srun  # every agent joins it
