"""Issue 42's inputs (audit reliability-turn4.md), the pure part: the Python API raises only
``UsageError``/``DdpctlError``, from the CLI's own parameter types (``cli/api/common._checked``);
options that are given empty; autodown's floor; a Slurm handle's ``ref``. The CLI rows (real
``ddpctl`` processes, AWS on moto) are in tests/integration/test_inputs_turn4.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import ddpctl
from ddpctl.infra.model.errors import DdpctlError, UsageError
from ddpctl.infra.model.spec import ClusterSpec

#: (audit row, call, words the refusal has)
API_ROWS = [
    ("P30", lambda: ddpctl.logs(tail=10**30), "--tail"),
    ("P9", lambda: ddpctl.run("mnist", port="abc"), "port='abc' is a str: give an int"),
    ("P9b", lambda: ddpctl.run("mnist", port=80), "--port"),
    ("P20", lambda: ddpctl.run("mnist", max_restarts="3"), "max_restarts='3' is a str"),
    ("P31", lambda: ddpctl.logs(rank="abc"), "rank='abc' is a str"),
    ("P11", lambda: ddpctl.run(123), "job=123 is an int"),
    ("P26", lambda: ddpctl.runs(home=5), "home=5 is an int"),
    ("P29", lambda: ddpctl.metrics(5), "run_id=5 is an int"),
    ("P10", lambda: ddpctl.run("mnist", env="A=1"), "env='A=1' is one string: give a mapping"),
    ("P42", lambda: ddpctl.up(env="A=1"), "env='A=1' is one string: give a mapping"),
    ("P14", lambda: ddpctl.run("mnist", launcher="mpirun"), "'mpirun' is not one of 'torchrun', 'sbatch'"),
    ("P34", lambda: ddpctl.down(name="../runs/r899c76537a/options"), "invalid cluster name"),
    ("P52", lambda: ddpctl.status(name="../runs/r899c76537a/options"), "invalid cluster name"),
    ("run-id-empty", lambda: ddpctl.run("mnist", run_id=""), "invalid --run-id ''"),
    ("nodes-0", lambda: ddpctl.run("mnist", nodes=0), "--nodes"),
    ("nodes-bool", lambda: ddpctl.run("mnist", nodes=True), "nodes=True is a bool"),
    ("args-int", lambda: ddpctl.run("mnist", "--epochs", 1), "args=1"),
    ("check-port", lambda: ddpctl.check(port="x"), "port='x' is a str"),
    ("up-autodown-int", lambda: ddpctl.up(autodown=30), "autodown=30 is an int"),
    ("up-options", lambda: ddpctl.up(options="region=x"), "give a dict"),
    ("up-empty-option", lambda: ddpctl.up(provider="aws", options={"region": ""}), "--region '' is empty"),
    ("download-to", lambda: ddpctl.download("r1", to=5), "to=5 is an int"),
    ("env-files", lambda: ddpctl.run("mnist", env_files="a.env"), "env_files='a.env' is a str"),
]


@pytest.mark.parametrize(("row", "call", "words"), API_ROWS, ids=[r[0] for r in API_ROWS])
def test_the_api_raises_only_its_documented_errors(home: Path, row: str, call, words: str) -> None:
    with pytest.raises(DdpctlError) as raised:  # not TypeError, OverflowError; no run started
        call()
    assert isinstance(raised.value, UsageError), row
    assert words in str(raised.value)
    assert not (home / "clusters").exists() or not list((home / "clusters").iterdir()), "nothing created"


# ---- autodown's floor (A9, A12, H19) ------------------------------------------------------------

from ddpctl.infra.hosts import autodown  # noqa: E402


@pytest.mark.parametrize("given", ["1s", "0h1s", "4m59s", "60s", "4m"])
def test_autodown_under_five_looks_is_refused(given: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPCTL_AUTODOWN_CHECK_S", raising=False)
    with pytest.raises(UsageError, match="is under 5 min: the head node looks for a run once every 60 s"):
        autodown.parse(given)


def test_autodown_floor_follows_the_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DDPCTL_AUTODOWN_CHECK_S", raising=False)
    assert autodown.parse("5m") == 300 and autodown.parse("300s") == 300
    monkeypatch.setenv("DDPCTL_AUTODOWN_CHECK_S", "1")  # the tests' program looks every second
    assert autodown.parse("5s") == 5
    with pytest.raises(UsageError):
        autodown.parse("4s")


# ---- AD-1: one check for `up --no-configure --autodown` and `ddpctl autodown` ----------------------


def test_autodown_needs_configured_nodes_wherever_it_is_set() -> None:
    from ddpctl.infra.providers.aws.provider import check_autodown_nodes
    from tests.support.specs import cluster_spec

    spec = cluster_spec(name="t", provider="aws", nodes=2, options={"configure": False})
    with pytest.raises(UsageError, match=r"`ddpctl configure --name t` first and then `ddpctl autodown t 30m`"):
        check_autodown_nodes(spec, 1800)
    check_autodown_nodes(spec, 0)  # off: nothing to refuse
    check_autodown_nodes(cluster_spec(name="t", provider="aws", nodes=2), 1800)


# ---- A31: the plan says autodown ----------------------------------------------------------------


def test_the_aws_plan_says_autodown() -> None:
    from ddpctl.infra.providers.aws.defaults import with_defaults
    from ddpctl.infra.providers.aws.plan import plan_from_spec
    from tests.support.specs import cluster_spec

    def lines(autodown_s: int) -> str:
        spec = with_defaults(cluster_spec(name="t", provider="aws", nodes=2, autodown_s=autodown_s))
        return "\n".join(plan_from_spec(spec, "abc", "/tmp/x").describe())

    assert "a day until `ddpctl down` or autodown (30 min idle)" in lines(1800)
    assert "autodown: after 30 min without a run" in lines(1800)
    assert "autodown" not in lines(0)


# ---- W30, turn 3's /1: --ssh-cidr warnings --------------------------------------------------------

from ddpctl.infra.providers.aws.options import ssh_cidr_warnings  # noqa: E402

CIDRS = [
    ("W30", "127.0.0.1/32", False, "loopback or link-local"),
    ("link-local", "169.254.1.1/32", False, "loopback or link-local"),
    ("rfc1918", "192.168.1.5/32", False, "is a private network"),
    ("rfc1918-inside", "192.168.1.5/32", True, ""),
    ("cgnat", "100.64.3.4/32", False, "is a private network"),
    ("slash1", "0.0.0.0/1", False, "much of the internet"),
    ("slash7", "8.0.0.0/7", False, "much of the internet"),
    ("slash8", "8.0.0.0/8", False, ""),
    ("slash0", "0.0.0.0/0", False, "to the whole internet"),
    ("v6-slash4", "2000::/4", False, "much of the internet"),
    ("test-net", "203.0.113.7/32", False, ""),
    ("not-given", "", False, ""),
]


@pytest.mark.parametrize(("cidr", "private_ip", "words"), [c[1:] for c in CIDRS], ids=[c[0] for c in CIDRS])
def test_ssh_cidr_warnings(cidr: str, private_ip: bool, words: str) -> None:
    got = ssh_cidr_warnings(cidr, private_ip)
    assert (len(got) == 1 and words in got[0]) if words else got == []


# ---- AD-2: an SSH failure in the provider's terms ------------------------------------------------


def test_unreachable_nodes_are_explained_by_who_made_them() -> None:
    from ddpctl.infra.hosts.connections import explain

    refused = ConnectionRefusedError(111, "Connection refused")
    assert "ansible_host/ansible_port" in explain(refused)  # the user's inventory
    for made_by in ("aws", "pcluster"):
        said = explain(refused, made_by)
        assert "ansible" not in said and "check that the cluster's instances run (`ddpctl status`)" in said
    assert "ansible" not in explain(TimeoutError(), "aws")


# ---- DL-aws: `download`/`down` of a made cluster whose head cannot be reached ----------------------

#: (row, provider, the node's made_by as its state file has it (None: left out, as before it was
#: recorded), whether the hint is in the provider's terms (else the user's inventory's))
UNREACHABLE_HEADS = [
    ("DL-aws", "aws", "aws", True),
    ("DL-aws-older-state", "aws", None, True),
    ("DL-pcluster-older-state", "pcluster", None, True),
    ("onprem-inventory", "onprem", None, False),
]


@pytest.mark.parametrize(
    ("provider", "made_by", "made"), [r[1:] for r in UNREACHABLE_HEADS], ids=[r[0] for r in UNREACHABLE_HEADS]
)
def test_download_from_an_unreachable_head_says_what_to_check_in_its_providers_terms(
    provider: str, made_by: str | None, made: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DL-aws: `download` (and `down`, which measures the runs' outputs the same way) of an aws
    cluster whose head cannot be reached said "check ansible_host/ansible_port": aws clusters have no
    inventory the user wrote. A state file written before nodes recorded who made them is read so too."""
    from ddpctl.infra.hosts import connections
    from ddpctl.infra.hosts.ssh_options import Resolved
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.model.state import ClusterState, NodeInfo
    from ddpctl.infra.runs.outputs import RunFolder, measure

    def resolve(host: Host) -> Resolved:  # as `ssh -G` would (a process: not in a unit test)
        return Resolved(host.address, host.user, host.port, (), False, (), None, None)

    monkeypatch.setattr(connections, "resolve", resolve)  # port 1 of this machine: refused at once

    head = Host("node0", "127.0.0.1", user="ubuntu", port=1, made_by=made_by or "")
    spec = ClusterSpec(name="c1", nodes=1, provider=provider)
    doc = ClusterState(spec=spec, cluster_id="cid", status="up", nodes=[NodeInfo("node0", "10.0.0.4", "/w", ssh=head)])
    doc = doc.to_dict()
    if made_by is None:
        del doc["nodes"][0]["ssh"]["made_by"]
    state = ClusterState.from_dict(doc)
    with pytest.raises(DdpctlError) as raised:
        measure(state, [RunFolder("r1", "/w/runs/r1")])
    said = str(raised.value)
    assert said.startswith("node0 (ubuntu@127.0.0.1:1): ")
    assert ("check that the cluster's instances run (`ddpctl status`)" in said) == made, said
    assert ("ansible_host" in said) != made, said


