"""Autodown (issue 29): a cluster that takes itself down once idle, with no ddpctl running anywhere.

Fast: the idle time's text, when it would fire, the refusals, the RunInstances request, and the
node program itself (``infra/node_programs/autodown.py``) on this machine with stand-ins for
``sudo`` and ``ssh`` on its PATH: idle, it shuts the peers down, then its own node; a process with
the cluster's run marker, or a Slurm job in the queue, keeps it up.

End to end on the EC2 twin (one cluster of 2 nodes): `up --autodown` starts the program on the head
node; a detached run keeps the cluster up past the idle time; once the run is stopped, the head
node shuts the other node down over the cluster's SSH mesh, then itself (the twin's `shutdown`
stand-in), and the twin terminates both instances in moto, as EC2 does with
``InstanceInitiatedShutdownBehavior=terminate``; then `ddpctl status` deletes the rest and says so.

Its tests that start processes (real parts) are in tests/integration/test_autodown.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpctl.infra.hosts import autodown
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.runs.records import RunRecord
from tests.support.autodown import _state
from tests.support.specs import LAUNCH, cluster_spec

# ---- the idle time's text ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "seconds"),
    [("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("600s", 600), ("5m", 300), ("1d", 86400), ("off", 0)],
)
def test_durations(given: str, seconds: int) -> None:
    assert autodown.parse(given) == seconds
    assert autodown.parse(autodown.flag_text(seconds)) == seconds


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("30", "--autodown 30 has no unit: give e.g. 30m, 2h or 1h30m (or off)"),
        (30, "--autodown 30 has no unit"),
        ("30 minutes", "is not a duration: give e.g. 30m, 2h, 1h30m or 600s"),
        ("31d", "more than 30 days"),
    ],
)
def test_bad_durations_are_one_line(given: str | int, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        autodown.parse(given)


def test_text() -> None:
    assert [autodown.text(s) for s in (0, 45, 1800, 5400, 7200)] == ["off", "45 s", "30 min", "1 h 30 min", "2 h"]


def test_fires_after_setting_it_or_after_the_last_run() -> None:
    state = _state(1800, 1000.0)
    assert autodown.fires_at(_state(0, 1000.0), []) is None
    assert autodown.fires_at(state, []).fires_at == 2800.0
    ended = RunRecord("r1", "mnist", 2, "c", started=1500.0, result="succeeded", duration_s=300.0)
    other = RunRecord("r2", "mnist", 2, "other", started=5000.0, result="succeeded", duration_s=1.0)
    assert autodown.fires_at(state, [ended, other]).fires_at == 1800.0 + 1800
    going = RunRecord("r3", "mnist", 2, "c", started=1900.0, result="running")
    estimate = autodown.fires_at(state, [ended, going])
    assert estimate.fires_at is None and estimate.to_dict()["running"] is True
    assert autodown.status_text(estimate, 2000.0) == "30 min idle: a run is going"
    assert autodown.status_text(autodown.fires_at(state, []), 2000.0) == "30 min idle: in 13 min"
    assert autodown.status_text(autodown.fires_at(state, []), 3000.0) == "30 min idle: due now"


def test_settings_name_the_marker_and_the_other_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPCTL_AUTODOWN_CHECK_S", "2")
    doc = autodown.settings(_state(60, 1.0), 60)
    assert doc == {"cluster": "c", "cluster_id": "abc", "idle_s": 60, "check_s": 2, "peers": ["10.0.0.2"]}


# ---- who takes it -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "why"),
    [
        ("local", "its nodes are processes on this machine, which bill nothing"),
        ("onprem", "its hosts are your own machines, which ddpctl never shuts down"),
        ("pcluster", "ParallelCluster stops idle compute nodes itself"),
    ],
)
def test_other_providers_refuse_it_in_one_line(provider: str, why: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"autodown is for --provider aws, not {provider}: {why}")):
        cluster_spec(name="c", provider=provider, autodown_s=60, inventory="x" if provider == "onprem" else "")


def test_aws_refuses_it_without_configured_nodes() -> None:
    from ddpctl.infra.providers import get_provider

    spec = cluster_spec(name="c", provider="aws", autodown_s=60, options={"region": "us-east-1", "configure": False})
    with pytest.raises(UsageError, match="--autodown needs configured nodes"):
        get_provider("aws").check_up(spec)


def test_instances_terminate_when_they_shut_themselves_down() -> None:
    from ddpctl.infra.providers.aws.ec2_requests import run_instances_request
    from ddpctl.infra.providers.aws.plan import plan_from_spec

    spec = cluster_spec(name="c", provider="aws", nodes=2, options={"region": "us-east-1"})
    from ddpctl.infra.providers.aws.defaults import with_defaults

    plan = plan_from_spec(with_defaults(spec), "abc", "/tmp/c", "0" * 16)
    request = run_instances_request(plan, **LAUNCH)
    assert request["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert "UserData" not in request and "IamInstanceProfile" not in request  # no credentials for it


def test_the_toml_key(tmp_path: Path) -> None:
    from ddpctl.config_file import load_default_map

    path = tmp_path / "ddpctl.toml"
    path.write_text('[cluster]\nautodown = "30m"\n')
    assert load_default_map(path)["up"]["autodown"] == "30m"
    path.write_text("[cluster]\nautodown = 30\n")
    with pytest.raises(UsageError, match="autodown"):
        load_default_map(path).get("up")


@pytest.mark.parametrize(
    "states,kept",
    [
        ({"i-h": "terminated", "i-1": "terminated"}, ""),  # every node gone (spot, or an older cluster)
        ({"i-1": "terminated"}, ""),  # the head long gone: EC2 no longer lists it
        ({"i-h": "stopped", "i-1": "terminated"}, "i-h"),  # the head kept, its disk with the outputs
        ({"i-h": "stopping", "i-1": "shutting-down"}, "i-h"),
        ({"i-h": "running", "i-1": "terminated"}, None),  # not down: the head runs
        ({"i-h": "stopped", "i-1": "running"}, None),
        ({"i-h": "stopped", "i-1": "stopped"}, None),  # a node stopped by hand is not autodown's
    ],
)
def test_taken_down_keeps_a_stopped_head(states: dict[str, str], kept: str | None) -> None:
    """Issue 37: autodown stops the head (its disk keeps the runs' outputs) and terminates the others."""
    from ddpctl.infra.providers.aws.kept_head import taken_down

    found = taken_down(states, "i-h")
    assert (found.kept_head if found else None) == kept


def test_a_stopped_heads_disk_costs_gp3_storage() -> None:
    from ddpctl.infra.providers.aws.kept_head import disk_cost_text

    assert disk_cost_text(200) == "200 GB, about $16.00/month"
