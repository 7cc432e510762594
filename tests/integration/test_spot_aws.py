"""Spot that recovers, against moto's EC2 server (no hosts behind the instances): the replacement's
launch where the node was, and a failure between that launch and the state's record of it, after
which `down` still leaves nothing (the new instance is found by its tags). The whole path, with
site.yml on the new instance and the run taking it back, is tests/integration/test_spot_twin.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.infra.lifecycle import clusters
from ddpctl.infra.model.errors import DdpctlError
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers.aws import AwsProvider
from ddpctl.infra.providers.aws.details import InstancesDetail
from ddpctl.infra.providers.aws.steps import only
from tests.support.moto import Moto
from tests.support.specs import cluster_spec


def test_a_failure_after_the_replacements_launch_leaves_nothing_after_down(
    moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in moto.env(tmp_path / "home", tmp_path).items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    baseline = moto.inventory()
    provider = AwsProvider(caller_address=lambda: "198.51.100.4")
    store = StateStore(tmp_path / "home")
    spec = cluster_spec(name="s", provider="aws", nodes=3, options={"spot": True, "configure": False})
    clusters.up(provider, provider.plan(spec, store), store, lambda _: None)
    state = store.load("s")
    old = InstancesDetail.of(only(state, "instances")).nodes
    assert provider.replace_lost_nodes(state, store, ["node1", "node2"], print) is None  # all running
    moto.ec2.terminate_instances(InstanceIds=[old["node2"]])  # EC2 takes node2 back
    monkeypatch.setenv("DDPCTL_FAULT", "fail-after:replacement")
    messages: list[str] = []
    with pytest.raises(DdpctlError, match="injected failure after replacement"):
        provider.replace_lost_nodes(state, store, ["node2"], messages.append)
    assert messages == [
        f"node2: EC2 took its spot instance back (its instance {old['node2']} is terminated): "
        "launching a new one in its place"
    ]
    recorded = InstancesDetail.of(only(store.load("s"), "instances"))
    assert list(recorded.replacing) == ["node2"] and recorded.nodes == old  # under way, recorded first
    [new] = [i for i in moto.alive_instances() if i["InstanceId"] not in old.values()]
    [old2] = moto.ec2.describe_instances(InstanceIds=[old["node2"]])["Reservations"][0]["Instances"]
    assert (
        new["SubnetId"] == old2["SubnetId"]
        and new["Placement"]["AvailabilityZone"] == old2["Placement"]["AvailabilityZone"]
    )
    assert new["InstanceLifecycle"] == "spot" and new["ImageId"] == old2["ImageId"]
    assert new["MetadataOptions"]["HttpTokens"] == "required"
    monkeypatch.delenv("DDPCTL_FAULT")
    provider.down(store.load("s"), store, lambda _: None)
    assert moto.inventory() == baseline
