"""Pure parts of the on-prem path: inventory JSON -> hosts, runner events -> progress lines, check plans."""

from __future__ import annotations

import pytest

from ddpctl.infra.hosts.ansible import Play, PlayReport, TaskLines
from ddpctl.infra.hosts.inventory import hosts_from_list
from ddpctl.infra.launch.nodes import OutputLine
from ddpctl.infra.launch.reach_plan import REACH_LINE, head_reach_plan, plan_reach, raise_if_head_unreachable
from ddpctl.infra.model.errors import DdpctlError, UsageError
from ddpctl.infra.model.state import ClusterState, NodeInfo
from tests.support.specs import cluster_spec


def listing(groups: dict, hostvars: dict) -> dict:
    return {
        "_meta": {"hostvars": hostvars},
        "all": {"children": ["ungrouped", *groups]},
        **{g: {"hosts": h} for g, h in groups.items()},
    }


def test_ddp_nodes_group_in_order_with_ssh_settings() -> None:
    data = listing(
        {"other": ["x"], "ddp_nodes": ["b", "a"]},
        {
            "a": {
                "ansible_host": "10.0.0.2",
                "ansible_user": "ubuntu",
                "ansible_port": 2222,
                "ansible_ssh_private_key_file": "~/.ssh/k",
                "ansible_ssh_common_args": "-F /etc/cfg -o X=y",
            },
            "b": {"ansible_host": "10.0.0.1"},
        },
    )
    hosts = hosts_from_list(data)
    assert [h.name for h in hosts] == ["b", "a"]  # the head node is the first listed
    a = hosts[1]
    assert (a.address, a.user, a.port, a.key_file, a.ssh_config) == ("10.0.0.2", "ubuntu", 2222, "~/.ssh/k", "/etc/cfg")
    assert hosts[0].user is None and hosts[0].port == 22


def test_every_host_when_there_is_no_ddp_nodes_group() -> None:
    data = listing({"gpu": ["n1", "n2"], "cpu": ["n2", "n3"]}, {})
    assert [h.name for h in hosts_from_list(data)] == ["n1", "n2", "n3"]
    assert hosts_from_list(data)[0].address == "n1"  # no ansible_host: the name is the address


def test_duplicate_and_empty_inventories() -> None:
    dup = listing({"ddp_nodes": ["a", "b"]}, {"a": {"ansible_host": "h"}, "b": {"ansible_host": "h"}})
    with pytest.raises(UsageError, match="hosts 'a' and 'b' are both h:22"):
        hosts_from_list(dup)
    with pytest.raises(UsageError, match="lists no hosts"):
        hosts_from_list(listing({}, {}))


def event(kind: str, **data) -> dict:
    return {"event": kind, "event_data": data}


def test_one_progress_line_per_task_and_published_facts() -> None:
    lines: list[str] = []
    report = PlayReport()
    handle = TaskLines(lines.append, report)
    handle(event("playbook_on_task_start", task="common : hosts"))
    handle(event("runner_on_ok", host="node1", res={"changed": True}))
    handle(event("runner_on_ok", host="node0", res={"changed": False}))
    handle(event("playbook_on_task_start", task="report layout"))
    handle(event("runner_on_ok", host="node0", res={"ansible_facts": {"ddpctl_node": {"python": "/p"}, "other": 1}}))
    handle(event("runner_on_failed", host="node1", task="report layout", res={"msg": "boom\nmore"}))
    handle(event("playbook_on_stats", ok={"node0": 2}, changed={"node1": 1}, failures={"node1": 1}))
    assert lines == ["common : hosts: node0 ok, node1 changed", "report layout: node0 ok, node1 failed"]
    assert report.facts == {"node0": {"ddpctl_node": {"python": "/p"}}}
    assert report.failures == ["node1: report layout: boom"]
    assert report.stats["node1"] == {"changed": 1, "failures": 1}


