"""Cloud resources are owned by one state home (issue 26): two state homes (two users, two CI
jobs) with one AWS account, on a moto server.

Each home has an id of its own (``StateStore.home_id``, the file ``home-id``), and everything the
aws provider makes carries it as the tag ``ddpctl:home``. The cluster's key pair is named for the
cluster alone, so importing it is a conditional create only one ``up`` of a name can win in a
region. ``down`` (by state, by tag with ``--region``) deletes only its own home's resources and
names the other home's in one line.

Its tests that start processes (real parts) are in tests/integration/test_two_homes.py.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tests.support.moto import REGION
from tests.support.specs import cluster_spec

# ---- the home's id, and what owns what (pure) ------------------------------------------------------


def test_a_homes_id_is_made_once_private_and_whole(tmp_path: Path) -> None:
    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.model.store import StateStore

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
