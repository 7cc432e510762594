"""The command line without torch: help, start-up imports, bad input, dry runs, up/status/down."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, tree

HEAVY = ("torch", "boto3", "botocore", "ansible", "fabric", "paramiko")


@pytest.mark.parametrize("command", [[], ["up"], ["run"], ["status"], ["down"], ["configure"], ["runs"], ["metrics"]])
def test_help_imports_nothing_heavy(command: list[str]) -> None:
    code = (
        "import sys\n"
        "from ddpctl.main import cli\n"
        f"sys.argv = ['ddpctl', *{command!r}, '--help']\n"
        "try:\n    cli()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r}])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Usage:" in out
    assert out.strip().splitlines()[-1] == "[]"


def test_help_teaches() -> None:
    out = ddpctl("--help").stdout
    assert "ddpctl run mnist --nodes 2" in out and "Exit codes:" in out
    out = ddpctl("run", "--help").stdout
    for word in ("message-passing", "mnist", "mingpt", "--dry-run", "--json", "--max-restarts", "Examples:"):
        assert word in out


def one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["run", "resnet", "--nodes", "2"], 2, "unknown job 'resnet': choose one of message-passing, mnist, mingpt"),
        (["up", "--provider", "gcp"], 2, "'gcp' is not one of 'local', 'onprem', 'aws', 'pcluster'"),
        (["run", "mnist", "--nodes", "0"], 2, "Invalid value for '--nodes' / '-n': '0': give N >= 1, or MIN:MAX"),
        (["up", "--nodes", "0"], 2, "0 is not in the range x>=1"),
        (
            ["up", "--playbook-var", "nvidia_cuda_version=12.8"],
            2,
            "--playbook-var is for --provider onprem, aws or pcluster",
        ),
        (
            ["up", "--provider", "aws", "--playbook-var", "nccl_env_master_addr=1.2.3.4", "--dry-run"],
            2,
            "--playbook-var nccl_env_master_addr is set by ddpctl itself",
        ),
        (
            ["up", "--provider", "aws", "--playbook-var", "Bad-Name=1", "--dry-run"],
            2,
            "invalid --playbook-var name 'Bad-Name'",
        ),
        (
            ["up", "--provider", "aws", "--playbook-var", "novalue", "--dry-run"],
            2,
            "--playbook-var 'novalue' is not KEY=VALUE",
        ),
        (["run", "mnist", "--nproc-per-node", "-1"], 2, "-1 is not in the range x>=1"),
        (["run", "./missing/train.py", "--nodes", "2"], 2, "script './missing/train.py' does not exist"),
        (["run", "mnist", "--max-restarts", "-2"], 2, "-2 is not in the range x>=0"),
        (["run", "mnist", "--nodes", "3", "--nproc-per-node", "2,1"], 2, "gives 2 value(s) for --nodes 3"),
        (["run", "mnist", "--nproc-per-node", "two"], 2, "'two' is not a count"),
        (["run", "mnist", "--env", "NOEQUALS"], 2, "NOEQUALS is not set in your environment"),
        (["down", "--name", "ghost"], 1, "no cluster named 'ghost'"),
        (["status", "--name", "ghost"], 1, "no cluster named 'ghost'"),
        (["configure", "--tags", "python_env,cuda"], 2, "playbooks/site.yml, comma-separated, from common, ssh_mesh"),
        (["configure"], 1, "no cluster is up"),
    ],
)
def test_bad_input(home: Path, args: list[str], code: int, message: str) -> None:
    result = ddpctl(*args)
    assert result.returncode == code, result.stderr
    assert message in one_line_error(result)
    assert tree(home) == []


def test_port_in_use(home: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = ddpctl("run", "message-passing", "--nodes", "2", "--port", str(port))
    assert result.returncode == 2
    assert f"port {port} is in use on 127.0.0.1" in one_line_error(result)
    assert tree(home) == []


def test_unwritable_state_home(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**__import__("os").environ, "DDPCTL_HOME": str(blocker / "home")}
    for args in (["up", "--nodes", "2"], ["run", "mnist", "--nodes", "2"]):
        result = ddpctl(*args, env=env)
        assert result.returncode == 2
        assert "is not writable" in one_line_error(result) and "DDPCTL_HOME" in result.stderr
    assert blocker.read_text() == ""


def test_json_error_document(home: Path) -> None:
    result = ddpctl("run", "resnet", "--json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["command"] == "run" and doc["schema"] == 1
    assert "unknown job" in doc["error"]["message"] and doc["error"]["code"] == 2
    assert doc["at"].endswith("Z")  # ISO 8601, UTC


def test_json_is_decided_by_the_parsed_option(home: Path) -> None:
    """`--json` after `--` is the job's argument: the error is the one line, not a JSON document."""
    result = ddpctl("run", "resnet", "--", "--json")
    assert result.returncode == 2 and result.stdout == ""
    result = ddpctl("run", "mnist", "--nodes", "abc", "--json")  # an option's error, under --json
    assert result.returncode == 2 and json.loads(result.stdout)["error"]["code"] == 2