def test_reach_plans() -> None:
    spec = cluster_spec(name="c", nodes=3, python="/py")
    nodes = [NodeInfo(f"n{i}", f"10.0.0.{i}", f"/w{i}") for i in range(3)]
    cluster = ClusterState(spec=spec, cluster_id="cid", nodes=nodes)
    every = plan_reach(cluster, nodes, 29500, all_pairs=True)
    for i, launch in enumerate(every.nodes):
        port, me, peers, expect = launch.argv[6:10]  # env PROGRAM=TEXT python -c LOADER reach ARGS
        assert (port, me, expect) == ("29500", f"10.0.0.{i}", "2")
        assert sorted(peers.split(",")) == sorted(f"10.0.0.{j}" for j in range(3) if j != i)
    head = plan_reach(cluster, nodes, 29500, all_pairs=False)
    assert [n.argv[8:10] for n in head.nodes] == [("", "2"), ("10.0.0.0", "0"), ("10.0.0.0", "0")]
    assert REACH_LINE.match("REACH 10.0.0.1 10.0.0.0 error: Connection refused").group(3) == "error: Connection refused"


def test_the_precheck_before_a_run_leaves_the_head_out() -> None:
    """The run's rendezvous store listens on the head's port by then: the other nodes connect to it,
    and the head runs no check (its store says itself when it cannot listen)."""
    spec = cluster_spec(name="c", nodes=3, python="/py")
    nodes = [NodeInfo(f"n{i}", f"10.0.0.{i}", f"/w{i}") for i in range(3)]
    cluster = ClusterState(spec=spec, cluster_id="cid", nodes=nodes)
    plan = head_reach_plan(cluster, nodes, 29500)
    assert [n.node for n in plan.nodes] == ["n1", "n2"] and plan.rdzv_endpoint == "10.0.0.0:29500"
    assert [n.argv[8:11] for n in plan.nodes] == [("10.0.0.0", "0", "10.0"), ("10.0.0.0", "0", "10.0")]
    assert head_reach_plan(cluster, [nodes[0], nodes[0]], 29500) is None  # nodes sharing a host: nothing to check
    ok = OutputLine("n1", None, "REACH 10.0.0.1 10.0.0.0 ok")
    refused = OutputLine("n2", None, "REACH 10.0.0.2 10.0.0.0 error: Connection refused")
    raise_if_head_unreachable(plan, [ok], "n0")  # every node reached it: some other failure
    with pytest.raises(DdpctlError, match=r"^nodes cannot reach the head node n0 on port 29500: n2 -> n0: error: Conn"):
        raise_if_head_unreachable(plan, [ok, refused], "n0")


def test_per_host_process_counts_from_the_inventory(tmp_path) -> None:
    """ddpctl_nproc_per_node per host (nodes with different GPU counts) -> each node's ranks in `run`."""
    from ddpctl.infra.providers.onprem import host_nproc
    from ddpctl.infra.runs.prepare import node_nprocs

    hosts = hosts_from_list(
        listing(
            {"ddp_nodes": ["a", "b", "c"]},
            {"a": {"ddpctl_nproc_per_node": 2}, "b": {"ddpctl_nproc_per_node": "1"}, "c": {}},
        )
    )
    assert [host_nproc(h) for h in hosts] == [2, 1, 0]
    bad = hosts_from_list(listing({"ddp_nodes": ["a"]}, {"a": {"ddpctl_nproc_per_node": "two"}}))
    with pytest.raises(UsageError, match="a: ddpctl_nproc_per_node='two' in the inventory is not a count"):
        host_nproc(bad[0])
    nodes = [NodeInfo(h.name, f"10.0.0.{i}", "/w", nproc=host_nproc(h)) for i, h in enumerate(hosts)]
    cluster = ClusterState(
        spec=cluster_spec(name="c", provider="onprem", inventory="h.ini", nodes=3, nproc_per_node=4),
        cluster_id="x",
        nodes=nodes,
    )
    assert node_nprocs(cluster, 3, None) == (2, 1, 4)  # c has no count of its own: the cluster's
    assert node_nprocs(cluster, 1, None) == (2,)


