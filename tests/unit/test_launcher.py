"""The one launcher interface (issue 28): a run's handle as its options.json keeps it, Slurm's
launcher verbs against a scripted login node, and ``on_cluster`` driving any launcher through its
verbs alone. Their real parts: test_head_supervisor.py and test_slurm.py on the test clusters."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpctl.infra.launch.launcher import Described, Handle, Phase


def test_a_handle_round_trips_through_options_json() -> None:
    handle = Handle("slurm", "42", "/home/u/.ddpctl/slurm", "r1")
    assert Handle.from_dict(json.loads(json.dumps(handle.to_dict()))) == handle


@pytest.mark.parametrize(
    "doc", [None, {}, {"kind": "k8s", "ref": "1", "folder": "/", "run_id": "r"}, {"kind": "head", "ref": "1"}]
)
def test_what_is_not_a_handle_reads_as_none(doc) -> None:
    assert Handle.from_dict(doc) is None


@dataclass
class Login:
    """A login node's answers, by the start of the command."""

    answers: dict[str, str]
    asked: list[str] = field(default_factory=list)

    def run(self, cmd: str, **kwargs):
        self.asked.append(cmd)
        out = next((v for k, v in self.answers.items() if cmd.startswith(k)), "")
        return SimpleNamespace(stdout=out, stderr="", ok=bool(out))


@pytest.mark.parametrize(
    ("answers", "state"),
    [
        ({"scontrol": "JobId=7 JobState=COMPLETED ExitCode=0:0"}, ("succeeded", 0)),
        ({"scontrol": "JobId=7 JobState=RUNNING ExitCode=0:0"}, ("running", 0)),
        ({"scontrol": "JobId=7 JobState=PENDING ExitCode=0:0"}, ("pending", 0)),
        ({"sacct": "FAILED|3:0|00:01:05\n"}, ("failed", 3)),  # Slurm forgot it; its accounting did not
        ({"sacct": "CANCELLED by 0|0:15|1-00:00:01\n"}, ("cancelled", 128 + 15)),
        ({}, ("gone", None)),
    ],
)
def test_slurm_states(answers, state) -> None:
    from ddpctl.infra.launch.slurm_executor import SlurmLauncher

    assert SlurmLauncher(Login(answers)).state("7") == state


@pytest.mark.parametrize(
    ("answer", "phase", "exit_code", "interrupted"),
    [
        ("JobState=RUNNING", Phase.RUNNING, None, None),
        ("JobState=COMPLETED RunTime=00:01:05 ExitCode=0:0", Phase.ENDED, 0, False),
        ("JobState=FAILED ExitCode=1:0", Phase.ENDED, 1, False),
        ("JobState=CANCELLED ExitCode=0:15", Phase.ENDED, 130, True),  # `ddpctl stop`, as a Ctrl-C
    ],
)
def test_slurm_describes_a_job(answer, phase, exit_code, interrupted) -> None:
    from ddpctl.infra.launch.slurm_executor import SlurmLauncher

    described = SlurmLauncher(Login({"scontrol": answer})).describe(Handle("slurm", "7", "/out", "r1"))
    assert described.phase is phase
    if phase is Phase.ENDED:
        result = described.record["result"]
        assert (result["exit_code"], result["interrupted"]) == (exit_code, interrupted)
        assert result["nodes"][0]["node"] == "slurm job 7"
        assert result["wall_s"] == (65.0 if "RunTime" in answer else 0.0)  # how long the job ran


@pytest.mark.parametrize(("text", "s"), [("00:01:05", 65), ("1-02:00:00", 93600), ("05:09", 309), ("", 0), ("x", 0)])
def test_slurm_times(text, s) -> None:
    from ddpctl.infra.launch.slurm_executor import seconds

    assert seconds(text) == s


