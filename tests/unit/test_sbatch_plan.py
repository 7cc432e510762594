"""The Slurm planner: the whole generated sbatch script against a golden copy; a user's script run
from its project's copy in the shared work directory (issue 37); and the script run
by bash for real, with a fake ``srun``/``scontrol`` (tests/support/fake_slurm.py) and real torchrun
agents on this machine, for what the script itself does with the rendezvous store.
Its tests that start processes (real parts) are in tests/integration/test_sbatch_plan.py.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpctl.infra import node_programs
from ddpctl.infra.launch import deps
from ddpctl.infra.launch.project import Project, scan
from ddpctl.infra.launch.sbatch import SbatchPlan, plan_sbatch
from ddpctl.infra.launch.slurm_executor import install
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.runs.jobs import BUNDLE_DIR
from ddpctl.infra.runs.options import RunOptions
from ddpctl.infra.runs.prepare import plan_slurm, prepare
from tests.support import GOLDEN
from tests.support.project import make_project
from tests.support.sbatch_plan import mnist_plan
from tests.support.specs import cluster_spec


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
        "(set -a; . /srv/ddpctl.env; set +a; exec env DDPCTL_RDZV_STORE=r1 'DDPCTL_NODE_PROGRAM="
    )
    assert f"/opt/env/bin/python -c {shlex.quote(node_programs.LOADER)} rdzv_store" in script  # ps reads that
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
    from ddpctl.infra.launch import slurm_executor
    from ddpctl.infra.model.errors import DdpctlError

    plan, login = secret_plan(), Login(answer)
    try:
        assert slurm_executor.sbatch(login, plan) == "123"  # type: ignore[arg-type]
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


def slurm_cluster(home: Path | None = None) -> ClusterState:
    """A recorded onprem cluster whose head (login) node answers Slurm; saved in ``home``'s store."""
    head = NodeInfo(
        name="login",
        host="10.0.0.1",
        workdir="/shared/ddpctl/work",
        bundle_dir="/shared/ddpctl/training",
        python="/shared/venv/bin/python",
        ssh=Host(name="login", address="10.0.0.1"),
    )
    spec = cluster_spec(name="slurm", provider="onprem", inventory="/dev/null")
    state = ClusterState(spec=spec, cluster_id="abc", status="up", nodes=[head], launcher="sbatch")
    if home is not None:
        StateStore(home).save(state)
    return state


def srun_words(script: str) -> list[str]:
    """The words of the command each node's task runs (``srun ... bash -c TEXT``), as bash reads them."""
    srun = next(line for line in script.splitlines() if line.startswith("srun --kill-on-bad-exit"))
    return shlex.split(shlex.split(srun)[-1])


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A project's files as outside a git work tree (the walk): `git ls-files` is a process."""
    monkeypatch.setattr("ddpctl.infra.launch.project._git_files", lambda root: None)


def test_a_users_script_runs_from_its_projects_copy_in_the_shared_work_dir() -> None:
    """`run ./train.py` through sbatch (issue 37): the script from the copy of its project in the
    head's work directory (shared with the compute nodes), the job and its ranks started there, the
    path quoted whatever it holds; the run's own snapshot stays in the work directory."""
    project = Project("/home/me/my proj", "src/it's train.py", ("helpers.py", "src/it's train.py"), "0123abcd", 10)
    run = RunSpec(job="it's train", nodes=2, nproc_per_node=1, run_id="r1", args=("--lr", "0.1; rm -rf ~"))
    plan = plan_slurm(slurm_cluster(), run, Path("/home/me/my proj/src/it's train.py"), None, project)
    copy = "/shared/ddpctl/work/projects/0123abcd"
    assert plan.project == project and plan.project_dir == copy
    assert f"#SBATCH --chdir={copy}\n" in plan.script  # the batch shell, and so srun's tasks, start there
    assert "#SBATCH --job-name=ddpctl-it_s_train-r1\n" in plan.script  # a name Slurm's #SBATCH line takes
    words = srun_words(plan.script)
    assert words[-3:] == [f"{copy}/src/it's train.py", "--lr", "0.1; rm -rf ~"]
    assert words[words.index("exec") + 1] == "/shared/venv/bin/python"  # the node's Python, no packages asked
    assert "export DDPCTL_SNAPSHOT_DIR=/shared/ddpctl/work/runs/r1" in plan.script  # not inside the copy
    assert plan.dry_run_lines()[0] == (
        f"  project /home/me/my proj (2 file(s)) copied to {copy} on the login node, unless there already"
    )
    assert plan.to_dict()["project"] == {
        "root": "/home/me/my proj",
        "script": "src/it's train.py",
        "files": 2,
        "digest": "0123abcd",
    }


