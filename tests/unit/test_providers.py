"""The provider interface: one registry, every verb declared once in the base, capabilities instead of names."""

import re
from pathlib import Path

import pytest

from ddpctl.infra.hosts.ansible import Play
from ddpctl.infra.model.errors import DdpctlError, UsageError
from ddpctl.infra.model.state import ClusterPhase, ClusterState, Resource, ResourcePhase
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers import NAMES, all_options, declared_options, get_provider, provider_class
from ddpctl.infra.providers.base import LiveStatus, Provider
from tests.support import REPO
from tests.support.specs import cluster_spec

REQUIRED = ("plan", "ready", "delete", "executor")
TEMPLATES = ("up", "down")  # written once, in the base


@pytest.mark.parametrize("name", NAMES)
def test_every_provider_implements_the_required_verbs(name):
    cls = provider_class(name)
    assert issubclass(cls, Provider) and cls.name == name
    assert [verb for verb in REQUIRED if getattr(cls, verb) is getattr(Provider, verb)] == []
    assert [verb for verb in TEMPLATES if getattr(cls, verb) is not getattr(Provider, verb)] == []


def test_no_module_outside_the_providers_compares_a_provider_name():
    names = "|".join(NAMES)
    compare = re.compile(rf"""(==|!=|\bin)\s*\(?\s*["']({names})["']|["']({names})["']\s*(==|!=)""")
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for top in ("infra", "cli")
        for path in (REPO / top).rglob("*.py")
        if "providers" not in path.relative_to(REPO).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if compare.search(line)
    ]
    assert found == []


def test_the_cli_offers_the_registry():
    from ddpctl.main import cli

    choices = {p.name: p.type.choices for p in cli.commands["up"].params if p.name == "provider"}
    assert tuple(choices["provider"]) == NAMES


def test_configure_refuses_where_no_playbook_runs(tmp_path):
    state = ClusterState(spec=cluster_spec(name="c1"), cluster_id="x", status="up")
    with pytest.raises(
        UsageError, match=r"^local clusters run no playbooks: `ddpctl configure` is for onprem, aws, pcluster$"
    ):
        get_provider("local").configure(state, StateStore(tmp_path), print, Play())


@pytest.mark.parametrize("name", ["local", "onprem"])
def test_a_lost_cluster_is_found_by_tag_only_where_something_is_billed(name, tmp_path):
    with pytest.raises(
        UsageError, match=f"^{name} clusters have no resources to find by tag: --region is for aws or pcluster$"
    ):
        get_provider(name).down_lost("c1", "us-east-1", StateStore(tmp_path), print)