def test_slurm_logs_are_the_nodes_lines_after_those_seen_here() -> None:
    from ddpctl.infra.launch.slurm_executor import SlurmLauncher

    files = "node0\t[rank0]:a\nnode0\t[rank0]:c\nnode1\t[rank1]:b\nnode1\tagent line\n"
    login = Login({"scontrol": "JobState=COMPLETED ExitCode=0:0", "env 'DDPCTL_NODE_PROGRAM=": files})
    got: list[str] = []
    SlurmLauncher(login).logs(Handle("slurm", "7", "/out", "r1"), got.append, seen=["[node0 r0] a"], follow=True)
    assert got == ["[node0 r0] c", "[node1 r1] b", "[node1] agent line"]  # an ended job: copied, not followed
    assert login.asked[-1].endswith("/out ddpctl-7- once")


class FakeLauncher:
    """A launcher that answers from a script: ``phase``, ``lines``, and ``cancel`` ends the run."""

    def __init__(self, phase: Phase, lines: list[str], record: dict | None = None) -> None:
        self.phase, self.lines, self.record = phase, lines, record
        self.calls: list[str] = []

    def describe(self, handle: Handle) -> Described:
        self.calls.append("describe")
        return Described(self.phase, self.record if self.phase is Phase.ENDED else None)

    def logs(self, handle, sink, *, seen, follow) -> None:
        self.calls.append(f"logs follow={follow} seen={len(seen)}")
        for raw in self.lines[len(seen) :]:
            sink(raw)

    def attach(self, handle, sink, *, seen, progress=None):
        raise AssertionError("not attached here")

    def cancel(self, handle: Handle) -> None:
        self.calls.append("cancel")
        self.phase = Phase.ENDED
        self.record = {"result": {"run_id": handle.run_id, "exit_code": 130, "wall_s": 1.0, "interrupted": True}}

    def close(self) -> None:
        self.calls.append("close")


@pytest.fixture
def recorded(home: Path, monkeypatch):
    """A store with cluster "c" (its head reachable) and run r1 recorded with a slurm handle, no result."""
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs import on_cluster

    store = StateStore(home)
    store.make_run_dir("r1")
    handle = Handle("slurm", "7", "/out", "r1")
    options = {"cluster": "c", "handle": handle.to_dict(), "plan": {"run_id": "r1", "nodes": 2}}
    (store.run_dir("r1") / "options.json").write_text(json.dumps(options))
    head = SimpleNamespace(ssh="login-host")
    monkeypatch.setattr(type(store), "exists", lambda self, name: name == "c")
    monkeypatch.setattr(type(store), "load", lambda self, name: SimpleNamespace(nodes=[head]))
    launchers: list[FakeLauncher] = []

    def reopen(h, host):
        assert (h, host) == (handle, "login-host")
        return launchers.pop(0)

    monkeypatch.setattr(on_cluster, "reopen", reopen)
    return SimpleNamespace(store=store, launchers=launchers, dir=store.run_dir("r1"))


def test_a_running_job_is_marked_and_its_lines_copied(recorded) -> None:
    from ddpctl.infra.runs import on_cluster

    recorded.launchers.append(launcher := FakeLauncher(Phase.RUNNING, ["[node0 r0] a", "[node1 r1] b"]))
    assert on_cluster.bring_up_to_date(recorded.store, "r1") is False
    assert (recorded.dir / "output.log").read_text() == "[node0 r0] a\n[node1 r1] b\n"
    assert on_cluster.is_on_cluster(recorded.store, "r1") and not (recorded.dir / "run.json").exists()
    assert launcher.calls[-1] == "close"


def test_an_ended_job_gets_its_record_here(recorded) -> None:
    from ddpctl.infra.runs import on_cluster

    record = {"result": {"run_id": "r1", "exit_code": 0, "wall_s": 0.0}}
    recorded.launchers.append(FakeLauncher(Phase.ENDED, ["[node0 r0] done"], record))
    assert on_cluster.bring_up_to_date(recorded.store, "r1") is True
    doc = json.loads((recorded.dir / "run.json").read_text())
    assert doc == {"plan": {"run_id": "r1", "nodes": 2}, "result": record["result"], "cluster": "c"}
    assert not on_cluster.is_on_cluster(recorded.store, "r1")