# ---- a Slurm handle's ref from a run record -------------------------------------------------------

from ddpctl.infra.launch.launcher import Handle  # noqa: E402

HANDLES = [
    ("slurm-job", {"kind": "slurm", "ref": "1234", "folder": "/home/u/o", "run_id": "r1"}, True),
    ("slurm-array", {"kind": "slurm", "ref": "1234_7", "folder": "/home/u/o", "run_id": "r1"}, True),
    ("head-pid", {"kind": "head", "ref": "4242", "folder": "/w/r1", "run_id": "r1"}, True),
    ("slurm-shell", {"kind": "slurm", "ref": "1; rm -rf ~", "folder": "/home/u/o", "run_id": "r1"}, False),
    ("slurm-subst", {"kind": "slurm", "ref": "$(reboot)", "folder": "/home/u/o", "run_id": "r1"}, False),
    ("slurm-int", {"kind": "slurm", "ref": 1234, "folder": "/home/u/o", "run_id": "r1"}, False),
    ("slurm-empty", {"kind": "slurm", "ref": "", "folder": "/home/u/o", "run_id": "r1"}, False),
    ("head-not-pid", {"kind": "head", "ref": "12 34", "folder": "/w/r1", "run_id": "r1"}, False),
    ("run-id", {"kind": "slurm", "ref": "12", "folder": "/home/u/o", "run_id": "r1;ls"}, False),
    ("no-folder", {"kind": "slurm", "ref": "12", "folder": "", "run_id": "r1"}, False),
]


