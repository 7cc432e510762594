"""Spot instances taken back, the plan (infra/providers/aws/spot_plan.py): which lost nodes EC2 took
back, the replacement's request, the record and the SSH files' keys. Pure: no AWS, no processes.
The replacement itself runs on the EC2 twin (tests/integration/test_spot_twin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.infra.model.errors import DdpctlError
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.state import ClusterState, NodeInfo, Resource
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers.aws.configure import Launched
from ddpctl.infra.providers.aws.details import InstancesDetail, SubnetDetail
from ddpctl.infra.providers.aws.plan import plan_from_spec
from ddpctl.infra.providers.aws.spot_plan import (
    Lost,
    configured,
    known_host_keys,
    launched_nodes,
    replaced,
    replacement_request,
    replacement_token,
    subnet_of,
    taken_back,
    unfinished,
    with_nodes,
)
from ddpctl.infra.providers.base import Provider
from ddpctl.infra.providers.local import LocalProvider
from tests.support.specs import cluster_spec

NODES = {"node0": "i-0", "node1": "i-1", "node2": "i-2"}


def test_only_nodes_whose_instance_ec2_took_back_are_replaced() -> None:
    states = {"i-0": "terminated", "i-1": "running", "i-2": "shutting-down"}
    lost = taken_back(NODES, ["node0", "node1", "node2"], states, head="node0")
    assert lost == [Lost("node2", "i-2", "shutting-down")]  # the head never; a running node is tried again
    assert lost[0].why == "its instance i-2 is shutting-down" and not lost[0].terminate


@pytest.mark.parametrize(
    ("state", "lost", "terminate"),
    [
        ("terminated", True, False),
        ("shutting-down", True, False),
        ("stopping", True, True),  # ours, still billed for its volume: terminated first
        ("stopped", True, True),
        ("", True, False),  # EC2 no longer knows it
        ("running", False, False),
        ("pending", False, False),
    ],
)
def test_states_of_an_instance_taken_back(state: str, lost: bool, terminate: bool) -> None:
    states = {"i-1": state} if state else {}
    found = taken_back(NODES, ["node1"], states, head="node0")
    assert bool(found) is lost
    if found:
        assert found[0].terminate is terminate
        assert ("no longer knows" in found[0].why) is (state == "")


def test_an_unhealthy_node_still_running_is_replaced_and_its_instance_terminated() -> None:
    """Health is asked only of the machines EC2 did not take back (and never of the head): a running
    unhealthy one is replaced, its instance terminated first; a healthy one ("") is started again."""
    states = {"i-0": "running", "i-1": "running", "i-2": "terminated"}
    asked: list[str] = []

    def unhealthy(node: str) -> str:
        asked.append(node)
        return "GPU 1: 4 uncorrected ECC error(s) since the driver loaded" if node == "node1" else ""

    lost = taken_back(NODES, ["node0", "node1", "node2"], states, head="node0", unhealthy=unhealthy, owned={"i-1"})
    assert asked == ["node1"]
    assert lost == [
        Lost("node1", "i-1", "running", unhealthy="GPU 1: 4 uncorrected ECC error(s) since the driver loaded"),
        Lost("node2", "i-2", "terminated"),
    ]
    assert lost[0].terminate and lost[0].why == "unhealthy: GPU 1: 4 uncorrected ECC error(s) since the driver loaded"
    assert (
        taken_back(NODES, ["node1"], {"i-1": "running"}, head="node0", unhealthy=lambda node: "", owned={"i-1"}) == []
    )
    # an instance not proven this cluster's (a damaged or edited state names another): never terminated
    assert taken_back(NODES, ["node1"], {"i-1": "running"}, head="node0", unhealthy=lambda node: "sick") == []


def test_an_instance_is_ours_by_its_cluster_id_and_home_tags(tmp_path: Path) -> None:
    from ddpctl.infra.providers.aws.spot_plan import ours

    plan = _plan(tmp_path)
    tags = [{"Key": "ddpctl:cluster-id", "Value": plan.cluster_id}, {"Key": "ddpctl:home", "Value": plan.home_id}]
    assert ours({"InstanceId": "i-1", "Tags": tags}, plan)
    assert not ours({"InstanceId": "i-1", "Tags": tags[:1]}, plan)  # another home's, or none
    assert not ours({"InstanceId": "i-1", "Tags": [{"Key": "ddpctl:cluster-id", "Value": "x"}, tags[1]]}, plan)
    assert not ours({"InstanceId": "i-1"}, plan)


def test_a_node_without_a_recorded_instance_is_not_replaced() -> None:
    assert taken_back({"node0": "i-0"}, ["node1"], {}, head="node0") == []


def _plan(tmp_path: Path, **options: object):
    spec = cluster_spec(name="c", provider="aws", nodes=3, options={"region": "us-east-1", "spot": True, **options})
    from ddpctl.infra.providers.aws.defaults import with_defaults

    return plan_from_spec(with_defaults(spec), "abc123def456", str(tmp_path / "c"), "0123456789abcdef")


def test_the_replacement_is_ups_request_for_one_instance(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    detail = InstancesDetail(count=3, ami="ami-1", az="us-east-1b", efa_interfaces=0, nodes=NODES)
    lost = Lost("node2", "i-2", "terminated")
    request = replacement_request(
        plan, detail, root_device="/dev/sda1", subnet_id="subnet-9", group_id="sg-9", placement_group="pg", lost=lost
    )
    assert request["MinCount"] == request["MaxCount"] == 1
    assert request["ImageId"] == "ami-1" and request["Placement"] == {
        "AvailabilityZone": "us-east-1b",
        "GroupName": "pg",
    }
    assert request["NetworkInterfaces"][0]["SubnetId"] == "subnet-9" and request["NetworkInterfaces"][0]["Groups"] == [
        "sg-9"
    ]
    assert request["InstanceMarketOptions"]["MarketType"] == "spot"
    assert request["MetadataOptions"]["HttpTokens"] == "required"
    assert all(m["Ebs"]["Encrypted"] for m in request["BlockDeviceMappings"])
    tags = {t["Key"]: t["Value"] for t in request["TagSpecifications"][0]["Tags"]}
    assert tags["ddpctl:cluster"] == "c" and tags["ddpctl:home"] == "0123456789abcdef"  # down finds it by tag
    assert request["ClientToken"] == replacement_token("abc123def456", "node2", "i-2")
    assert "UserData" not in request and "IamInstanceProfile" not in request


def test_the_replacement_has_the_efa_interfaces_recorded_at_up(tmp_path: Path) -> None:
    plan = _plan(tmp_path, private_ip=True)
    detail = InstancesDetail(ami="ami-1", az="us-east-1a", efa_interfaces=4)
    request = replacement_request(
        plan,
        detail,
        root_device="/dev/sda1",
        subnet_id="s",
        group_id="g",
        placement_group=None,
        lost=Lost("node1", "i-1", ""),
    )
    assert [i["InterfaceType"] for i in request["NetworkInterfaces"]] == ["efa", "efa-only", "efa-only", "efa-only"]
    assert "GroupName" not in request["Placement"]


def test_one_token_per_loss() -> None:
    one = replacement_token("abc123def456", "node2", "i-0123456789abcdef0")
    assert one == replacement_token("abc123def456", "node2", "i-0123456789abcdef0")  # a retry: the same launch
    assert one != replacement_token("abc123def456", "node2", "i-0fedcba9876543210")  # its replacement lost too
    assert len(one) <= 64


def test_the_subnet_is_the_given_one_or_ddpctls_in_the_nodes_zone() -> None:
    resources = [
        _created(SubnetDetail(aws_id="subnet-a", az="us-east-1a").resource("c-subnet-0")),
        _created(SubnetDetail(aws_id="subnet-b", az="us-east-1b").resource("c-subnet-1")),
        SubnetDetail(aws_id="", az="us-east-1c").resource("c-subnet-2"),  # planned: not made
    ]
    detail = InstancesDetail(az="us-east-1b")
    assert subnet_of(resources, detail, "") == "subnet-b"
    assert subnet_of(resources, detail, "subnet-given") == "subnet-given"
    with pytest.raises(DdpctlError, match="no subnet in us-east-1c"):
        subnet_of(resources, InstancesDetail(az="us-east-1c"), "")


def test_the_record_names_the_new_instance() -> None:
    detail = InstancesDetail(ids=("i-0", "i-1", "i-2"), nodes=NODES, replacing={"node2": "tok"})
    after = replaced(detail, Lost("node2", "i-2", "terminated"), "i-9")
    assert after.ids == ("i-0", "i-1", "i-9") and after.nodes == {**NODES, "node2": "i-9"}
    assert after.replacing == {"node2": "tok"}  # until it is configured
    assert replaced(after, Lost("node2", "i-2", "terminated"), "i-9").ids == after.ids  # a retry: once
    assert configured(after, ["node2"]).replacing == {}


def test_a_replacement_launched_but_not_configured_is_finished() -> None:
    detail = InstancesDetail(nodes={**NODES, "node2": "i-9"}, replacing={"node2": "tok"})
    assert unfinished(detail, ["node2"], []) == ["node2"]  # its instance runs: configured again
    assert unfinished(detail, ["node1"], []) == []
    lost_again = [Lost("node2", "i-9", "terminated")]  # the replacement taken back in its turn: a new launch
    assert unfinished(detail, ["node2"], lost_again) == []


def _created(res: Resource) -> Resource:
    res.status = "created"
    return res


def _state() -> ClusterState:
    def node(i: int) -> NodeInfo:
        ssh = Host(name=f"node{i}", address=f"54.0.0.{i}", user="ubuntu")
        return NodeInfo(name=f"node{i}", host=f"10.0.0.{i}", workdir="/w", ssh=ssh)

    inst = _created(InstancesDetail(nodes=NODES).resource("c-nodes"))
    return ClusterState(
        spec=cluster_spec(name="c", provider="aws", nodes=3),
        cluster_id="x",
        nodes=[node(i) for i in range(3)],
        resources=[inst],
    )


def test_the_ssh_files_list_every_node_with_the_new_one_in_place() -> None:
    new = Launched("node2", "i-9", "10.0.0.9", "54.0.0.9", "us-east-1a")
    launched = launched_nodes(_state(), False, {"node2": new})
    assert [(n.name, n.instance_id, n.address(False)) for n in launched] == [
        ("node0", "i-0", "54.0.0.0"),
        ("node1", "i-1", "54.0.0.1"),
        ("node2", "i-9", "54.0.0.9"),
    ]
    private = launched_nodes(_state(), True, {})
    assert [n.address(True) for n in private] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]


def test_the_other_nodes_keep_their_host_keys() -> None:
    known = "54.0.0.0,10.0.0.0 ssh-ed25519 AAAA0\n54.0.0.0,10.0.0.0 ssh-rsa BBBB0\n54.0.0.2,10.0.0.2 ssh-ed25519 OLD\n"
    launched = launched_nodes(_state(), False, {"node2": Launched("node2", "i-9", "10.0.0.9", "54.0.0.9", "")})
    assert known_host_keys(known, launched, False) == {"node0": ["ssh-ed25519 AAAA0", "ssh-rsa BBBB0"]}


def test_the_new_node_takes_the_old_ones_place() -> None:
    nodes = _state().nodes
    new = NodeInfo(name="node1", host="10.0.0.9", workdir="/w")
    assert [n.host for n in with_nodes(nodes, [new])] == ["10.0.0.0", "10.0.0.9", "10.0.0.2"]


def test_providers_replace_nothing_by_default(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    state = ClusterState(spec=cluster_spec(name="c", provider="local", nodes=2), cluster_id="x")
    assert LocalProvider().replace_lost_nodes(state, store, ["node1"], print) is None
    assert Provider.replace_lost_nodes is LocalProvider.replace_lost_nodes


def test_an_on_demand_aws_cluster_replaces_nothing(tmp_path: Path) -> None:
    from ddpctl.infra.providers.aws.provider import AwsProvider

    store = StateStore(tmp_path)
    spec = cluster_spec(name="c", provider="aws", nodes=2, options={"region": "us-east-1"})
    state = AwsProvider(caller_address=lambda: "198.51.100.4").plan(spec, store)
    assert AwsProvider().replace_lost_nodes(state, store, ["node1"], print) is None  # no AWS call either