def test_the_nodes_the_head_replaced_go_into_the_clusters_state_not_the_record(recorded, monkeypatch) -> None:
    from ddpctl.infra.runs import on_cluster

    adopted: list[tuple[str, dict]] = []
    monkeypatch.setattr(on_cluster, "adopt_replaced", lambda store, name, got, progress: adopted.append((name, got)))
    replaced = {"node2": {"instance": "i-9", "host": "10.0.0.9"}}
    record = {"result": {"run_id": "r1", "exit_code": 0, "wall_s": 0.0, "replaced": replaced}}
    recorded.launchers.append(FakeLauncher(Phase.ENDED, ["[node0 r0] done"], record))
    assert on_cluster.bring_up_to_date(recorded.store, "r1") is True
    assert adopted == [("c", replaced)]
    assert "replaced" not in json.loads((recorded.dir / "run.json").read_text())["result"]


def test_a_look_that_fails_half_way_keeps_the_run_marked_going(recorded) -> None:
    """The CI failure of 92ae645: a look at the head that breaks after ``describe`` must not read as
    the run's end (a queued run would start while it goes on)."""
    from ddpctl.infra.runs import on_cluster

    recorded.launchers.append(FakeLauncher(Phase.RUNNING, ["[node0 r0] a"]))
    on_cluster.bring_up_to_date(recorded.store, "r1")
    broken = FakeLauncher(Phase.RUNNING, [])
    broken.logs = lambda *a, **k: (_ for _ in ()).throw(OSError("connection reset"))
    recorded.launchers.append(broken)
    assert on_cluster.bring_up_to_date(recorded.store, "r1") is False
    assert on_cluster.is_on_cluster(recorded.store, "r1")


class Head:
    """A head node whose supervisor writes its record and exits between two of ddpctl's commands."""

    def __init__(self) -> None:
        self.ended = False
        self.asked: list[str] = []

    def run(self, cmd: str, **kwargs):
        self.asked.append(cmd)
        if "/pid" in cmd:  # the pid: alive at first; its record written and gone by the next command
            alive, self.ended = not self.ended, True
            return SimpleNamespace(stdout="4242\n" if alive else "", stderr="", ok=alive)
        record = json.dumps({"result": {"run_id": "r1", "exit_code": 0}}) if self.ended else ""
        return SimpleNamespace(stdout=record, stderr="", ok=bool(record))


def test_the_head_launcher_never_reads_a_run_that_just_ended_as_gone() -> None:
    """The supervisor writes the record, then exits: ``describe`` asks for the pid first, so a run
    it finds dead has its record there to read."""
    from ddpctl.infra.launch.head import HeadLauncher

    head = Head()
    described = HeadLauncher(head).describe(Handle("head", "4242", "/runs/r1", "r1"))
    assert described.phase is Phase.ENDED and described.record["result"]["exit_code"] == 0, head.asked


def test_stop_cancels_through_the_launcher_then_records(recorded) -> None:
    from ddpctl.infra.runs import on_cluster

    recorded.launchers += [FakeLauncher(Phase.RUNNING, []), FakeLauncher(Phase.ENDED, [])]
    recorded.launchers[1].cancel(Handle("slurm", "7", "/out", "r1"))  # what the first one's cancel did there
    first = recorded.launchers[0]
    assert on_cluster.stop(recorded.store, "r1") is True
    assert first.calls == ["describe", "cancel", "close"]
    assert json.loads((recorded.dir / "run.json").read_text())["result"]["interrupted"] is True


def test_follow_goes_on_from_the_lines_here(recorded) -> None:
    from ddpctl.infra.runs import on_cluster

    (recorded.dir / "output.log").write_text("[node0 r0] a\n[node0 r0] partial")
    lines = ["[node0 r0] a", "[node0 r0] partial line", "[node0 r0] end"]
    recorded.launchers.append(launcher := FakeLauncher(Phase.RUNNING, lines))
    got: list[str] = []
    assert on_cluster.follow(recorded.store, "r1", got.append) is True
    assert got == lines[1:]
    assert "logs follow=True seen=1" in launcher.calls


