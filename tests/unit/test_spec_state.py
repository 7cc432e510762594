"""Specs, the state store and the config file: validation and atomic state."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddpctl.config_file import load_default_map
from ddpctl.infra.model.env_vars import parse_env
from ddpctl.infra.model.errors import ClusterNotFound, UsageError
from ddpctl.infra.model.spec import RunSpec
from ddpctl.infra.model.state import (
    STATE_VERSION,
    ClusterPhase,
    ClusterState,
    DamagedState,
    LaunchKind,
    NodeInfo,
    Resource,
    ResourcePhase,
)
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.runs.jobs import resolve_job
from tests.support.specs import cluster_spec


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"nodes": 0}, "--nodes 0 is not allowed"),
        ({"nproc_per_node": -1}, "--nproc-per-node -1 is not allowed"),
        ({"provider": "gcp"}, "unknown provider 'gcp'"),
        ({"name": "Bad_Name"}, "invalid cluster name"),
        ({"port": 80}, "--port 80 is out of range"),
        ({"env": {"1X": "y"}}, "invalid environment variable name"),
        ({"name": "lab\n"}, "invalid cluster name"),
        ({"nodes": 1025}, "--nodes 1025 is too many: at most 1024"),
        ({"nproc_per_node": True}, "is not a whole number"),
    ],
)
def test_cluster_spec_refuses(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        cluster_spec(**kwargs)


def test_run_spec_refuses() -> None:
    with pytest.raises(UsageError, match="--max-restarts -1 is negative"):
        RunSpec(job="m", max_restarts=-1)
    with pytest.raises(UsageError, match="invalid --run-id"):
        RunSpec(job="m", run_id="../x")


def test_parse_env() -> None:
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(UsageError, match="is for `ddpctl run -e A`"):
        parse_env(["A"])  # up: a secret is run's
    with pytest.raises(UsageError, match="not KEY=VALUE"):
        parse_env(["=x"])


def test_resolve_job(tmp_path: Path) -> None:
    assert resolve_job("mnist").script.name == "mnist.py"
    assert resolve_job("mnist").script.is_file()
    assert resolve_job("mingpt").script.is_file()
    assert resolve_job("message-passing").script.is_file()
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    job = resolve_job(str(script))
    assert (job.name, job.script, job.bundled) == ("train", script, False)
    with pytest.raises(UsageError, match="does not exist"):
        resolve_job(str(tmp_path / "missing.py"))
    with pytest.raises(UsageError, match="unknown job 'resnet'"):
        resolve_job("resnet")


def state(name: str = "c") -> ClusterState:
    return ClusterState(
        spec=cluster_spec(name=name, nodes=2, env={"A": "1"}),
        cluster_id="cid",
        nodes=[NodeInfo("node0", "127.0.0.1", "/w0"), NodeInfo("node1", "127.0.0.1", "/w1")],
        resources=[Resource("dir", "/w0", "created")],
    )


def test_state_round_trip_and_mode(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "home")
    saved = state()
    store.save(saved)
    assert store.names() == ["c"]
    assert store.load("c") == saved
    path = store.path("c")
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["version"] == STATE_VERSION == 4
    assert not list(path.parent.glob(".*.tmp"))  # no temp file left behind
    store.delete("c")
    with pytest.raises(ClusterNotFound, match="no cluster named 'c'"):
        store.load("c")


def test_statuses_and_the_launcher_are_typed_words(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "home")
    saved = state()
    saved.status, saved.launcher = ClusterPhase.CONFIGURING, LaunchKind.SBATCH
    saved.resources[0].status = ResourcePhase.CREATED
    store.save(saved)
    doc = json.loads(store.path("c").read_text())
    assert (doc["status"], doc["launcher"], doc["resources"][0]["status"]) == ("configuring", "sbatch", "created")
    loaded = store.load("c")
    assert loaded.status is ClusterPhase.CONFIGURING and loaded.launcher is LaunchKind.SBATCH
    assert loaded.resources[0].status is ResourcePhase.CREATED
    assert f"{loaded.status}" == str(loaded.status) == "configuring"  # shown as the word, as in the file


@pytest.mark.parametrize("where", ["status", "launcher", "resource"])
def test_a_state_file_with_an_unknown_word_is_damaged(tmp_path: Path, where: str) -> None:
    store = StateStore(tmp_path / "home")
    store.save(state())
    doc = json.loads(store.path("c").read_text())
    if where == "resource":
        doc["resources"][0]["status"] = "half-made"
    else:
        doc[where] = "half-made"
    store.path("c").write_text(json.dumps(doc))
    with pytest.raises(DamagedState, match="'half-made', not one of"):
        store.load("c")


def test_a_node_reached_over_ssh_is_a_typed_host_and_version_1_files_still_load(tmp_path: Path) -> None:
    from ddpctl.infra.model.host import Host

    store = StateStore(tmp_path)
    saved = state()
    saved.nodes[1] = replace(saved.nodes[1], ssh=Host("node1", "10.0.0.2", user="ubuntu", key_file="/k"))
    store.save(saved)
    assert store.load("c").nodes[1].ssh == Host("node1", "10.0.0.2", user="ubuntu", key_file="/k")
    old = json.loads(store.path("c").read_text())
    old["version"] = 1
    old["nodes"][0]["ssh"] = {}  # what version 1 wrote for a local node
    store.path("c").write_text(json.dumps(old))
    loaded = store.load("c")
    assert loaded.nodes[0].ssh is None and loaded.nodes[1].ssh.user == "ubuntu"


def test_resource_details_are_typed_records_and_version_2_details_still_read(tmp_path: Path) -> None:
    from ddpctl.infra.providers.aws.details import (
        AwsIdDetail,
        InstancesDetail,
        InternetGatewayDetail,
        VpcDetail,
        aws_id,
    )
    from ddpctl.infra.providers.aws.plan import plan_from_spec
    from ddpctl.infra.providers.pcluster.config import Settings
    from ddpctl.infra.providers.pcluster.details import ClusterDetail, ConfigDetail

    spec = cluster_spec(
        name="c", provider="aws", nodes=2, options={"region": "us-east-1", "instance_type": "p3.2xlarge"}
    )
    planned = {r.kind: r for r in plan_from_spec(spec, "cid", "/h/clusters/c").resources()}
    nodes = planned["instances"]
    assert nodes.detail == InstancesDetail(count=2, instance_type="p3.2xlarge").to_dict()  # every field, written once
    assert aws_id(planned["vpc"]) == "" and VpcDetail.of(planned["vpc"]).cidr == "10.77.0.0/16"
    replace(InstancesDetail.of(nodes), ids=("i-1", "i-2"), nodes={"node0": "i-1"}).put(nodes)
    assert InstancesDetail.of(nodes).ids == ("i-1", "i-2") and nodes.detail["ids"] == ["i-1", "i-2"]  # JSON's lists
    with pytest.raises(ValueError, match="a vpc resource read as a instances record"):
        InstancesDetail.of(planned["vpc"])

    # What version 2 wrote: a detail held only the fields known so far (and keys no record names stay).
    v2 = [
        Resource("internet-gateway", "g", "created", {"aws_id": "igw-1", "vpc": "vpc-1"}),
        Resource("placement-group", "pg", "skipped", {"strategy": "cluster", "reason": "unsupported"}),
        Resource("instances", "n", "created", {"count": 2, "ids": ["i-1"], "zones": ["us-east-1a"], "old": 1}),
        Resource("config", "/c.yaml", "planned", {"settings": {"head_instance_type": "t3.large"}}),
        Resource("cluster", "ddpctl-c", "planned", {"region": "us-east-1", "create_called": True}),
    ]
    store = StateStore(tmp_path)
    doc = {**ClusterState(spec=spec, cluster_id="cid", resources=v2).to_dict(), "version": 2}
    store.private_dirs()
    store.path("c").write_text(json.dumps(doc))
    igw, group, inst, config, cluster = store.load("c").resources
    assert InternetGatewayDetail.of(igw) == InternetGatewayDetail(aws_id="igw-1", vpc="vpc-1")
    assert AwsIdDetail.of(group) == AwsIdDetail() and aws_id(group) == ""  # no id: a kind without one
    read = InstancesDetail.of(inst)
    assert read.ids == ("i-1",) and read.zones == ("us-east-1a",) and read.nodes == {} and read.client_token == ""
    replace(read, ids=()).put(inst)
    assert inst.detail["old"] == 1 and inst.detail["ids"] == [] and inst.detail["nodes"] == {}
    assert ConfigDetail.of(config).plan_settings == Settings(head_instance_type="t3.large")
    assert ClusterDetail.of(cluster).create_called and ClusterDetail.of(cluster).status == ""


#: The AWS keys every version-2 spec had at its top level, whatever its provider, at their empty values.
V2_AWS_KEYS = {
    **dict.fromkeys(("region", "az", "instance_type", "ami", "ssh_cidr", "vpc_id", "subnet_id", "ssh_user"), ""),
    **{"volume_gb": 0, "spot": False, "private_ip": False, "configure": True, "iam_instance_profile": "", "tags": {}},
}


@pytest.mark.parametrize("provider", ["local", "aws", "pcluster"])
def test_version_2_files_load_with_the_providers_options_moved(tmp_path: Path, provider: str) -> None:
    """Version 2 kept every provider's options as keys of the spec; version 4 keeps the cluster's
    provider's in ``spec.options`` (another provider's, all empty, are dropped)."""
    store = StateStore(tmp_path)
    spec = {"name": "c", "provider": provider, "nodes": 2, "nproc_per_node": 1, "port": None, "env": {}}
    spec |= {"python": "/usr/bin/python3", "inventory": "", "playbook_vars": {}, **V2_AWS_KEYS}
    if provider != "local":
        spec |= {"region": "eu-west-1", "spot": True, "tags": {"team": "ml"}}
    doc = {"version": 2, "spec": spec, "cluster_id": "cid", "status": "up", "nodes": [], "resources": []}
    store.clusters_dir.mkdir(parents=True)
    store.path("c").write_text(json.dumps(doc))
    loaded = store.load("c").spec
    if provider == "local":
        assert loaded.options == {}
    else:
        assert loaded.options["region"] == "eu-west-1" and loaded.options["spot"] is True
        assert loaded.options["tags"] == {"team": "ml"} and loaded.options["configure"] is True
        assert ("iam_instance_profile" in loaded.options) == (provider == "aws")
    assert store.salvage("c").reason == "readable"
    store.save(store.load("c"))  # written back as version 4, read back the same
    assert json.loads(store.path("c").read_text())["version"] == STATE_VERSION == 4 and store.load("c").spec == loaded


def test_state_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash while writing leaves the previous state whole."""
    store = StateStore(tmp_path)
    store.save(state())
    before = store.path("c").read_text()

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr("os.fsync", boom)
    s = state()
    s.status = "up"
    with pytest.raises(OSError):
        store.save(s)
    assert store.path("c").read_text() == before
    assert not list(store.clusters_dir.glob(".*.tmp"))


