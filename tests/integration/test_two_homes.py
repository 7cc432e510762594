"""Cloud resources are owned by one state home (issue 26): two state homes (two users, two CI
jobs) with one AWS account, on a moto server.

Each home has an id of its own (``StateStore.home_id``, the file ``home-id``), and everything the
aws provider makes carries it as the tag ``ddpctl:home``. The cluster's key pair is named for the
cluster alone, so importing it is a conditional create only one ``up`` of a name can win in a
region. ``down`` (by state, by tag with ``--region``) deletes only its own home's resources and
names the other home's in one line.

Its pure tests (no process beyond Python) are in tests/unit/test_two_homes.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import ddpctl, start_ddpctl, tree
from tests.support.moto import REGION, SSH_CIDR, Moto

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
