"""Cloud resources are owned by one state home (issue 26): two state homes (two users, two CI
jobs) with one AWS account, on a moto server.

Each home has an id of its own (``StateStore.home_id``, the file ``home-id``), and everything the
aws provider makes carries it as the tag ``ddpctl:home``. The cluster's key pair is named for the
cluster alone, so importing it is a conditional create only one ``up`` of a name can win in a
region. ``down`` (by state, by tag with ``--region``) deletes only its own home's resources and
names the other home's in one line.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, start_ddpctl, tree
from tests.support.moto import REGION, SSH_CIDR, Moto
from tests.support.specs import cluster_spec

UP = ("up", "--provider", "aws", "--name", "t", "--ssh-cidr", SSH_CIDR, "--yes", "--no-configure")


class Home:
    """One state home's ddpctl, against the shared moto server."""

    def __init__(self, moto: Moto, path: Path, tmp: Path) -> None:
        self.path, self.env = path, moto.env(path, tmp)

    def run(self, *args: str, fault: str = "") -> subprocess.CompletedProcess:
        env = {**self.env, **({"DDPCTL_FAULT": fault} if fault else {})}
        return ddpctl(*args, env=env, timeout=300)

    def ok(self, *args: str) -> subprocess.CompletedProcess:
        result = self.run(*args)
        assert result.returncode == 0, result.stderr
        return result

    @property
    def id(self) -> str:
        return (self.path / "home-id").read_text().strip()


@pytest.fixture
def homes(moto: Moto, tmp_path: Path) -> tuple[Home, Home]:
    return Home(moto, tmp_path / "home-a", tmp_path), Home(moto, tmp_path / "home-b", tmp_path)


def tagged_homes(moto: Moto) -> dict[str, set[str]]:
    """Every resource carrying ddpctl:cluster t, by the ddpctl:home it carries."""
    ec2 = moto.ec2
    listed = [
        ([i for i in moto.alive_instances()], "InstanceId"),
        (ec2.describe_vpcs()["Vpcs"], "VpcId"),
        (ec2.describe_subnets()["Subnets"], "SubnetId"),
        (ec2.describe_security_groups()["SecurityGroups"], "GroupId"),
        (ec2.describe_internet_gateways()["InternetGateways"], "InternetGatewayId"),
        (ec2.describe_key_pairs()["KeyPairs"], "KeyName"),
    ]
    found: dict[str, set[str]] = {}
    for items, key in listed:
        for item in items:
            tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
            if tags.get("ddpctl:cluster") == "t":
                found.setdefault(tags.get("ddpctl:home", ""), set()).add(item[key])
    return found


def only_line_with(text: str, words: str) -> str:
    lines = [line for line in text.splitlines() if words in line]
    assert len(lines) == 1, text
    return lines[0]


def test_two_homes_up_one_name_at_once_exactly_one_wins(moto: Moto, homes: tuple[Home, Home]) -> None:
    """Started together (two trials): one `up` makes the cluster; the other is one line naming the
    winner's home and leaves nothing, in AWS or in its own home."""
    baseline = moto.inventory()
    for _ in range(2):
        procs = [start_ddpctl(*UP, env=h.env, stdin=subprocess.DEVNULL) for h in homes]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        codes = [p.returncode for p in procs]
        assert sorted(codes) == [0, 1], outputs
        winner, loser = (homes[0], homes[1]) if codes[0] == 0 else (homes[1], homes[0])
        lost = outputs[codes.index(1)].strip()
        assert "\n" not in lost and lost.startswith("Error: cluster 't' in us-east-1 belongs to another state home"), (
            lost
        )
        assert f"(home id {winner.id};" in lost, lost
        assert not (loser.path / "clusters" / "t.json").exists() and not (loser.path / "clusters" / "t").exists()
        assert list(tagged_homes(moto)) == [winner.id]  # nothing of the loser's in AWS
        added = {k: v - baseline[k] for k, v in moto.inventory().items() if v - baseline[k]}
        assert len(added["instances"]) == 1 and len(added["vpcs"]) == 1 and added["key_pairs"] == {"ddpctl-t"}
        winner.ok("down", "--name", "t", "--yes")
        assert moto.inventory() == baseline


