"""The Slurm planner: the whole generated sbatch script against a golden copy; and the script run
by bash for real, with a fake ``srun``/``scontrol`` (tests/support/fake_slurm.py) and real torchrun
agents on this machine, for what the script itself does with the rendezvous store.
Its tests that start processes (real parts) are in tests/integration/test_sbatch_plan.py.
"""

from __future__ import annotations

import shlex
from types import SimpleNamespace

import pytest

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


# ---- secrets (issue 41): in a 0600 file the job reads and removes, never in the script ----------------


def secret_plan(env_file: str = "/srv/ddpctl.env"):
    run = RunSpec(
        job="m",
        nodes=2,
        run_id="rs1",
        env={"TOKEN": "s3cr3t it's $HOME", "PLAIN": "1"},
        secret_env=frozenset({"TOKEN"}),
    )
    return plan_sbatch(run, python="python3", script="/b/m.py", output_dir="/o", cluster_id="c", env_file=env_file)


def test_a_secret_is_in_no_script_line_but_in_the_file_the_script_reads_and_removes() -> None:
    plan = secret_plan()
    assert "s3cr3t" not in plan.script and "export PLAIN=1" in plan.script
    assert plan.secrets_file == "/o/ddpctl-rs1.secrets" and dict(plan.secrets) == {"TOKEN": "s3cr3t it's $HOME"}
    # the file's text is shell assignments that read back as the value, whatever it holds
    (line,) = plan.secret_input().decode().splitlines()
    key, _, quoted = line.partition("=")
    assert key == "TOKEN" and shlex.split(quoted) == ["s3cr3t it's $HOME"]
    lines = plan.script.splitlines()
    read, removed = lines.index('. "$secrets"'), lines.index('rm -f "$secrets"')
    store = next(i for i, line in enumerate(lines) if "DDPCTL_RDZV_STORE=rs1" in line)
    exported = lines.index("export TOKEN")
    srun = next(i for i, line in enumerate(lines) if line.startswith("srun --kill-on-bad-exit"))
    # read and removed before anything starts; exported (names only) just before srun: not to the store
    assert "secrets=/o/ddpctl-rs1.secrets" in lines and read + 1 == removed < store < exported == srun - 1
    assert plan.to_dict()["secrets"] == ["TOKEN"] and "s3cr3t" not in repr(plan.to_dict())
    assert any("TOKEN to /o/ddpctl-rs1.secrets (0600)" in line for line in plan.dry_run_lines())


def test_a_secret_wins_over_the_node_env_file_as_explicit_values_do() -> None:
    task = secret_plan().script.split("srun --kill")[1]
    assert (
        task.index('ddpctl_s_TOKEN="$TOKEN"')
        < task.index(". /srv/ddpctl.env")
        < task.index('export TOKEN="$ddpctl_s_TOKEN"')
    )
    assert "ddpctl_s_" not in secret_plan(env_file="").script  # no env file: nothing to keep it from


def test_no_secrets_no_file() -> None:
    plan = secret_plan()
    plain = plan_sbatch(
        RunSpec(job="m", nodes=2, run_id="rs1", env={"PLAIN": "1"}),
        python="python3",
        script="/b/m.py",
        output_dir="/o",
        cluster_id="c",
        env_file="/srv/ddpctl.env",
    )
    assert plain.secrets_file == "" and "secrets" not in plain.script and "secrets" not in plain.to_dict()
    assert plan.script_path == plain.script_path


class Login:
    """A login node that records what it is asked: commands, and files put (path, bytes)."""

    def __init__(self, sbatch: str) -> None:
        self.host, self.sbatch, self.events = "login", sbatch, []

    def run(self, command: str, **_: object) -> SimpleNamespace:
        self.events.append(("run", command))
        out = self.sbatch if command.startswith("sbatch") else ""
        return SimpleNamespace(stdout=out, stderr="", ok=True, exited=0)

    def put(self, local, remote: str) -> None:
        data = local.read()
        self.events.append(("put", remote, data if isinstance(data, bytes) else data.encode()))


@pytest.mark.parametrize("answer", ["123", "sbatch: error: Batch job submission failed: Invalid account"])
def test_the_executor_writes_the_secrets_file_private_before_sbatch(answer: str) -> None:
    from ddpctl.infra.launch.slurm_executor import SlurmExecutor
    from ddpctl.infra.model.errors import DdpctlError

    plan, login = secret_plan(), Login(answer)
    try:
        assert SlurmExecutor.submit(None, login, plan) == "123"  # type: ignore[arg-type]
    except DdpctlError as exc:
        assert "Invalid account" in str(exc) and answer != "123"
    made = ("run", "umask 077 && rm -f /o/ddpctl-rs1.secrets && (set -C; : > /o/ddpctl-rs1.secrets)")
    filled = ("put", "/o/ddpctl-rs1.secrets", plan.secret_input())
    sbatch = next(e for e in login.events if e[1].startswith("sbatch"))
    # made empty under umask 077 (a new file, not through a link), then filled, then submitted
    assert login.events.index(made) + 1 == login.events.index(filled) < login.events.index(sbatch)
    assert not any(b"s3cr3t" in e[-1] for e in login.events if e[0] == "put" and e[1] != plan.secrets_file)
    assert not any("s3cr3t" in e[1] for e in login.events if e[0] == "run")  # on no command line
    removed = ("run", "rm -f /o/ddpctl-rs1.secrets") in login.events
    assert removed == (answer != "123")  # a refused job will never read it


def test_a_cancelled_jobs_secrets_file_is_removed() -> None:
    """A job cancelled before it started never read its file: `cancel` (`ddpctl stop`) removes it."""
    from ddpctl.infra.launch.launcher import Handle
    from ddpctl.infra.launch.slurm_executor import SlurmLauncher

    class Cancelled(Login):
        def run(self, command: str, **_: object) -> SimpleNamespace:
            self.events.append(("run", command))
            out = "JobId=7 JobState=CANCELLED ExitCode=0:15" if command.startswith("scontrol") else ""
            return SimpleNamespace(stdout=out, stderr="", ok=True, exited=0)

    login = Cancelled("")
    SlurmLauncher(login, poll_s=0.0).cancel(Handle("slurm", "7", "/o", "rs1"))  # type: ignore[arg-type]
    assert [e[1] for e in login.events][0] == "scancel 7"
    assert login.events[-1] == ("run", "rm -f /o/ddpctl-rs1.secrets")