def test_wheel_installs_get_every_ansible_cfg_setting(tmp_path) -> None:
    """Installed from a wheel there is no ansible.cfg: its settings go in by environment, all of them."""
    import configparser

    from ddpctl.infra.hosts.ansible import ANSIBLE_CFG, settings_without_cfg

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ANSIBLE_CFG)
    env = settings_without_cfg(tmp_path)
    names = {
        "roles_path": "ROLES_PATH",
        "local_tmp": "LOCAL_TEMP",
        "control_path_dir": "SSH_CONTROL_PATH_DIR",
        "ssh_args": "SSH_ARGS",
        "pipelining": "PIPELINING",
    }
    for section in cfg.sections():
        for key, value in cfg.items(section):
            var = "ANSIBLE_" + names.get(key, key.upper())
            assert var in env, f"ansible.cfg [{section}] {key} has no environment equivalent"
            if key not in ("roles_path", "local_tmp", "control_path_dir"):  # paths differ by design
                assert env[var].lower() == value.lower(), (key, env[var], value)
    assert env["ANSIBLE_LOCAL_TEMP"].startswith(str(tmp_path)) and env["ANSIBLE_SSH_CONTROL_PATH_DIR"].startswith(
        str(tmp_path)
    )


def test_a_partial_play_keeps_the_recorded_gpu_count() -> None:
    """`configure --tags bundle` skips the nvidia role: its layout reports gpus -1, and the node keeps
    the count recorded before (a later sbatch script keeps its --gpus-per-node)."""
    from ddpctl.infra.hosts.site_play import record_nodes

    layout = {"workdir": "/w", "python": "/p/bin/python", "env_file": "/e", "bundle_dir": "/b"}
    nodes = [NodeInfo("node0", "10.0.0.1", "/w", gpus=4), NodeInfo("node1", "10.0.0.2", "/w", gpus=4)]
    report = PlayReport(
        facts={"node0": {"ddpctl_node": {**layout, "gpus": "-1"}}, "node1": {"ddpctl_node": {**layout, "gpus": 8}}}
    )
    assert [n.gpus for n in record_nodes(nodes, report, {})] == [4, 8]


def test_changes_come_back_as_diffs() -> None:
    """--diff: a changed task's diff (before/after text, Ansible's prepared text, a file's attributes)
    is kept per host and task; unchanged tasks' diffs are not."""
    report = PlayReport()
    handle = TaskLines(lambda line: None, report)
    handle({"event": "playbook_on_task_start", "event_data": {"task": "Write the env file"}})
    before = {"before": "NCCL_DEBUG=INFO\nA=1\n", "after": "NCCL_DEBUG=WARN\nA=1\n", "before_header": "/etc/env"}
    handle(
        {
            "event": "runner_on_ok",
            "event_data": {"host": "node0", "task": "Write the env file", "res": {"changed": True, "diff": [before]}},
        }
    )
    handle(
        {
            "event": "runner_on_ok",
            "event_data": {"host": "node1", "task": "Write the env file", "res": {"changed": False, "diff": [before]}},
        }
    )
    handle(
        {
            "event": "runner_on_ok",
            "event_data": {
                "host": "node1",
                "task": "Install",
                "res": {"changed": True, "diff": {"prepared": "+ pkg 1.0"}},
            },
        }
    )
    mode = {"before": {"path": "/x", "mode": "0644"}, "after": {"path": "/x", "mode": "0600"}}
    handle(
        {
            "event": "runner_on_ok",
            "event_data": {"host": "node2", "task": "Key", "res": {"changed": True, "diff": mode}},
        }
    )
    assert [(d.host, d.task) for d in report.diffs] == [
        ("node0", "Write the env file"),
        ("node1", "Install"),
        ("node2", "Key"),
    ]
    assert report.diffs[0].text.splitlines()[:5] == [
        "--- /etc/env",
        "+++ after",
        "@@ -1,2 +1,2 @@",
        "-NCCL_DEBUG=INFO",
        "+NCCL_DEBUG=WARN",
    ]
    assert report.diffs[1].text == "+ pkg 1.0"
    assert report.diffs[2].text == "mode: '0644' -> '0600'"


def test_check_and_diff_reach_ansible_as_flags() -> None:
    assert Play().cmdline() is None
    assert Play(check=True, diff=True).cmdline() == "--check --diff"
    assert Play(tags="bundle", diff=True).cmdline() == "--diff"