def test_an_unreachable_head_is_tried_once_per_cluster(recorded, monkeypatch) -> None:
    """`runs` with the laptop offline: one connection timeout per cluster, not one per run."""
    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.runs import on_cluster

    doc = json.loads((recorded.dir / "options.json").read_text())
    recorded.store.make_run_dir("r2")
    (recorded.store.run_dir("r2") / "options.json").write_text(
        json.dumps({**doc, "handle": {**doc["handle"], "run_id": "r2"}})
    )
    tries = []

    def unreachable(handle, host):
        tries.append(handle.run_id)
        raise DdpctlError("cannot reach login-host: timed out")

    monkeypatch.setattr(on_cluster, "reopen", unreachable)
    on_cluster.bring_all_up_to_date(recorded.store)
    assert tries == ["r1"]
    assert not (recorded.dir / "run.json").exists()


@pytest.mark.parametrize(
    "launch, head_supervises, replaces, on_head, environ, kind",
    [
        ("sbatch", True, False, False, {}, "slurm"),  # Slurm keeps it, whatever the provider
        ("sbatch", False, True, False, {"DDPCTL_SUPERVISOR": "here"}, "slurm"),
        ("torchrun", True, False, False, {}, "head"),  # aws, onprem: the head's supervisor, outliving this ddpctl
        ("torchrun", True, False, False, {"DDPCTL_SUPERVISOR": "head"}, "head"),
        ("torchrun", True, True, False, {}, "here"),  # an elastic spot run: the cloud's credentials are here
        ("torchrun", True, True, True, {}, "head"),  # ... unless the head has its own (--head-instance-profile)
        ("torchrun", True, True, True, {"DDPCTL_SUPERVISOR": "here"}, "here"),
        ("torchrun", True, False, False, {"DDPCTL_SUPERVISOR": "here"}, "here"),
        ("torchrun", False, False, False, {}, "here"),  # local processes, pcluster's compute nodes: no mesh from a head
    ],
)
def test_the_launcher_kind_is_chosen_in_one_place(launch, head_supervises, replaces, on_head, environ, kind) -> None:
    from ddpctl.infra.launch.launcher import choose
    from ddpctl.infra.model.state import LaunchKind

    chosen = choose(
        LaunchKind(launch),
        head_supervises=head_supervises,
        replaces_nodes=replaces,
        environ=environ,
        head_replaces=on_head,
    )
    assert chosen == kind


def test_a_prepared_plan_carries_its_supervisor(home, monkeypatch) -> None:
    """``prepare`` asks ``choose`` and the plan carries its answer to the executor (and its record)."""
    from ddpctl.infra.model.host import Host
    from ddpctl.infra.model.state import ClusterState, NodeInfo
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs.options import RunOptions
    from ddpctl.infra.runs.prepare import prepare
    from tests.support.specs import cluster_spec

    store = StateStore(home)
    nodes = [
        NodeInfo(f"node{i}", f"10.0.0.{i + 1}", "/w", ssh=Host(name=f"node{i}", address=f"10.0.0.{i + 1}"))
        for i in range(2)
    ]
    spec = cluster_spec(name="c", provider="onprem", inventory="/dev/null", nodes=2)
    store.save(ClusterState(spec=spec, cluster_id="abc", status="up", nodes=nodes))
    monkeypatch.delenv("DDPCTL_SUPERVISOR", raising=False)
    plan = prepare(RunOptions(job="message-passing", name="c"), store).plan
    assert plan.supervision == "head" and plan.to_dict()["supervision"] == "head"
    assert prepare(RunOptions(job="message-passing"), StateStore(home / "empty")).plan.supervision == "here"  # local
    monkeypatch.setenv("DDPCTL_SUPERVISOR", "here")
    assert prepare(RunOptions(job="message-passing", name="c"), store).plan.supervision == "here"
