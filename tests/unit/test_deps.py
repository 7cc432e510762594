"""A run's own packages, planned (issue 37): which requirements file, its hash, the environment each
node's ranks start with, the step that makes it there, and what the executors say of it. Pure.

The node program and real runs are tested in tests/integration/test_deps.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ddpctl.infra.launch import deps
from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.launch.project import Project
from ddpctl.infra.model.errors import DdpctlError, UsageError
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState
from ddpctl.infra.node_programs import deps as node_deps
from tests.support.plan import cluster

RUN = RunSpec(job="train", nodes=2, nproc_per_node=1, run_id="r1")


def project_with(root: Path, text: str = "tinypkg==0.1\n") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "requirements.txt").write_text(text)
    return root


def test_the_projects_requirements_txt_is_found_and_hashed(tmp_path: Path) -> None:
    root = project_with(tmp_path / "p")
    req = deps.find(root, None)
    assert req is not None and req.path == "requirements.txt" and req.text == "tinypkg==0.1\n"
    assert req.find_links == (".",)
    assert deps.find(root, "") == req  # the same file, the same hash
    (root / "requirements.txt").write_text("tinypkg==0.2\n")
    assert deps.find(root, None).digest != req.digest


def test_included_files_and_wheels_are_hashed_and_named_for_shipping(tmp_path: Path) -> None:
    root = project_with(tmp_path / "p", "-r reqs/base.txt\n-c reqs/pins.txt\n")
    (root / "reqs").mkdir()
    (root / "reqs" / "base.txt").write_text("tinypkg\n")
    (root / "reqs" / "pins.txt").write_text("tinypkg==0.1\n")
    (root / "wheels").mkdir()
    (root / "wheels" / "tinypkg-0.1-py3-none-any.whl").write_bytes(b"w")
    req = deps.find(root, None)
    assert sorted(req.files) == [
        "reqs/base.txt",
        "reqs/pins.txt",
        "requirements.txt",
        "wheels/tinypkg-0.1-py3-none-any.whl",
    ]
    (root / "reqs" / "pins.txt").write_text("tinypkg==0.2\n")
    assert deps.find(root, None).digest != req.digest  # an included file changed: a new environment


def test_no_file_or_none_means_no_packages(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    assert deps.find(tmp_path, None) is None
    assert deps.find(project_with(tmp_path / "p"), "none") is None


def test_wheels_in_the_project_are_found_and_change_the_hash(tmp_path: Path) -> None:
    root = project_with(tmp_path / "p")
    (root / "wheels").mkdir()
    wheel = root / "wheels" / "tinypkg-0.1-py3-none-any.whl"
    wheel.write_bytes(b"one")
    req = deps.find(root, None)
    assert req.find_links == (".", "wheels")
    wheel.write_bytes(b"two")  # the same requirements, a rebuilt wheel: a new environment
    assert deps.find(root, None).digest != req.digest


def test_a_given_file_must_exist_and_be_in_the_project(tmp_path: Path) -> None:
    root = project_with(tmp_path / "p")
    with pytest.raises(UsageError, match="no such file"):
        deps.find(root, str(root / "missing.txt"))
    (tmp_path / "elsewhere.txt").write_text("x\n")
    with pytest.raises(UsageError, match="not in the project"):
        deps.find(root, str(tmp_path / "elsewhere.txt"))
    (root / "reqs").mkdir()
    (root / "reqs" / "gpu.txt").write_text("x\n")
    req = deps.find(root, str(root / "reqs" / "gpu.txt"))
    assert req.path == "reqs/gpu.txt" and req.find_links == ("reqs", ".")


def remote(n: int) -> ClusterState:
    state = cluster(n)
    nodes = [dataclasses.replace(node, bundle_dir=f"{node.workdir}/bundle") for node in state.nodes]
    return dataclasses.replace(state, nodes=nodes)


def test_remote_nodes_install_into_their_work_dir_and_start_with_that_python(tmp_path: Path) -> None:
    root = project_with(tmp_path / "p")
    req = deps.find(root, None)
    project = Project(str(root), "train.py", ("requirements.txt", "train.py"), "abc", 10)
    plan = plan_torchrun(remote(2), RUN, script=str(root / "train.py"), port=29400, project=project, requirements=req)
    assert [step.node for step in plan.deps] == ["node0", "node1"]
    env = f"/work/node1/envs/{req.env_name('/opt/venv/bin/python')}"
    step = plan.deps[1]
    assert step.env_dir == env and step.cwd == "/work/node1/projects/abc"
    proj = "/work/node1/projects/abc"
    assert step.argv[2] == "/opt/venv/bin/python"  # env PROGRAM=TEXT python -c LOADER deps ARGS
    assert step.argv[6:] == (env, req.text, f"{proj}/requirements.txt", proj)  # the file in the project's copy
    assert plan.nodes[1].argv[0] == f"{env}/bin/python"  # the agent and its ranks
    assert plan.store.argv[2] == "/opt/venv/bin/python"  # the store needs only torch
    assert step.shell().startswith("cd /work/node1/projects/abc && env 'DDPCTL_NODE_PROGRAM=")
    assert " /opt/venv/bin/python -c " in step.shell()
    shown = "\n".join(plan.dry_run_lines())
    assert "packages on node1 (10.0.0.11), before the run:" in shown
    assert "'DDPCTL_NODE_PROGRAM=<node program deps.py>'" in shown and "<requirements.txt: 1 line(s)>" in shown
    assert plan.to_dict()["deps"][0]["requirements"] == "requirements.txt"


def test_this_machines_nodes_share_one_environment_in_the_state_home(tmp_path: Path) -> None:
    root = project_with(tmp_path / "p")
    req = deps.find(root, None)
    project = Project(str(root), "train.py", (), "", 0)
    envs = str(tmp_path / "home" / "envs")
    plan = plan_torchrun(
        cluster(2), RUN, script=str(root / "train.py"), port=29400, project=project, requirements=req, envs=envs
    )
    (step,) = plan.deps
    assert step.env_dir.startswith(envs + "/") and step.cwd == str(root)
    assert step.argv[8:] == (str(root / "requirements.txt"), str(root))
    assert {launch.argv[0] for launch in plan.nodes} == {step.python}


def test_the_environment_follows_the_nodes_python() -> None:
    req = deps.Requirements("requirements.txt", "x\n", (), "d1")
    assert req.env_name("/a/python") != req.env_name("/b/python")
    assert req.env_name("/a/python") != dataclasses.replace(req, digest="d2").env_name("/a/python")


def test_no_requirements_no_step() -> None:
    plan = plan_torchrun(remote(2), RUN, script="/b/mnist.py", port=29400, bundle_root="/b")
    assert plan.deps == () and plan.nodes[0].argv[0] == "/opt/venv/bin/python"


def test_a_failed_step_is_one_line_naming_the_node_and_pips_error() -> None:
    req = deps.Requirements("requirements.txt", "x\n", (), "d")
    steps = [
        deps.step(req, node=f"node{i}", host="h", python="/p", envs="/e", project_dir="", workdir="/w", local=False)
        for i in range(2)
    ]
    said = deps.outcome(steps, [(True, "reused /e/x"), (True, "installed /e/x")])
    assert said == [
        f"node0: the run's packages (requirements.txt) reused in {steps[0].env_dir}",
        f"node1: the run's packages (requirements.txt) installed in {steps[1].env_dir}",
    ]
    with pytest.raises(DdpctlError) as err:
        deps.outcome(steps, [(True, "reused /e/x"), (False, "pip: No matching distribution found for x")])
    assert str(err.value) == "node1: pip: No matching distribution found for x: nothing of the run was started"


def test_pips_last_error_line_is_the_one_kept() -> None:
    out = (
        "Collecting x\nERROR: Could not find a version that satisfies x\nERROR: No matching distribution found for x\n"
    )
    assert node_deps.last_error(out) == "No matching distribution found for x"
    assert node_deps.last_error("Traceback...\nOSError: disk full\n") == "OSError: disk full"


def test_through_sbatch_the_login_node_makes_it_in_the_shared_work_dir(tmp_path: Path) -> None:
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.runs.jobs import BUNDLE_DIR
    from ddpctl.infra.runs.prepare import plan_slurm

    state = remote(2)
    nodes = [dataclasses.replace(n, ssh=Host(name=n.name, address=n.host)) for n in state.nodes]
    state = dataclasses.replace(state, nodes=nodes)
    (tmp_path / "req.txt").write_text("--no-index\nx==1\n")
    req = deps.find(None, str(tmp_path / "req.txt"))
    plan = plan_slurm(state, RUN, BUNDLE_DIR / "message_passing.py", req)
    (step,) = plan.deps
    assert step.node == "node0" and step.env_dir.startswith("/work/node0/envs/") and step.cwd == "/work/node0"
    assert step.argv[8:] == ("",)  # the text alone: this machine's folders are not the login node's
    assert f"{step.python} -m torch.distributed.run" in plan.script
    assert plan.dry_run_lines()[0] == "  packages on node0 (10.0.0.10), before the run:"
    assert plan_slurm(state, RUN, BUNDLE_DIR / "message_passing.py").deps == ()


def test_the_toml_key_is_runs_requirements(tmp_path: Path) -> None:
    """`requirements = FILE` in ddpctl.toml's [run] is `run --requirements FILE`'s default (every [run]
    key names one of `run`'s options, so Click's default_map reaches it); a number is refused."""
    from ddpctl.config_file import RUN_KEYS, load_default_map
    from ddpctl.run_command import run

    path = tmp_path / "ddpctl.toml"
    path.write_text('[run]\nrequirements = "reqs/gpu.txt"\n')
    assert load_default_map(path)["run"] == {"requirements": "reqs/gpu.txt"}
    assert {param.name for param in run.params} >= RUN_KEYS
    path.write_text("[run]\nrequirements = 1\n")
    with pytest.raises(UsageError, match="requirements"):
        load_default_map(path).get("run")