def test_every_json_document_has_the_same_envelope(home: Path) -> None:
    keys = {"schema", "command", "ok", "at", "error"}
    for args in (["status", "--json"], ["runs", "--json"], ["up", "--dry-run", "--json"], ["down", "--json"]):
        doc = json.loads(ddpctl(*args).stdout)
        assert keys <= set(doc) and doc["command"] == args[0] and doc["ok"] is True and doc["error"] is None


def test_run_dry_run_creates_nothing(home: Path) -> None:
    result = ddpctl(
        "run", "mnist", "--nodes", "2", "--nproc-per-node", "2", "--dry-run", "--run-id", "dry1", "--", "--epochs", "1"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Would create local cluster 'default'" in out
    assert "--rdzv-id dry1" in out and "--nnodes 2 --nproc-per-node 2" in out
    assert "mnist.py --epochs 1" in out
    assert "env:  GLOO_SOCKET_IFNAME=lo" in out
    assert "  rendezvous store on node0 (127.0.0.1):" in out and "env:  DDPCTL_RDZV_STORE=dry1" in out
    assert "'DDPCTL_NODE_PROGRAM=<node program rdzv_store.py>' " in out  # the program by name, not its text
    assert " rdzv_store 127.0.0.1 " in out
    assert tree(home) == []


def test_run_dry_run_json(home: Path) -> None:
    result = ddpctl("run", "message-passing", "--nodes", "3", "--dry-run", "--json", "--run-id", "dry2")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is True
    plan = doc["plan"]
    assert plan["run_id"] == "dry2" and plan["world_size"] == 3 and len(plan["nodes"]) == 3
    assert [n["node"] for n in plan["nodes"]] == ["node0", "node1", "node2"]
    assert doc["cluster"]["spec"]["nodes"] == 3
    store = plan["store"]  # the c10d store: on the head node, apart from its agent, which joins it
    assert (
        store["node"] == "node0"
        and store["argv"][1] == "DDPCTL_NODE_PROGRAM=<node program rdzv_store.py>"  # its name, not its text
        and store["argv"][-2:] == [plan["rdzv_endpoint"].split(":")[1], "dry2"]  # its port, the rendezvous id
    )
    assert store["env"]["DDPCTL_RUN_ID"] == store["env"]["DDPCTL_RDZV_STORE"] == "dry2"
    assert all("is_host=0" in n["argv"] for n in plan["nodes"])
    assert tree(home) == []


def local_up(*args: str) -> dict:
    up = ddpctl("up", "--nodes", "2", *args, "--json")
    assert up.returncode == 0, up.stderr
    return json.loads(up.stdout)["cluster"]


def test_a_dry_run_of_up_plans_and_creates_nothing(home: Path) -> None:
    dry = ddpctl("up", "--nodes", "2", "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["cluster"]["status"] == "planned"
    assert tree(home) == []


def test_up_creates_every_resource_and_status_lists_the_cluster(home: Path) -> None:
    cluster = local_up("--nproc-per-node", "2")
    assert cluster["status"] == "up" and len(cluster["nodes"]) == 2
    assert all(r["status"] == "created" for r in cluster["resources"])
    for node in cluster["nodes"]:
        assert Path(node["workdir"]).is_dir()
    doc = json.loads(ddpctl("status", "--json").stdout)
    assert [c["spec"]["name"] for c in doc["clusters"]] == ["default"]
    assert "default" in ddpctl("status").stdout


def test_up_again_and_configure_of_a_local_cluster_are_one_line(home: Path) -> None:
    local_up()
    again = ddpctl("up", "--nodes", "2")
    assert again.returncode == 1 and "already exists" in one_line_error(again)
    local = ddpctl("configure")
    assert local.returncode == 2 and "local clusters run no playbooks" in one_line_error(local)


def test_a_run_on_a_cluster_that_is_up_is_checked_and_planned_against_it(home: Path) -> None:
    local_up("--nproc-per-node", "2")
    too_many = ddpctl("run", "message-passing", "--nodes", "3")  # a usage error, nothing started
    assert too_many.returncode == 2 and "cluster 'default' has 2 node(s)" in one_line_error(too_many)
    dry = json.loads(ddpctl("run", "mnist", "--nodes", "2", "--dry-run", "--json").stdout)
    assert "cluster" not in dry  # nothing to create: the cluster is up
    assert dry["plan"]["world_size"] == 4  # the cluster's nproc-per-node


def test_down_removes_everything_and_a_second_down_does_nothing(home: Path) -> None:
    local_up()
    down = ddpctl("down", "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["down"] == ["default"]
    assert tree(home / "clusters") == []
    assert ddpctl("down").returncode == 0  # nothing up: nothing to do


def test_several_clusters_need_a_name(home: Path) -> None:
    assert ddpctl("up", "--name", "a").returncode == 0
    assert ddpctl("up", "--name", "b").returncode == 0
    result = ddpctl("down")
    assert result.returncode == 2 and "several clusters are up (a, b)" in one_line_error(result)
    assert ddpctl("down", "--all", "--yes").returncode == 0
    assert tree(home / "clusters") == []


def test_config_file_defaults(home: Path, tmp_path: Path) -> None:
    (tmp_path / "ddpctl.toml").write_text('[cluster]\nname = "lab"\nnodes = 3\n[cluster.env]\nNCCL_DEBUG = "INFO"\n')
    result = ddpctl("run", "message-passing", "--dry-run", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert plan["cluster"] == "lab" and len(plan["nodes"]) == 3
    assert plan["nodes"][0]["env"]["NCCL_DEBUG"] == "INFO"
    flags_win = json.loads(ddpctl("run", "message-passing", "--nodes", "1", "--dry-run", "--json", cwd=tmp_path).stdout)
    assert len(flags_win["plan"]["nodes"]) == 1
    (tmp_path / "ddpctl.toml").write_text("[cluster]\nnode = 3\n")
    bad = ddpctl("up", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown key(s) ['node']" in one_line_error(bad)
    elsewhere = tmp_path / "elsewhere.toml"  # $DDPCTL_CONFIG names a file outside the working directory
    elsewhere.write_text('[cluster]\nname = "lab2"\n')
    by_env = ddpctl(
        "run", "message-passing", "--dry-run", "--json", env={**os.environ, "DDPCTL_CONFIG": str(elsewhere)}
    )
    assert by_env.returncode == 0 and json.loads(by_env.stdout)["plan"]["cluster"] == "lab2", by_env.stderr


def test_run_elastic_node_range(home: Path) -> None:
    result = ddpctl("run", "mnist", "--nodes", "2:3", "--dry-run", "--json", "--run-id", "el")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert plan["min_nodes"] == 2 and len(plan["nodes"]) == 3
    argv = plan["nodes"][0]["argv"]
    assert argv[argv.index("--nnodes") + 1] == "2:3" and argv[argv.index("--max-restarts") + 1] == "3"
    for bad in ("3:2", "0:2", "2:x", "1:2:3"):
        wrong = ddpctl("run", "mnist", "--nodes", bad, "--dry-run")
        assert wrong.returncode == 2 and "--nodes" in wrong.stderr, wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1
    assert tree(home) == []


def test_quiet_and_verbose(home: Path) -> None:
    loud = ddpctl("up", "--nodes", "2")
    assert "is up" in loud.stderr
    assert ddpctl("down").returncode == 0
    quiet = ddpctl("--quiet", "up", "--nodes", "2")
    assert quiet.returncode == 0 and quiet.stderr == ""  # no progress lines
    result = ddpctl("-q", "run", "nosuchjob")
    assert result.returncode == 2 and result.stderr.startswith("Error: unknown job")  # errors still
    verbose = ddpctl("--verbose", "run", "nosuchjob")
    assert "Traceback (most recent call last)" in verbose.stderr and "resolve_job" in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1].startswith("Error: unknown job")
    assert ddpctl("-q", "down").returncode == 0
