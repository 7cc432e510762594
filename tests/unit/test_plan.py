"""The torchrun planner: argv and env per node, pure and fast.

Its tests that start processes (real parts) are in tests/integration/test_plan.py.
"""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from ddpctl.infra.launch.plan import LaunchPlan, plan_torchrun
from ddpctl.infra.launch.project import Project
from ddpctl.infra.launch.torchrun import RANK_PREFIX_TEMPLATE, RANK_PREFIX_VAR
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import ClusterState, NodeInfo
from tests.support.plan import cluster
from tests.support.specs import cluster_spec


def flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


SHAPES = pytest.mark.parametrize("nodes,nproc,restarts", [(1, 1, 0), (2, 1, 0), (2, 4, 3), (4, 8, 1)])


def planned(nodes: int, nproc: int, restarts: int) -> LaunchPlan:
    run = RunSpec(
        job="mnist", args=("--epochs", "3"), nodes=nodes, nproc_per_node=nproc, max_restarts=restarts, run_id="r1"
    )
    return plan_torchrun(cluster(4), run, script="/b/mnist.py", port=29400)


@SHAPES
def test_the_plan_has_one_agent_per_node_and_the_whole_world(nodes: int, nproc: int, restarts: int) -> None:
    plan = planned(nodes, nproc, restarts)
    assert len(plan.nodes) == nodes
    assert plan.world_size == nodes * nproc
    assert plan.rdzv_endpoint == "10.0.0.10:29400"
    assert [(n.node, n.node_rank) for n in plan.nodes] == [(f"node{rank}", rank) for rank in range(nodes)]


@SHAPES
def test_every_agent_joins_the_heads_store_by_c10d(nodes: int, nproc: int, restarts: int) -> None:
    for rank, node in enumerate(planned(nodes, nproc, restarts).nodes):
        argv = node.argv
        assert argv[:3] == ("/opt/venv/bin/python", "-m", "torch.distributed.run")
        assert flag(argv, "--rdzv-backend") == "c10d"
        assert flag(argv, "--rdzv-endpoint") == "10.0.0.10:29400"  # the head node, on every node
        assert flag(argv, "--rdzv-id") == "r1"
        assert flag(argv, "--rdzv-conf") == "is_host=0"  # every agent joins the run's own store
        assert flag(argv, "--local-addr") == f"10.0.0.{10 + rank}"