@pytest.mark.parametrize(("doc", "read"), [c[1:] for c in HANDLES], ids=[c[0] for c in HANDLES])
def test_a_handles_ref_is_checked_where_it_is_read(doc: dict, read: bool) -> None:
    handle = Handle.from_dict(doc)
    assert (handle is not None) == read
    if handle is not None:
        assert handle.to_dict() == doc


def test_slurm_commands_quote_the_ref() -> None:
    """Every command with a job id quotes it (a handle made in code, not read back, is not checked)."""
    from ddpctl.infra.launch.slurm_executor import SlurmLauncher

    ran: list[str] = []

    class Conn:
        def run(self, command: str, **_: object) -> object:
            ran.append(command)
            return type("R", (), {"stdout": "", "stderr": "", "exited": 0, "ok": True})()

    launcher = SlurmLauncher(Conn(), poll_s=0.0)  # type: ignore[arg-type]
    odd = Handle("slurm", "1;x", "/o", "r1")
    launcher.describe(odd)
    assert ran and all("'1;x'" in c for c in ran), ran


# ---- a queued run ----------------------------------------------------------------------------------


def test_a_queued_run_is_waited_for_then_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs import logs, records

    store = StateStore(tmp_path / "home")
    run_dir = store.make_run_dir("rq")
    (run_dir / records.QUEUED).write_text(json.dumps({"ahead": "run ra", "job": "x", "nodes": 2, "cluster": "c"}))
    monkeypatch.setattr(records.locks, "run_alive", lambda *_: True)
    with pytest.raises(DdpctlError, match=r"run rq is queued on cluster 'c' behind run ra: it has not started"):
        logs.log_path(store, "rq")
    said, looks = [], []

    def sleep(_: float) -> None:  # its turn comes on the third look
        looks.append(1)
        if len(looks) == 3:
            (run_dir / records.QUEUED).unlink()
            (run_dir / "output.log").write_text("[node0 r0] hi\n")

    logs.wait_turn(store, "rq", said.append, alive=lambda *_: True, sleep=sleep)
    assert said == [
        "run rq is queued on cluster 'c' behind run ra: waiting for its turn (Ctrl-C stops waiting; the run stays queued)"
    ]
    assert logs.log_path(store, "rq")[0] == "rq"


# ---- the on-prem shared work root: down removes only the cluster's own folder ---------------------