def test_another_homes_down_touches_nothing_of_it(moto: Moto, homes: tuple[Home, Home]) -> None:
    """Home B's `up` of t was killed after recording its state (nothing made in AWS yet); home A
    then brought t up. B's `down --name t` (by its state, and by tag) and `down --name t --region R`
    (no state file) delete nothing of A's and say so in one line; A's `down` leaves moto as it was."""
    a, b = homes
    baseline = moto.inventory()
    crashed = b.run(*UP, "--nodes", "2", fault="after:key-file")
    assert crashed.returncode < 0 and (b.path / "clusters" / "t.json").exists(), crashed.stderr
    a.ok(*UP, "--nodes", "2")
    made = moto.inventory()
    assert made != baseline

    down = b.ok("down", "--name", "t", "--yes")
    assert moto.inventory() == made
    assert list(tagged_homes(moto)) == [a.id]
    line = only_line_with(down.stderr, "left alone")
    assert (
        f"left alone: 7 resource(s) of a cluster 't' in {REGION} that another state home made (home id {a.id})" in line
    )
    assert not (b.path / "clusters" / "t.json").exists()

    lost = b.ok("down", "--name", "t", "--region", REGION)
    assert f"(home id {a.id})" in only_line_with(lost.stderr, "left alone")
    assert moto.inventory() == made

    again = b.run(*UP, "--nodes", "2")  # sequentially: refused before anything is recorded
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [again.stderr.strip()], again.stderr
    assert f"belongs to another state home (home id {a.id};" in again.stderr
    assert tree(b.path / "clusters") == []
    assert moto.inventory() == made

    owner = a.ok("down", "--name", "t", "--yes")
    assert "left alone" not in owner.stderr
    assert moto.inventory() == baseline


def test_untagged_resources_count_as_this_homes_while_no_other_home_has_the_name(
    moto: Moto, homes: tuple[Home, Home]
) -> None:
    """Resources an older ddpctl made carry no ddpctl:home: `down --region` takes them (they were
    the name's only cluster then) unless another home's cluster of that name exists."""
    a, b = homes
    baseline = moto.inventory()
    a.ok(*UP)
    tagged = sorted(set().union(*tagged_homes(moto).values()) - {"ddpctl-t"})
    moto.ec2.delete_tags(Resources=tagged, Tags=[{"Key": "ddpctl:home"}])  # as an older ddpctl made them
    (a.path / "clusters" / "t.json").unlink()
    b.ok("down", "--name", "t", "--region", REGION)  # key pair ddpctl-t is a's: a's cluster is in the way
    assert moto.inventory() != baseline
    a.ok("down", "--name", "t", "--region", REGION)
    assert moto.inventory() == baseline


