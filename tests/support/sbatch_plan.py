"""What tests/unit/test_sbatch_plan.py and tests/integration/test_sbatch_plan.py share."""

from __future__ import annotations

from ddpctl.infra.launch.sbatch import plan_sbatch
from ddpctl.infra.model.spec import RunSpec


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
