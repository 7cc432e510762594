"""The head node's own state home and ddpctl's code for it (infra/providers/aws/head_home.py): what
goes there from this machine, and the SSH files the head writes for itself. On the twin, the head
replacing a node with them: tests/integration/test_spot_twin.py."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

from ddpctl.infra.model.host import Host
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers.aws import head_home
from ddpctl.infra.providers.aws.configure import Launched, write_files
from ddpctl.infra.providers.aws.defaults import with_defaults
from ddpctl.infra.providers.aws.details import InstancesDetail
from tests.support.specs import cluster_spec

HOME_ID = "0123456789abcdef"


def _state(**options: object) -> ClusterState:
    def node(i: int) -> NodeInfo:
        ssh = Host(name=f"node{i}", address=f"54.0.0.{i}", user="ubuntu", key_file="/laptop/id", ssh_config="/l/c")
        return NodeInfo(name=f"node{i}", host=f"10.0.0.{i}", workdir="/w", ssh=ssh)

    inst = InstancesDetail(nodes={f"node{i}": f"i-{i}" for i in range(3)}).resource("c-nodes")
    inst.status = "created"
    spec = cluster_spec(name="c", provider="aws", nodes=3, options={"region": "us-east-1", "spot": True, **options})
    return ClusterState(spec=with_defaults(spec), cluster_id="x", nodes=[node(i) for i in range(3)], resources=[inst])


def _home(tmp_path: Path) -> StateStore:
    store = StateStore(tmp_path / "laptop")
    store.home.mkdir()
    store.home_id_path.write_text(HOME_ID + "\n")
    cluster_dir = store.cluster_dir("c")
    (cluster_dir / "keys").mkdir(parents=True)
    (cluster_dir / "id_ed25519").write_text("CLUSTER KEY\n")
    (cluster_dir / "id_ed25519.pub").write_text("ssh-ed25519 AAAA c\n")
    (cluster_dir / "keys" / "ddpctl_cluster_key").write_text("MESH KEY\n")
    (cluster_dir / "known_hosts").write_text("".join(f"54.0.0.{i},10.0.0.{i} ssh-ed25519 K{i}\n" for i in range(3)))
    (cluster_dir / "other.log").write_text("not sent\n")
    store.save(ClusterState(spec=cluster_spec(name="other", provider="local", nodes=1), cluster_id="y"))
    (store.home / "runs" / "r1").mkdir(parents=True)
    return store


def test_the_head_gets_this_cluster_alone_with_its_keys_and_this_homes_id(tmp_path: Path) -> None:
    store = _home(tmp_path)
    sent = head_home.files(_state(), store)
    assert sorted(sent) == [
        "clusters/c.json",
        "clusters/c/id_ed25519",
        "clusters/c/id_ed25519.pub",
        "clusters/c/keys/ddpctl_cluster_key",
        "clusters/c/known_hosts",
        "head-home",  # marks it the head's: the provider works from it there (``on_head``)
        "home-id",
    ]
    assert all(mode == 0o600 for _, mode in sent.values())
    assert sent["home-id"][0] == f"{HOME_ID}\n".encode()  # the head's home answers with it: ``ours`` holds
    seen = ClusterState.from_dict(json.loads(sent["clusters/c.json"][0]))
    assert seen.spec.options["private_ip"] is True  # the head reaches the nodes by their private addresses
    assert _state().spec.options["private_ip"] is False  # this machine's state is left as it is


def test_the_head_settles_its_ssh_files_for_its_own_paths(tmp_path: Path) -> None:
    store = _home(tmp_path)
    head = StateStore(tmp_path / "head")
    for path, (data, _) in head_home.files(_state(head_instance_profile="ddpctl-head"), store).items():
        (head.home / path).parent.mkdir(parents=True, exist_ok=True)
        (head.home / path).write_bytes(data)
    assert head_home.on_head(head) and not head_home.on_head(store)
    state = head_home.settle(head, "c")
    cluster_dir = head.cluster_dir("c")
    assert [n.ssh.address for n in state.nodes if n.ssh] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert {n.ssh.key_file for n in state.nodes if n.ssh} == {str(cluster_dir / "id_ed25519")}
    assert head.load("c").nodes[1].ssh == state.nodes[1].ssh  # saved
    inventory = (cluster_dir / "inventory.ini").read_text()
    assert "node0 ansible_host=10.0.0.0 ddpctl_node_address=10.0.0.0 head_controller_enabled=true\n" in inventory
    assert "node1 ansible_host=10.0.0.1 ddpctl_node_address=10.0.0.1\n" in inventory
    assert str(cluster_dir / "ssh_config") in inventory
    assert (cluster_dir / "known_hosts").read_text().splitlines() == [f"10.0.0.{i} ssh-ed25519 K{i}" for i in range(3)]


def test_only_the_head_of_a_cluster_with_a_head_profile_gets_ddpctls_environment(tmp_path: Path) -> None:
    nodes = [Launched(f"node{i}", f"i-{i}", f"10.0.0.{i}", "", "") for i in range(2)]
    files = write_files(tmp_path, nodes, user="u", key_path="k", private=True, host_keys={}, head_controller=True)
    rows = files.inventory.read_text().splitlines()
    assert [r for r in rows if "head_controller_enabled" in r] == [
        "node0 ansible_host=10.0.0.0 ddpctl_node_address=10.0.0.0 head_controller_enabled=true"
    ]
    files = write_files(tmp_path, nodes, user="u", key_path="k", private=True, host_keys={})
    assert "head_controller_enabled" not in files.inventory.read_text()


def test_ddpctls_code_for_the_head_is_laid_out_as_a_wheel_and_named_by_its_content() -> None:
    digest, archive = head_home.code()
    with tarfile.open(fileobj=io.BytesIO(archive)) as unpacked:
        names = unpacked.getnames()
    for needed in (
        "ddpctl/__init__.py",
        "ddpctl/infra/runs/head_replace.py",
        "ddpctl/playbooks/site.yml",
        "ddpctl/playbooks/roles/head_controller/tasks/main.yml",
        "ddpctl/training/mnist.py",
    ):
        assert needed in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith("ddpctl/") and n.split("/")[1] == "main.py"]  # no CLI
    assert head_home.code()[0] == digest and len(digest) == 12


def test_the_head_replaces_nodes_only_with_its_profile_and_its_environment(tmp_path: Path) -> None:
    from ddpctl.infra.providers.aws.provider import PROVIDER

    store = _home(tmp_path)
    with_env = _state(head_instance_profile="ddpctl-head")
    with_env.nodes[0] = replace(with_env.nodes[0], controller="/opt/ddpctl/controller/bin/python")
    assert PROVIDER.head_replacer(with_env, store) is not None
    without_env = _state(head_instance_profile="ddpctl-head")  # configured before the role, or --no-configure
    assert PROVIDER.head_replacer(without_env, store) is None
    no_profile = _state()
    no_profile.nodes[0] = with_env.nodes[0]
    assert PROVIDER.head_replacer(no_profile, store) is None  # the head has no credentials of its own
    on_demand = _state(head_instance_profile="ddpctl-head", spot=False)
    on_demand.nodes[0] = with_env.nodes[0]
    assert PROVIDER.head_replacer(on_demand, store) is None  # nothing to replace


def test_the_heads_command_line_runs_the_shipped_code_with_the_roles_python(tmp_path: Path) -> None:
    store = _home(tmp_path)
    state = _state(head_instance_profile="ddpctl-head")
    state.nodes[0] = replace(state.nodes[0], controller="/opt/ddpctl/controller/bin/python")
    store.save(state)
    shipped: list[str] = []

    class Conn:  # what ``ship`` asks of a Fabric connection: nothing is on the head yet
        def run(self, line: str, **kw):
            shipped.append(line)
            return type("Done", (), {"ok": not line.startswith("test -d")})()

        def put(self, data, path: str) -> None:
            shipped.append(f"put {path}")

    ship_to = head_home.replacer(state, store)
    assert ship_to is not None
    argv = ship_to(Conn(), "/opt/ddpctl/work/head-home")
    digest = head_home.code()[0]
    assert argv == [
        "env",
        f"PYTHONPATH=/opt/ddpctl/work/head-home/code-{digest}",
        "/opt/ddpctl/controller/bin/python",
        "-m",
        "ddpctl.infra.runs.head_replace",
        "/opt/ddpctl/work/head-home/home",
        "c",
    ]
    assert "put /opt/ddpctl/work/head-home/home.tar.gz" in shipped
    assert f"put /opt/ddpctl/work/head-home/code-{digest}.tar.gz" in shipped