@SHAPES
def test_every_agent_gets_the_runs_shape(nodes: int, nproc: int, restarts: int) -> None:
    for node in planned(nodes, nproc, restarts).nodes:
        assert flag(node.argv, "--nnodes") == str(nodes)
        assert flag(node.argv, "--nproc-per-node") == str(nproc)
        assert flag(node.argv, "--max-restarts") == str(restarts)
        assert node.env["OMP_NUM_THREADS"] == str(max(1, 8 // nproc))


@SHAPES
def test_the_job_runs_from_the_nodes_dir_with_its_args_after_the_script(nodes: int, nproc: int, restarts: int) -> None:
    for rank, node in enumerate(planned(nodes, nproc, restarts).nodes):
        assert node.argv[-3:] == ("/b/mnist.py", "--epochs", "3")
        assert node.cwd == f"/work/node{rank}"


@SHAPES
def test_the_rank_prefix_is_set_the_way_every_supported_torch_reads_it(nodes: int, nproc: int, restarts: int) -> None:
    for node in planned(nodes, nproc, restarts).nodes:
        assert "--log-line-prefix-template" not in node.argv  # a flag only torch 2.14 and later have
        assert node.env[RANK_PREFIX_VAR] == RANK_PREFIX_TEMPLATE


def test_the_head_node_hosts_the_store_apart_from_its_agent() -> None:
    """The c10d store is the run's own process on the head node: the head's Python, its work dir,
    the rendezvous port; the run's markers (so that down and stop find it) and a key of its own."""
    from ddpctl.infra.node_programs import argv as program_argv

    plan = plan_torchrun(cluster(3), RunSpec(job="m", nodes=3, run_id="r5"), script="s.py", port=29400)
    store = plan.store
    assert store is not None and (store.node, store.host, store.node_rank) == ("node0", "10.0.0.10", 0)
    assert store.argv == program_argv("/opt/venv/bin/python", "rdzv_store", "10.0.0.10", "29400", "r5")
    assert plan.rdzv_endpoint == "10.0.0.10:29400"  # where every agent finds it
    assert store.env == {"DDPCTL_RUN_ID": "r5", "DDPCTL_CLUSTER_ID": "cid", "DDPCTL_RDZV_STORE": "r5"}
    assert store.cwd == "/work/node0" and store.secret == () and store.log_dir == ""
    assert plan.to_dict()["store"]["env"] == store.env and plan.to_dict()["store"]["node"] == "node0"


def test_the_store_on_a_remote_head_uses_its_python_and_env_file() -> None:
    plan = plan_torchrun(
        remote_cluster(), RunSpec(job="m", nodes=2, run_id="r6"), script="/b/m.py", port=1, bundle_root="/b"
    )
    store = plan.store
    assert store.argv[2] == "/opt/env/bin/python" and store.env_file == "/srv/n0/ddpctl.env"
    line = store.shell()  # how the SSH executor starts it
    assert line.startswith("mkdir -p /srv/n0 && cd /srv/n0 && set -a && . /srv/n0/ddpctl.env && set +a && exec env ")
    assert "DDPCTL_RDZV_STORE=r6" in line and line.endswith(" 10.0.0.10 1 r6")
    assert shlex.split(line.split(" && ", 5)[5])[-3:] == ["10.0.0.10", "1", "r6"]  # host, port, rendezvous id


def test_secrets_never_reach_the_store() -> None:
    run = RunSpec(job="m", nodes=2, run_id="r7", env={"TOKEN": "s3cret"}, secret_env=frozenset({"TOKEN"}))
    plan = plan_torchrun(cluster(2), run, script="s.py", port=1)
    assert "TOKEN" not in plan.store.env and plan.store.secret_input() == b""


def test_env_defaults_interfaces_and_markers() -> None:
    plan = plan_torchrun(cluster(2), RunSpec(job="mnist", nodes=2, run_id="r9"), script="s.py", port=1)
    env = plan.nodes[1].env
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["DDPCTL_SHARED_DIR"] == "/shared"
    assert env["DDPCTL_RUN_ID"] == "r9" and env["DDPCTL_CLUSTER_ID"] == "cid"


def test_interface_left_out_when_unknown() -> None:
    plan = plan_torchrun(cluster(2, ifname=None), RunSpec(job="m", nodes=2), script="s.py", port=1)
    assert "NCCL_SOCKET_IFNAME" not in plan.nodes[0].env
    assert "GLOO_SOCKET_IFNAME" not in plan.nodes[0].env


def test_user_env_wins_over_defaults_but_not_markers() -> None:
    c = cluster(2, env={"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "3"})
    run = RunSpec(job="m", nodes=2, run_id="r1", env={"NCCL_SOCKET_IFNAME": "ib0", "DDPCTL_RUN_ID": "x"})
    env = plan_torchrun(c, run, script="s.py", port=1).nodes[0].env
    assert env["NCCL_DEBUG"] == "INFO"  # cluster's
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"  # run's
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert env["DDPCTL_RUN_ID"] == "r1"  # the marker cannot be overridden


def test_omp_threads_never_zero() -> None:
    plan = plan_torchrun(cluster(1, cpus=1), RunSpec(job="m", nproc_per_node=4), script="s.py", port=1)
    assert plan.nodes[0].env["OMP_NUM_THREADS"] == "1"


def test_more_nodes_than_the_cluster_has() -> None:
    with pytest.raises(UsageError, match="--nodes 3 but cluster 'c' has 2 node"):
        plan_torchrun(cluster(2), RunSpec(job="m", nodes=3), script="s.py", port=1)


def test_run_ids_are_unique() -> None:
    assert len({RunSpec(job="m").run_id for _ in range(100)}) == 100


def test_shell_line_round_trips() -> None:
    node = plan_torchrun(cluster(1), RunSpec(job="m", args=("--x", "a b"), run_id="r1"), script="s.py", port=1).nodes[0]
    line = node.shell()
    assert line.startswith("mkdir -p /work/node0 && cd /work/node0 && exec env ")
    words = shlex.split(line.split(" && ", 2)[2])
    assert words[:2] == ["exec", "env"]
    assert words[-2:] == ["--x", "a b"]
    assert f"{RANK_PREFIX_VAR}=[rank${{rank}}]:" in words  # quoted: the shell leaves torchrun's template alone


def remote_cluster() -> ClusterState:
    c = cluster(2)
    c.nodes = [
        NodeInfo(
            f"node{i}",
            f"10.0.0.{10 + i}",
            f"/srv/n{i}",
            python="/opt/env/bin/python",
            env_file=f"/srv/n{i}/ddpctl.env",
            bundle_dir=f"/srv/n{i}/bundle",
        )
        for i in range(2)
    ]
    return c


def test_remote_nodes_run_their_bundle_copy_and_source_the_env_file() -> None:
    plan = plan_torchrun(
        remote_cluster(),
        RunSpec(job="mnist", nodes=2, run_id="r1"),
        script="/repo/training/mingpt/main.py",
        port=1,
        bundle_root="/repo/training",
    )
    for i, node in enumerate(plan.nodes):
        assert node.argv[0] == "/opt/env/bin/python"
        assert node.argv[-1] == f"/srv/n{i}/bundle/mingpt/main.py"
        assert node.project_dir == "" and node.cwd == f"/srv/n{i}"
        line = node.shell()
        # ddpctl's defaults, the env file over them, then the explicit env: a user's value wins over the file's
        assert f"set -a && . /srv/n{i}/ddpctl.env && set +a && exec env " in line
        assert line.index("PYTHONUNBUFFERED=") < line.index("ddpctl.env") < line.index("DDPCTL_SNAPSHOT_DIR=")
        assert "NCCL_DEBUG=" not in line  # from the env file, as the playbooks wrote it


def test_users_project_is_shipped_to_remote_nodes() -> None:
    project = Project("/home/me/proj", "src/train.py", ("data.csv", "src/train.py", "src/util.py"), "abc123", 10)
    plan = plan_torchrun(
        remote_cluster(),
        RunSpec(job="train", nodes=2, run_id="r7"),
        script="/home/me/proj/src/train.py",
        port=1,
        bundle_root="/repo/training",
        project=project,
    )
    assert plan.project == project and plan.to_dict()["project"]["files"] == 3
    for i, node in enumerate(plan.nodes):
        assert node.project_dir == node.cwd == f"/srv/n{i}/projects/abc123"  # named by content
        assert node.argv[-1] == f"/srv/n{i}/projects/abc123/src/train.py"
        assert node.env["DDPCTL_SNAPSHOT_DIR"] == "/shared/runs/r7"


def test_a_projects_run_snapshots_under_the_work_directory_where_nodes_share_no_folder() -> None:
    """aws nodes share no folder: the run's own snapshot folder is relative to the head's work
    directory, where down and download look for it, not inside the project's copy where the ranks
    start (there, its outputs were found by nothing, and autodown's kept head had none to give)."""
    project = Project("/home/me/proj", "train.py", ("train.py",), "abc123", 10)
    nodes = remote_cluster()
    nodes.shared_dir = ""
    plan = plan_torchrun(
        nodes, RunSpec(job="train", nodes=2, run_id="r7"), script="/home/me/proj/train.py", port=1, project=project
    )
    assert [n.env["DDPCTL_SNAPSHOT_DIR"] for n in plan.nodes] == ["/srv/n0/runs/r7", "/srv/n1/runs/r7"]
    bundled = plan_torchrun(
        nodes,
        RunSpec(job="mnist", nodes=2, run_id="r8"),
        script="/repo/training/mnist.py",
        port=1,
        bundle_root="/repo/training",
    )
    assert [n.env["DDPCTL_SNAPSHOT_DIR"] for n in bundled.nodes] == ["runs/r8", "runs/r8"]  # they start there


def test_local_nodes_run_the_script_in_place_from_its_project() -> None:
    project = Project("/home/me/proj", "train.py", (), "", 0)
    plan = plan_torchrun(
        cluster(1),
        RunSpec(job="t"),
        script="/home/me/proj/train.py",
        port=1,
        bundle_root="/repo/training",
        project=project,
    )
    assert plan.nodes[0].argv[-1] == "/home/me/proj/train.py" and plan.nodes[0].cwd == "/home/me/proj"
    assert plan.nodes[0].project_dir == "" and plan.project is None  # nothing to ship


def test_heterogeneous_nodes() -> None:
    run = RunSpec(job="m", nodes=2, nproc_per_node=(2, 1), run_id="r1")
    plan = plan_torchrun(cluster(2, cpus=4), run, script="s.py", port=1)
    assert plan.world_size == 3
    assert [flag(n.argv, "--nproc-per-node") for n in plan.nodes] == ["2", "1"]
    assert [n.env["OMP_NUM_THREADS"] for n in plan.nodes] == ["2", "4"]
    with pytest.raises(UsageError, match=r"--nproc-per-node 2,1 gives 2 value\(s\) for --nodes 3"):
        RunSpec(job="m", nodes=3, nproc_per_node=(2, 1))
    with pytest.raises(UsageError, match="--nproc-per-node 0 is not allowed"):
        RunSpec(job="m", nodes=2, nproc_per_node=(2, 0))


def test_elastic_runs() -> None:
    run = RunSpec(job="m", nodes=3, min_nodes=2, run_id="r1")
    assert run.elastic and run.max_restarts == 3  # survivors restart their workers when a node is lost
    plan = plan_torchrun(cluster(3), run, script="s.py", port=1)
    assert plan.min_nodes == 2
    for node in plan.nodes:
        assert flag(node.argv, "--nnodes") == "2:3"
        conf = flag(node.argv, "--rdzv-conf")
        assert conf.startswith("is_host=0,") and "last_call_timeout=5" in conf
        assert "read_timeout=120" in conf  # agents that start spread out exchange their ranks late
        assert node.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    fixed = plan_torchrun(cluster(3), RunSpec(job="m", nodes=3, min_nodes=3, run_id="r1"), script="s.py", port=1)
    assert fixed.min_nodes == 0 and flag(fixed.nodes[0].argv, "--nnodes") == "3"  # MIN == MAX: not elastic
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in fixed.nodes[0].env
    with pytest.raises(UsageError, match="--nodes 4:3: MIN must be from 1 to MAX"):
        RunSpec(job="m", nodes=3, min_nodes=4)


def test_restarts_get_a_fresh_worker_store_per_round() -> None:
    plan = plan_torchrun(cluster(2), RunSpec(job="m", nodes=2, max_restarts=1, run_id="r1"), script="s.py", port=1)
    assert all(n.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" for n in plan.nodes)


def test_one_torchrun_builder_for_every_launcher() -> None:
    from ddpctl.infra.launch.torchrun import ShellVar, literal, shell_join, torchrun_argv

    run = RunSpec(job="mnist", nodes=2, run_id="r1", args=("--epochs", "1"))
    argv = torchrun_argv(
        "python3",
        run,
        nproc=1,
        rdzv_endpoint=ShellVar("DDPCTL_RDZV"),
        rdzv_id=ShellVar("SLURM_JOB_ID"),
        log_dir="/o/logs",
        script="/b/m.py",
    )
    line = shell_join(argv)
    assert '--rdzv-endpoint "$DDPCTL_RDZV" --rdzv-id "$SLURM_JOB_ID"' in line  # expanded by the node's shell
    assert "--rdzv-conf is_host=0" in line and "--local-addr" not in line
    assert shell_join(["a b", "$HOME"]) == "'a b' '$HOME'"  # a value that only looks like a variable is quoted
    with pytest.raises(ValueError, match="cannot expand a ShellVar"):
        literal(argv)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 16])
def test_check_pairs_run_in_rounds_of_disjoint_pairs(n: int) -> None:
    """`ddpctl check`'s bandwidth pairs (the benchmark's schedule): every pair once, no node twice in a
    round, N-1 rounds (N odd: N)."""
    import itertools

    from ddpctl.training.allreduce_bench import pair_rounds

    rounds = pair_rounds(n)
    assert sorted(p for r in rounds for p in r) == list(itertools.combinations(range(n), 2))
    assert all(len({x for p in r for x in p}) == 2 * len(r) for r in rounds)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)


def test_check_reads_each_pair_by_the_nodes_its_ranks_run_on() -> None:
    """torchrun numbers ranks as nodes join: a pair line names ranks, the lines' nodes name the link."""
    from ddpctl.infra.launch.nodes import OutputLine
    from ddpctl.infra.runs.check import parse_bandwidth, plan_bandwidth

    three = cluster(3)
    lines = [
        OutputLine("node2", 0, "allreduce pairs: rank 0 of 3 ready"),
        OutputLine("node0", 1, "allreduce pairs: rank 1 of 3 ready"),
        OutputLine("node1", 2, "allreduce pairs: rank 2 of 3 ready"),
        OutputLine("node2", 0, "pair 0 1 round=1 size_mb=1 time_ms=2.00 algbw_gbps=0.5 busbw_gbps=0.500"),
        OutputLine("node2", 0, "pair 0 2 round=2 size_mb=1 time_ms=2.00 algbw_gbps=0.7 busbw_gbps=0.700"),
        OutputLine("node0", 1, "pair 1 2 round=3 size_mb=1 time_ms=2.00 algbw_gbps=0.9 busbw_gbps=0.900"),
    ]
    assert parse_bandwidth(three, lines) == {("node0", "node2"): 0.5, ("node1", "node2"): 0.7, ("node0", "node1"): 0.9}
    plan = plan_bandwidth(three, 29500, 1, one_pair_at_a_time=True)
    assert len(plan.nodes) == 3 and plan.nodes[0].argv[-4:] == ("--size-mb", "1", "--pairs", "--one-pair-at-a-time")


def test_check_reads_the_transport_nccl_chose_on_each_node() -> None:
    """NCCL_DEBUG=INFO lines as NCCL and aws-ofi-nccl print them (real lines, from EFA and socket
    runs; host:pid:tid [device] prefix and all): each node's transport, and gloo where no NCCL ran."""
    from ddpctl.infra.launch.nodes import OutputLine
    from ddpctl.infra.runs.check import parse_transport, plan_bandwidth

    lines = [
        # p5en over EFA (aws-ofi-nccl 1.13): the provider, then the network NCCL uses
        ("node0", "8h200-3:6310:6318 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)"),
        ("node0", "8h200-3:6310:6318 [0] NCCL INFO NET/OFI NIC group 0 device #0 0000:56:00.0"),
        ("node0", "8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric"),
        # older plugins name the network "AWS Libfabric"
        ("node1", "ip-172-31-8-12:21471:22316 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)"),
        ("node1", "ip-172-31-8-12:21471:22316 [0] NCCL INFO Using network AWS Libfabric"),
        # no plugin: sockets
        ("node2", "ip-10-36-29-253:79:79 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so."),
        ("node2", "ip-10-36-29-253:79:79 [0] NCCL INFO NET/Socket : Using [0]eth0:10.36.29.253<0>"),
        ("node2", "ip-10-36-29-253:79:79 [0] NCCL INFO Using network Socket"),
        # the plugin's provider failed: NCCL fell back to sockets, and says so last
        ("node3", "ip-10-3-35-83:4242:4242 [0] NCCL INFO NET/OFI Selected Provider is efa (found 1 nics)"),
        ("node3", "ip-10-3-35-83:4242:4242 [0] NCCL WARN NET/OFI Couldn't open AV. RC: -22"),
        ("node3", "ip-10-3-35-83:4242:4242 [0] NCCL INFO Using network Socket"),
        # only the NET/Socket line seen
        ("node4", "node4:88:88 [0] NCCL INFO NET/Socket : Using [0]ens5:10.0.1.4<0>"),
        ("node5", "host:1:1 [0] NCCL INFO Using network IB"),
        ("node6", "allreduce pairs: rank 3 of 8 ready backend=gloo"),
        ("node7", "allreduce pairs: rank 4 of 8 ready backend=nccl"),  # NCCL said nothing at INFO
    ]
    found = parse_transport([OutputLine(node, 0, text) for node, text in lines])
    assert found == {
        "node0": "efa",
        "node1": "efa",
        "node2": "socket",
        "node3": "socket",
        "node4": "socket",
        "node5": "ib",
        "node6": "gloo",
        "node7": "unknown",
    }
    plan = plan_bandwidth(cluster(2), 29500, 1, one_pair_at_a_time=False)
    assert plan.nodes[0].env["NCCL_DEBUG"] == "INFO"  # the run's own value, over the node's env file


# ---- every GPU, every node: the nodes and processes a run gets by default (run_prepare) ------------


def gpu_cluster(gpus: tuple[int, ...], *, nproc: tuple[int, ...] = (), spec_nproc: int = 0) -> ClusterState:
    """An on-prem cluster whose nodes counted ``gpus`` at configure (``nproc``: inventory counts)."""
    from ddpctl.infra.model.host import Host

    spec = cluster_spec(name="g", provider="onprem", inventory="/dev/null", nodes=len(gpus), nproc_per_node=spec_nproc)
    nodes = [
        NodeInfo(
            f"node{i}",
            f"10.0.0.{10 + i}",
            f"/work/node{i}",
            gpus=g,
            nproc=(nproc or (0,) * len(gpus))[i],
            ssh=Host(name=f"node{i}", address=f"10.0.0.{10 + i}"),
        )
        for i, g in enumerate(gpus)
    ]
    return ClusterState(spec=spec, cluster_id="cid", status="up", shared_dir="/shared", nodes=nodes)


def test_each_node_runs_one_process_per_gpu_and_one_without() -> None:
    from ddpctl.infra.runs.ranks import node_nprocs, nproc_source

    c = gpu_cluster((4, 2, 0))
    assert node_nprocs(c, 3, None) == (4, 2, 1)  # a node without GPUs runs one
    assert nproc_source(c, 3, None) == "one per GPU, 1 on a node without GPUs"
    assert node_nprocs(c, 2, "auto") == (4, 2) and node_nprocs(c, 3, "auto") == (4, 2, 1)
    assert node_nprocs(c, 2, "gpu") == (4, 2)
    with pytest.raises(UsageError, match=r"^--nproc-per-node gpu: node node2 of cluster 'g' has no GPU .*or auto$"):
        node_nprocs(c, 3, "gpu")
    # one listed node standing for a fleet (ParallelCluster's head): its count for every node
    assert node_nprocs(gpu_cluster((8,)), 3, None) == (8, 8, 8)


def test_a_number_given_to_run_wins_over_the_gpus() -> None:
    from ddpctl.infra.runs.ranks import node_nprocs, nproc_source

    c = gpu_cluster((4, 2, 0))
    assert node_nprocs(c, 3, 3) == (3, 3, 3) and node_nprocs(c, 3, (1, 2, 1)) == (1, 2, 1)
    assert nproc_source(c, 3, 3) == ""


def test_the_inventorys_count_and_ups_win_over_the_gpus_but_not_over_a_word() -> None:
    from ddpctl.infra.runs.ranks import node_nprocs, nproc_source

    assert node_nprocs(gpu_cluster((4, 4), nproc=(2, 0)), 2, None) == (2, 4)
    assert nproc_source(gpu_cluster((4, 4), nproc=(2, 0)), 2, None) == "ddpctl_nproc_per_node, one per GPU"
    assert node_nprocs(gpu_cluster((4, 4), nproc=(2, 0), spec_nproc=3), 2, None) == (2, 3)
    assert node_nprocs(gpu_cluster((4, 4)), 2, "auto") == (4, 4)


def test_a_run_without_nodes_or_nproc_uses_every_gpu_of_every_node(home) -> None:
    """On a cluster that is up: every node, each with a process per GPU; the summary says so."""
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.options import RunOptions
    from ddpctl.infra.runs.prepare import prepare

    store = StateStore(home)
    store.save(gpu_cluster((4, 2)))
    prep = prepare(RunOptions(job="mnist"), store)
    assert prep.run.nodes == 2 and prep.run.nprocs() == (4, 2) and prep.plan.world_size == 6
    assert [flag(n.argv, "--nproc-per-node") for n in prep.plan.nodes] == ["4", "2"]
    assert prep.summary == "all 2 node(s) of cluster 'g', 4+2 process(es) (one per GPU)"
    one = prepare(RunOptions(job="mnist", nodes=1, nproc_per_node="gpu"), store)
    assert one.plan.world_size == 4 and one.summary == "1 of the 2 node(s) of cluster 'g', 4 process(es) (one per GPU)"
    # sbatch: the same count on every node, from the same rule
    store.save(dataclasses.replace(gpu_cluster((4, 4)), launcher="sbatch"))
    script = prepare(RunOptions(job="mnist"), store).plan.script
    assert "--nnodes 2" in script and "--nproc-per-node 4" in script, script
    store.save(dataclasses.replace(gpu_cluster((4, 2)), launcher="sbatch"))
    with pytest.raises(UsageError, match=r"sbatch runs the same --nproc-per-node on every node, not 4\+2"):
        prepare(RunOptions(job="mnist"), store)


def test_a_run_that_brings_its_local_cluster_up_keeps_one_node(home) -> None:
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.options import RunOptions
    from ddpctl.infra.runs.prepare import prepare

    prep = prepare(RunOptions(job="message-passing"), StateStore(home))
    assert prep.ephemeral and prep.run.nodes == 1 and prep.run.nprocs() == (1,)
    assert (
        prep.summary
        == "1 node(s) of cluster 'default' (brought up for this run), 1 process(es) (1 on a node without GPUs)"
    )
    two = prepare(RunOptions(job="message-passing", nodes=2, nproc_per_node="auto"), StateStore(home))
    assert two.run.nprocs() == (1, 1)  # auto: 1 on a node without GPUs (not torchrun's CPU count)
    with pytest.raises(UsageError, match="--nproc-per-node gpu: node node0 of cluster 'default' has no GPU"):
        prepare(RunOptions(job="message-passing", nproc_per_node="gpu"), StateStore(home))
    with pytest.raises(UsageError, match="--nproc-per-node 1,1 gives 2 value.s. for --nodes 3"):
        prepare(RunOptions(job="message-passing", nodes=3, nproc_per_node=(1, 1)), StateStore(home))