def test_a_bundled_job_stays_in_the_bundle_and_the_work_dir() -> None:
    plan = plan_slurm(slurm_cluster(), RunSpec(job="mnist", nodes=2, run_id="r1"), BUNDLE_DIR / "mnist.py")
    assert plan.project is None and plan.project_dir == "" and "projects/" not in plan.script
    assert "#SBATCH --chdir=/shared/ddpctl/work\n" in plan.script
    assert "/shared/ddpctl/training/mnist.py" in srun_words(plan.script)
    assert "export DDPCTL_SNAPSHOT_DIR=runs/r1" in plan.script  # relative: the job starts in the work dir
    with pytest.raises(UsageError, match="^/p/train.py: a script for sbatch ships with its project"):
        plan_slurm(slurm_cluster(), RunSpec(job="train", nodes=2, run_id="r1"), Path("/p/train.py"))


def test_the_projects_requirements_are_made_from_its_copy(tmp_path: Path, walked: None) -> None:
    """The project's requirements.txt: installed on the login node from the project's copy (the
    files it includes and the wheels beside it are there), and the job's Python is that environment's."""
    root = tmp_path / "proj"
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / "tiny-0.1-py3-none-any.whl").write_bytes(b"wheel")
    (root / "train.py").write_text("print('hi')\n")
    (root / "requirements.txt").write_text("--no-index\ntiny==0.1\n")
    req = deps.find(root, None)
    project = scan(root / "train.py", extra=req.files)
    run = RunSpec(job="train", nodes=2, run_id="r1")
    plan = plan_slurm(slurm_cluster(), run, root / "train.py", req, project)
    copy = f"/shared/ddpctl/work/projects/{project.digest}"
    (step,) = plan.deps
    assert step.cwd == copy and step.env_dir.startswith("/shared/ddpctl/work/envs/")
    assert step.argv[8:] == (f"{copy}/requirements.txt", copy, f"{copy}/wheels")
    assert words_after_exec(plan.script)[0] == step.python
    assert project.files == ("requirements.txt", "train.py", "wheels/tiny-0.1-py3-none-any.whl")


def words_after_exec(script: str) -> list[str]:
    words = srun_words(script)
    return words[words.index("exec") + 1 :]


def test_prepare_ships_a_users_project_through_sbatch(home: Path, tmp_path: Path, walked: None) -> None:
    """`ddpctl run ./train.py` on a cluster whose launcher is sbatch: no longer refused; the
    project (the script's directory, or --workdir) read and hashed here, the Slurm executor's."""
    slurm_cluster(home)
    script = make_project(tmp_path / "proj")
    prep = prepare(RunOptions(job=str(script), name="slurm", nodes=2), StateStore(home))
    plan = prep.plan
    assert isinstance(plan, SbatchPlan) and plan.project is not None
    assert plan.project.files == ("data/words.txt", "helpers.py", "train.py") and plan.deps == ()
    assert plan.project_dir == f"/shared/ddpctl/work/projects/{plan.project.digest}"
    assert f"{plan.project_dir}/train.py" in srun_words(plan.script)
    above = prepare(RunOptions(job=str(script), name="slurm", nodes=2, workdir=str(tmp_path)), StateStore(home))
    assert f"{above.plan.project_dir}/proj/train.py" in srun_words(above.plan.script)


class _Conn:
    """A login node as the Slurm executor's connection sees it: what it ran, what it was given."""

    def __init__(self, there: bool) -> None:
        self.there, self.ran, self.put_to = there, [], []

    def run(self, cmd: str, **_: object) -> SimpleNamespace:
        self.ran.append(cmd)
        ok = self.there or not cmd.startswith("test -d")
        return SimpleNamespace(ok=ok, stdout="installed /e\n", stderr="")

    def put(self, data: object, remote: str) -> None:
        self.put_to.append(remote)


def test_the_login_node_gets_the_project_once_per_content_before_its_packages(tmp_path: Path, walked: None) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print('hi')\n")
    (root / "requirements.txt").write_text("tiny==0.1\n")
    req = deps.find(root, None)
    project = scan(root / "train.py", extra=req.files)
    plan = plan_slurm(slurm_cluster(), RunSpec(job="train", nodes=2, run_id="r1"), root / "train.py", req, project)
    conn = _Conn(there=False)
    said = install(conn, plan)
    assert conn.ran[0] == f"test -d {plan.project_dir}" and conn.put_to == [conn.put_to[0]]
    assert conn.put_to[0].startswith(f"{plan.project_dir}.") and conn.put_to[0].endswith(".tmp.tar.gz")
    assert "mv -T " in conn.ran[2] and conn.ran[-1] == plan.deps[0].shell()  # the copy whole, then pip
    assert said == [f"login: the run's packages (requirements.txt) installed in {plan.deps[0].env_dir}"]
    again = _Conn(there=True)  # a copy of the same content is there: reused
    install(again, plan)
    assert again.put_to == [] and again.ran == [f"test -d {plan.project_dir}", plan.deps[0].shell()]