def test_unwritable_home(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="is not writable"):
        StateStore(blocker / "home").check_writable()
    StateStore(tmp_path / "new" / "home").check_writable()  # creatable is fine
    assert not (tmp_path / "new").exists()  # and checking creates nothing


def test_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "ddpctl.toml"
    cfg.write_text('[cluster]\nnodes = 3\nname = "lab"\n[cluster.env]\nNCCL_DEBUG = "INFO"\n[run]\nmax_restarts = 2\n')
    dm = load_default_map(cfg)
    assert dm["up"] == {"nodes": 3, "name": "lab", "env": ["NCCL_DEBUG=INFO"]}
    assert dm["run"] == {"nodes": 3, "name": "lab", "env": ["NCCL_DEBUG=INFO"], "max_restarts": 2}
    assert dm["down"] == {"name": "lab"}
    cfg.write_text("[cluster]\nnodez = 3\n")
    with pytest.raises(UsageError, match=r"unknown key\(s\) \['nodez'\]"):
        load_default_map(cfg).get("up")  # raised as `up` starts (test_a_bad_run_section...)
    cfg.write_text("[clusters]\n")
    with pytest.raises(UsageError, match="unknown section"):
        load_default_map(cfg)
    cfg.write_text("[cluster\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_default_map(cfg)
    cfg.write_text("[cluster]\nnodes = 2.7\n")  # refused, not coerced to 2
    with pytest.raises(UsageError, match=r"\[cluster\] nodes in .* is a decimal number \(2.7\): give an integer"):
        load_default_map(cfg).get("up")
    cfg.write_text('[run]\nnodes = "2:3"\nnproc_per_node = "2,1"\n[cluster.env]\nOMP_NUM_THREADS = 4\n')
    dm = load_default_map(cfg)  # elastic and per-node counts are text; numbers in env tables become text
    assert dm["run"] == {"nodes": "2:3", "nproc_per_node": "2,1", "env": ["OMP_NUM_THREADS=4"]}


def test_a_bad_run_section_fails_only_the_commands_that_read_it(tmp_path: Path) -> None:
    """`printf '[run]\\nepochs = 3\\n' > ddpctl.toml; ddpctl down` must still take clusters down."""
    path = tmp_path / "ddpctl.toml"
    path.write_text('[cluster]\nname = "c1"\n\n[run]\nepochs = 3\n')
    defaults = load_default_map(path)
    assert defaults.get("down") == {"name": "c1"} and defaults.get("status") == {"name": "c1"}
    with pytest.raises(UsageError, match=r"unknown key\(s\) \['epochs'\] in \[run\]"):
        defaults.get("run")
    path.write_text("[cluster]\nnodes = 2.5\n")
    with pytest.raises(UsageError, match="nodes"):
        load_default_map(path).get("down")  # down reads [cluster]: its mistake is down's too