def test_ipv6_ssh_cidr_needs_a_vpc_with_ipv6(moto: Moto, home: Path, tmp_path: Path) -> None:
    """--ssh-cidr of IPv6 into a given subnet: one line where its VPC has no IPv6 block, nothing
    made; accepted (dry run) where it has one."""
    ec2, env = moto.ec2, moto.env(home, tmp_path)
    plain = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    dual = ec2.create_vpc(CidrBlock="10.8.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]["VpcId"]
    plain_subnet = ec2.create_subnet(VpcId=plain, CidrBlock="10.9.0.0/24")["Subnet"]["SubnetId"]
    dual_subnet = ec2.create_subnet(VpcId=dual, CidrBlock="10.8.0.0/24")["Subnet"]["SubnetId"]
    baseline = moto.inventory()
    args = ("up", "--provider", "aws", "--name", "t", "--yes", "--no-configure", "--ssh-cidr", "::/0")
    refused = ddpctl(*args, "--subnet-id", plain_subnet, env=env, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == (
        f"Error: --ssh-cidr ::/0 is IPv6 and VPC {plain} of --subnet-id {plain_subnet} has no IPv6: give an IPv4 "
        "--ssh-cidr address or network (e.g. 203.0.113.7/32), or --subnet-id of a VPC with IPv6"
    )
    assert moto.inventory() == baseline and tree(home / "clusters") == []
    accepted = ddpctl(*args, "--subnet-id", dual_subnet, "--dry-run", env=env, timeout=120)
    assert accepted.returncode == 0, accepted.stderr


# ---- the home's id, and what owns what (pure) ------------------------------------------------------


def test_a_homes_id_is_made_once_private_and_whole(tmp_path: Path) -> None:
    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.model.state import StateStore

    store = StateStore(tmp_path / "h")
    assert store.home_id() == "" and not store.home.exists()  # reading makes nothing
    made: list[str] = []
    threads = [threading.Thread(target=lambda: made.append(store.make_home_id())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 8, "a racing command failed"  # none of them fails
    assert len(set(made)) == 1 and len(made[0]) == 16 and store.home_id() == made[0]
    assert stat.S_IMODE(os.stat(store.home_id_path).st_mode) == 0o600
    assert sorted(p.name for p in store.home.iterdir()) == ["clusters", "home-id", "runs"]  # no temp file left
    assert StateStore(tmp_path / "other").make_home_id() != made[0]
    store.home_id_path.write_text("garbled\n")
    with pytest.raises(DdpctlError, match="is damaged"):
        store.home_id()


def test_owned_by_tells_homes_apart() -> None:
    from ddpctl.infra.providers.aws.ec2 import Tagged

    found = Tagged(
        instances=["i-a", "i-b", "i-old"],
        key_pairs=["ddpctl-t"],
        vpcs=["vpc-a"],
        homes={"i-a": "a" * 16, "i-b": "b" * 16, "i-old": "", "ddpctl-t": "b" * 16, "vpc-a": "a" * 16},
    )
    mine = found.owned_by("a" * 16)
    assert mine.instances == ["i-a"] and mine.vpcs == ["vpc-a"] and mine.key_pairs == []
    assert mine.foreign == {"i-b": "b" * 16, "ddpctl-t": "b" * 16, "i-old": ""}  # another home has the name
    alone = Tagged(instances=["i-old"], vpcs=["vpc-a"], homes={"i-old": "", "vpc-a": "a" * 16})
    assert alone.owned_by("a" * 16).instances == ["i-old"] and not alone.owned_by("a" * 16).foreign
    # a home with no id yet made nothing tagged: another home has the name, so the untagged is not taken either
    assert alone.owned_by("").instances == [] and alone.owned_by("").foreign == {"i-old": "", "vpc-a": "a" * 16}


def test_the_home_tag_and_the_name_hold_are_in_both_aws_plans() -> None:
    """Pure: every tag set carries ``ddpctl:home`` (ParallelCluster's stack too); the key pair is
    named for the cluster alone and is the first resource made in AWS."""
    from ddpctl.infra.providers.aws.defaults import with_defaults
    from ddpctl.infra.providers.aws.plan import STEPS, plan_from_spec
    from ddpctl.infra.providers.pcluster.config import Settings
    from ddpctl.infra.providers.pcluster.plan import plan_from_spec as pcluster_plan

    spec = with_defaults(cluster_spec(name="t", provider="aws", nodes=2, options={"region": REGION}))
    plan = plan_from_spec(spec, "abc123", "/h/clusters/t", "0123456789abcdef")
    assert plan.tags("node")["ddpctl:home"] == "0123456789abcdef"
    assert plan.key_pair_name == "ddpctl-t" and plan.unique_name == "ddpctl-t-abc123"
    assert [r.kind for r in plan.resources()][:4] == ["dir", "key-file", "key-pair", "vpc"] == list(STEPS[:4])
    assert "ddpctl:home" not in plan_from_spec(spec, "abc123", "/h/clusters/t").tags("node")  # no id yet: a dry run
    spec = with_defaults(cluster_spec(name="t", provider="pcluster", nodes=2, options={"region": REGION}))
    pc = pcluster_plan(spec, "abc123", "/h/clusters/t", Settings(), "0123456789abcdef")
    assert pc.tags["ddpctl:home"] == "0123456789abcdef" and "ddpctl:created-by" not in pc.tags