def test_no_configure_is_taken_by_both_aws_providers():
    """`up --provider pcluster --no-configure` was refused by the CLI although the provider does it."""
    for name in ("aws", "pcluster"):
        assert cluster_spec(name="c1", provider=name, options={"configure": False}).options["configure"] is False
    with pytest.raises(UsageError, match="^--no-configure is for --provider aws or pcluster, not onprem$"):
        cluster_spec(name="c1", provider="onprem", options={"configure": False})


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"provider": "local", "inventory": "hosts.ini"}, "--inventory is for --provider onprem, not local"),
        (
            {"provider": "pcluster", "options": {"iam_instance_profile": "p"}},
            "--iam-instance-profile is for --provider aws, not pcluster",
        ),
        (
            {"provider": "local", "options": {"region": "us-east-1", "spot": True}},
            "--region, --spot are for --provider aws or pcluster, not local",
        ),
        (
            {"provider": "local", "inventory": "h.ini", "options": {"spot": True}},
            "--inventory, --spot are not for --provider local",
        ),
        (
            {"provider": "local", "playbook_vars": {"a": "1"}},
            "--playbook-var is for --provider onprem, aws or pcluster",
        ),
    ],
)
def test_a_provider_refuses_the_flags_it_does_not_take(kwargs, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        cluster_spec(name="c1", **kwargs)


def test_each_provider_takes_the_options_it_declares():
    """The light declaration the CLI reads (the registry's) is the provider's own, and the CLI's
    provider options are exactly theirs: each once, pcluster's shared with aws."""
    for name in NAMES:
        assert provider_class(name).options == declared_options(name)
    assert {o.name for o in all_options()} == set().union(*(provider_class(n).option_names() for n in NAMES))
    profiles = ("iam_instance_profile", "head_instance_profile")
    assert declared_options("pcluster") == tuple(o for o in declared_options("aws") if o.name not in profiles)
    assert all(o.kind in (str, int, bool, dict) and o.help for o in all_options())


def test_a_spec_holds_its_providers_options_only():
    """Every option the provider takes, at its empty value where not given; another provider's at
    its empty value is dropped (as `up` passes every flag); a name no provider declares is refused."""
    spec = cluster_spec(name="c1", provider="pcluster", options={"region": "us-west-2", "iam_instance_profile": ""})
    assert set(spec.options) == {o.name for o in declared_options("pcluster")}
    assert spec.options["region"] == "us-west-2" and spec.options["spot"] is False and spec.options["configure"] is True
    assert cluster_spec(name="c1", options={"spot": False, "configure": True}).options == {}
    with pytest.raises(UsageError, match=r"^unknown provider option\(s\) \['colour'\]"):
        cluster_spec(name="c1", provider="aws", options={"colour": "red"})
    with pytest.raises(UsageError, match=r"^--volume-gb 'big' is not a whole number$"):
        cluster_spec(name="c1", provider="aws", options={"volume_gb": "big"})


def test_down_on_failure_is_a_choice_only_where_something_is_billed():
    get_provider("aws").check_up_flags(down_on_failure=False)
    with pytest.raises(UsageError, match="^--no-down-on-failure is for --provider aws or pcluster, not local$"):
        get_provider("local").check_up_flags(down_on_failure=False)


def test_status_is_one_typed_value():
    live = LiveStatus(summary="EC2: 2 running", billed_instances=2, cost_per_hour_usd=6.12, details={"region": "r"})
    assert live.to_dict() == {
        "region": "r",
        "summary": "EC2: 2 running",
        "billed_instances": 2,
        "cost_per_hour_usd": 6.12,
    }
    assert "error" in LiveStatus(summary="x", billed_instances=0, cost_per_hour_usd=None, error="x").to_dict()
    state = ClusterState(spec=cluster_spec(name="c1"), cluster_id="x", status="up")
    assert get_provider("local").status(state) is None  # the state file says it all


@pytest.mark.parametrize(
    ("exit_code", "stderr", "verdict"),
    [
        (0, "", "slurm"),
        # no slurm.conf and no configless source: no Slurm here, nothing to wait for
        (
            1,
            "sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
            "sinfo: error: fetch_config: DNS SRV lookup failed\n"
            "sinfo: fatal: Could not establish a configuration source\n",
            "none",
        ),
        # a configured controller that does not answer (yet): try again
        (1, "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n", "retry"),
        (124, "", "retry"),  # `timeout` stopped it
    ],
)
def test_sinfo_verdict(exit_code: int, stderr: str, verdict: str) -> None:
    from ddpctl.infra.providers.onprem import sinfo_verdict

    assert sinfo_verdict(exit_code, stderr) == verdict


def test_cost_so_far_and_age_in_words() -> None:
    from ddpctl.infra.model.costs import age_text, so_far

    assert so_far(6.12, 1000.0, 1000.0 + 1800) == 3.06
    assert so_far(None, 0.0, 10.0) is None
    assert so_far(1.0, 100.0, 50.0) == 0.0  # a clock set back: nothing, not a negative cost
    assert [age_text(s) for s in (5, 125, 3 * 3600 + 5 * 60, 2 * 86400 + 4 * 3600)] == [
        "5 s",
        "2 min",
        "3 h 05 min",
        "2 d 4 h",
    ]


class Scripted(Provider):
    """A provider whose steps say when they run and what the state file held then."""

    name = "scripted"

    def __init__(self, store: StateStore, *, check_fails: bool = False, delete_fails: bool = False) -> None:
        self.store, self.check_fails, self.delete_fails = store, check_fails, delete_fails
        self.seen: list[str] = []

    def _recorded(self) -> str:
        return self.store.load("c").status if self.store.exists("c") else "none"

    def ready(self, state, store, progress):
        self.seen.append(f"ready (recorded: {self._recorded()})")
        if self.check_fails:
            raise UsageError("no")

        def create() -> str:
            self.seen.append(f"create (recorded: {self._recorded()})")
            state.resources[0].status = ResourcePhase.CREATED
            return "it is up"

        return create

    def delete(self, state, store, progress, *, persisted):
        self.seen.append(f"delete (recorded: {self._recorded()}, persisted: {persisted})")
        if self.delete_fails:
            raise DdpctlError("could not delete 1 resource: run `ddpctl down` again")
        return "it is down"


def planned() -> ClusterState:
    return ClusterState(
        spec=cluster_spec(name="c"), cluster_id="x", status=ClusterPhase.PLANNED, resources=[Resource("dir", "/d")]
    )


def test_up_is_one_template_checks_then_record_then_create_then_up(tmp_path: Path) -> None:
    store, said = StateStore(tmp_path), []
    provider = Scripted(store)
    state = provider.up(planned(), store, said.append)
    assert provider.seen == ["ready (recorded: none)", "create (recorded: creating)"]
    assert state.status is ClusterPhase.UP and store.load("c").status is ClusterPhase.UP
    assert store.load("c").resources[0].status is ResourcePhase.CREATED and said == ["it is up"]


def test_up_records_nothing_when_a_check_fails(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    with pytest.raises(UsageError):
        Scripted(store, check_fails=True).up(planned(), store, print)
    assert not store.exists("c")


def test_down_is_one_template_mark_deleting_then_delete_then_forget(tmp_path: Path) -> None:
    store, said = StateStore(tmp_path), []
    provider = Scripted(store)
    state = provider.up(planned(), store, print)
    store.cluster_dir("c").mkdir(parents=True)
    provider.down(state, store, said.append)
    assert provider.seen[-1] == "delete (recorded: deleting, persisted: True)"
    assert not store.exists("c") and not store.cluster_dir("c").exists() and said == ["it is down"]
    provider.down(planned(), store, said.append)  # a lost cluster's: nothing recorded, nothing to mark
    assert provider.seen[-1] == "delete (recorded: none, persisted: False)"


def test_a_down_that_could_not_delete_everything_keeps_the_record(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    provider = Scripted(store)
    state = provider.up(planned(), store, print)
    provider.delete_fails = True
    with pytest.raises(DdpctlError, match="again"):
        provider.down(state, store, print)
    assert store.load("c").status is ClusterPhase.DELETING  # the next `down` finds it