#: (row, a node's recorded work folder, what `down` removes on that host; "": nothing). The cluster
#: is 'c' with id 'cid1': its own folder is named c-cid1 (onprem.work_folder)
ONPREM_WORKDIRS = [
    ("own-folder", "/opt/ddpctl/work/c-cid1", "/opt/ddpctl/work/c-cid1"),
    ("own-folder-user-root", "/scratch/me/work/c-cid1", "/scratch/me/work/c-cid1"),
    ("shared-root", "/opt/ddpctl/work", ""),  # an older ddpctl's: every cluster on the hosts shares it
    ("another-clusters", "/opt/ddpctl/work/d-cid2", ""),
    ("same-name-another-id", "/opt/ddpctl/work/c-cid2", ""),
    ("relative", "c-cid1", ""),
    ("dotdot", "/opt/ddpctl/work/c-cid1/../c-cid1", ""),
    ("root", "/", ""),
    ("none", "", ""),
]


@pytest.mark.parametrize(("workdir", "removed"), [r[1:] for r in ONPREM_WORKDIRS], ids=[r[0] for r in ONPREM_WORKDIRS])
def test_onprem_down_removes_only_the_clusters_own_work_folder(
    tmp_path: Path, workdir: str, removed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosts several clusters share: `down` removed the node's work folder whatever it was (the work
    root every cluster on them used). The real processes, two clusters on the same hosts and a folder
    that must survive: tests/integration/test_onprem.py::test_down_of_another_cluster_on_the_same_hosts_leaves_this_ones_work_folder."""
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.model.state import ClusterState, NodeInfo
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers import onprem

    cleaned: list[tuple[str, str]] = []
    monkeypatch.setattr(onprem, "_clean_hosts", lambda hosts, cid, _: cleaned.extend((h.name, w) for h, w in hosts))
    ssh = Host("node0", "10.0.0.2")
    spec = ClusterSpec(name="c", nodes=1, provider="onprem", inventory=str(tmp_path / "hosts.ini"))
    state = ClusterState(
        spec=spec, cluster_id="cid1", status="up", nodes=[NodeInfo("node0", "10.0.0.2", workdir, ssh=ssh)]
    )
    said: list[str] = []
    onprem.PROVIDER.delete(state, StateStore(tmp_path / "home"), said.append, persisted=True)
    assert cleaned == [("node0", removed)]
    assert any(workdir in line for line in said) == bool(workdir and not removed), said  # a folder left is said


# ---- X1's class: nothing replaced through a link under the home -------------------------------------

#: (row, what is a link to a folder of the user's: under the home's runs/)
LINKED_RECORDS = [
    ("X1-outputs", "runs/r1/outputs"),
    ("run-folder", "runs/r1"),
    ("runs", "runs"),
]


@pytest.mark.parametrize("linked", [r[1] for r in LINKED_RECORDS], ids=[r[0] for r in LINKED_RECORDS])
def test_down_keeping_outputs_never_replaces_through_a_link(tmp_path: Path, linked: str) -> None:
    """`download` refused to replace a run's kept outputs through a link (X1); `down`, which keeps a
    run's outputs in the same place, checked only the last part of the path: with ``runs/r1`` (or
    ``runs``) a link to a folder of the user's, its ``outputs`` was removed. One check for both now."""
    import shutil

    from ddpctl.infra.model.state import ClusterState, NodeInfo
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.outputs import RunFolder, keep

    store = StateStore(tmp_path / "home")
    store.make_run_dir("r1")
    (store.run_dir("r1") / "options.json").write_text("{}")
    (store.run_dir("r1") / "outputs").mkdir()
    users = tmp_path / "users"
    shutil.copytree(tmp_path / "home" / linked, users)  # the user's folder, where the link points
    precious = users.joinpath(*Path("runs/r1/outputs").relative_to(linked).parts, "precious.txt")
    precious.parent.mkdir(parents=True, exist_ok=True)
    precious.write_text("not ddpctl's\n")
    shutil.rmtree(tmp_path / "home" / linked)
    (tmp_path / "home" / linked).symlink_to(users)
    on_cluster = tmp_path / "node0" / "r1"
    on_cluster.mkdir(parents=True)
    (on_cluster / "snap.txt").write_text("weights")
    state = ClusterState(
        spec=ClusterSpec(name="c", nodes=1), cluster_id="cid", status="up", nodes=[NodeInfo("node0", "127.0.0.1", "/w")]
    )
    with pytest.raises(DdpctlError, match=r"is a symbolic link .*`ddpctl down --name c --no-keep-outputs`"):
        keep(store, state, [RunFolder("r1", str(on_cluster), 7, 1)], lambda _: None)
    assert precious.read_text() == "not ddpctl's\n"
    assert sorted(p.name for p in precious.parent.iterdir()) == ["precious.txt"]
