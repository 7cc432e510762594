"""`check`'s health part (infra/runs/health.py): its two launches planned, and each node judged from
what they print, with a stand-in executor that answers as the node programs would. Real runs:
tests/integration/test_check_health.py (the test cluster), test_check_in_node.py (local nodes)."""

from __future__ import annotations

import time

import pytest

from ddpctl.infra import node_programs
from ddpctl.infra.launch.nodes import OutputLine
from ddpctl.infra.model.errors import DdpctlError
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.state import ClusterState, NodeInfo
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.runs.check import run_check
from ddpctl.infra.runs.health import NodeHealth, choose_healthy, plan_burn, plan_query, run_health
from ddpctl.infra.runs.options import RunOptions
from ddpctl.infra.runs.prepare import prepare
from tests.support.specs import cluster_spec

H100 = "NVIDIA H100 80GB HBM3"


def smi_line(i: int, ecc: int = 0, mask: str = "0x0000000000000001", aggregate: int = 0) -> str:
    return f"GPUHEALTH gpu {i}, GPU-{i:04d}, {H100}, 00000000:{0x18 + i:02X}:00.0, {ecc}, {aggregate}, {mask}"


def cluster(gpus: tuple[int, ...], devices: tuple[str, ...] = ()) -> ClusterState:
    nodes = [
        NodeInfo(f"n{i}", f"10.0.0.{i}", f"/w{i}", gpus=g, python="/opt/py", devices=devices[i] if devices else "")
        for i, g in enumerate(gpus)
    ]
    return ClusterState(spec=cluster_spec(name="c", provider="onprem", nodes=len(gpus)), cluster_id="x", nodes=nodes)


class Executor:
    """Answers each launch as its nodes would: ``said[job][node]``, their lines."""

    said: dict[str, dict[str, list[str]]] = {}
    plans: list = []

    def __init__(self, sink) -> None:
        self.sink = sink

    def run(self, plan):
        Executor.plans.append(plan)
        for launch in plan.nodes:
            for text in Executor.said.get(plan.job, {}).get(launch.node, []):
                self.sink(OutputLine(launch.node, None, text))
        return type("Result", (), {"ok": plan.job != "check-in-node" or "fail" not in Executor.said})()


def healthy(gpus: int, tflops: float = 700.0) -> tuple[list[str], list[str]]:
    query = [smi_line(i) for i in range(gpus)] + ["GPUHEALTH done"]
    burn = [f"burn gpu={i} tflops={tflops:.2f} dtype=bfloat16 name={H100}" for i in range(gpus)]
    return query, burn


def checked(c: ClusterState, query: dict[str, list[str]], burn: dict[str, list[str]]) -> dict[str, NodeHealth]:
    Executor.said, Executor.plans = {"check-health": query, "check-burn": burn}, []
    return run_health(c, Executor, lambda _: None)


def test_both_launches_are_node_programs_with_the_nodes_python_on_every_node() -> None:
    c = cluster((4, 0), devices=("0,1,2,3", ""))
    query, burn = plan_query(c), plan_burn(c, 2.5)
    assert [n.node for n in query.nodes] == ["n0", "n1"] and query.store is None
    assert query.nodes[0].argv == node_programs.argv("/opt/py", "gpu_health")
    assert burn.nodes[1].argv == node_programs.argv("/opt/py", "gpu_burn", "--seconds", "2.5")
    # a local node's share of its host's GPUs, numbered as nvidia-smi numbers them
    assert query.nodes[0].env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and "CUDA_VISIBLE_DEVICES" not in query.nodes[1].env
    assert burn.nodes[1].env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_healthy_nodes_and_one_without_gpus_pass() -> None:
    (q0, b0), (q1, b1) = healthy(4), healthy(4, 690.0)
    verdicts = checked(
        cluster((4, 4, 0)),
        {"n0": q0, "n1": q1, "n2": ["GPUHEALTH smi missing", "GPUHEALTH done"]},
        {"n0": b0, "n1": b1, "n2": ["burn no-gpu torch 2.13.0 sees no CUDA device"]},
    )
    assert [v.ok for v in verdicts.values()] == [True, True, True]
    assert verdicts["n0"].line() == "n0: healthy (4 GPU(s), burn median 700.0 TFLOPS)"
    assert verdicts["n2"].line() == "n2: healthy (no GPU)" and verdicts["n2"].notes == ["no GPU"]
    assert [p.job for p in Executor.plans] == ["check-health", "check-burn"]


def test_each_sick_node_is_named_with_its_reasons() -> None:
    q0, b0 = healthy(4)
    q1 = [smi_line(0), smi_line(1), smi_line(2), "GPUHEALTH done"]  # one fewer than configure counted
    q2 = [smi_line(0, ecc=3), smi_line(1, mask="0x0000000000000040"), smi_line(2), smi_line(3), "GPUHEALTH done"]
    q3 = [
        *healthy(4)[0][:-1],
        "GPUHEALTH xid [ 9001.0] NVRM: Xid (PCI:0000:1a:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        "GPUHEALTH xid [ 9002.0] NVRM: Xid (PCI:0000:18:00): 13, pid=2, name=python, Graphics SM Warp Exception",
        "GPUHEALTH done",
    ]
    slow = [*b0[:3], f"burn gpu=3 tflops=350.00 dtype=bfloat16 name={H100}"]
    verdicts = checked(
        cluster((4, 4, 4, 4)),
        {"n0": q0, "n1": q1, "n2": q2, "n3": q3},
        {n: b0 for n in ("n1", "n2", "n3")} | {"n0": slow},
    )
    assert [n for n, v in verdicts.items() if not v.ok] == ["n0", "n1", "n2", "n3"]
    assert verdicts["n0"].problems == [
        "GPU 3: slow: 350.0 TFLOPS in its burn, 50% of the median 700.0 of the cluster's NVIDIA H100 80GB HBM3"
    ]
    assert verdicts["n1"].line() == "n1: unhealthy: nvidia-smi lists 3 GPU(s), configure counted 4"
    assert verdicts["n2"].problems == [
        "GPU 0: 3 uncorrected ECC error(s) since the driver loaded",
        "GPU 1: clocks held down: HW Thermal Slowdown",
    ]
    assert verdicts["n3"].problems == ["GPU 2: Xid 79 (pid=1, name=python, GPU has fallen off the bus.)"]
    assert verdicts["n3"].notes == [
        "GPU 0: Xid 13 (pid=2, name=python, Graphics SM Warp Exception): most often the application's own error"
    ]


def test_what_could_not_be_asked_is_said() -> None:
    verdicts = checked(
        cluster((2, 2, 2, 0, 0)),
        {
            "n0": ["GPUHEALTH smi missing", "GPUHEALTH done"],
            "n1": ["GPUHEALTH smi failed exit 124: did not answer in 30 s", "GPUHEALTH done"],
            "n2": [
                *healthy(2)[0][:-1],
                "GPUHEALTH log unreadable dmesg: read kernel buffer failed: Operation not permitted",
                "GPUHEALTH done",
            ],
            "n3": [],
            "n4": ["GPUHEALTH smi failed exit 9: NVIDIA-SMI has failed", "GPUHEALTH done"],
        },
        {
            "n2": [
                "burn gpu=0 tflops=10.00 dtype=bfloat16 name=x",
                "burn failed gpu=1 RuntimeError: CUDA error: unspecified launch failure",
            ]
        },
    )
    assert verdicts["n0"].problems == ["no nvidia-smi, but configure counted 2 GPU(s)"]
    assert verdicts["n1"].problems == [
        "nvidia-smi failed exit 124: did not answer in 30 s (configure counted 2 GPU(s))"
    ]
    assert verdicts["n2"].problems == ["GPU 1: burn failed: RuntimeError: CUDA error: unspecified launch failure"]
    assert verdicts["n2"].notes == [
        "Xid not read: kernel log dmesg: read kernel buffer failed: Operation not permitted"
    ]
    assert verdicts["n3"].problems == ["its health query said nothing (see the lines above)"]
    # a node where configure counted no GPU: a failing nvidia-smi is a note (a driver package, no GPU)
    assert verdicts["n4"].ok and verdicts["n4"].line() == "n4: healthy (no GPU)"
    assert verdicts["n4"].notes == ["no GPU (nvidia-smi failed exit 9: NVIDIA-SMI has failed)"]


def test_more_gpus_than_counted_and_lifetime_ecc_are_notes() -> None:
    query = [smi_line(0, aggregate=5), smi_line(1), "GPUHEALTH done"]
    verdicts = checked(cluster((1,)), {"n0": query}, {"n0": ["burn no-gpu torch 2.13.0 sees no CUDA device"]})
    assert verdicts["n0"].ok and verdicts["n0"].notes == [
        "nvidia-smi lists 2 GPU(s), configure counted 1: `ddpctl configure --tags nvidia` counts them again",
        "GPU 0: 5 uncorrected ECC error(s) in its lifetime",
        "burn not run: torch 2.13.0 sees no CUDA device",
    ]


def test_check_reports_health_and_a_failed_in_node_all_reduce_is_the_nodes_reason() -> None:
    q, b = healthy(2)
    Executor.said = {"check-health": {"n0": q}, "check-burn": {"n0": b}, "fail": {}}
    Executor.plans = []
    report = run_check(cluster((2,)), Executor, 29500, lambda _: None, size_mb=8, health=True)
    assert [p.job for p in Executor.plans] == ["check-health", "check-burn", "check-in-node"]
    assert report.unhealthy == ["n0"] and not report.ok
    assert report.health["n0"].problems == [
        "its in-node all-reduce (2 ranks) failed: `ddpctl run message-passing --nproc-per-node gpu` shows why"
    ]
    doc = report.to_dict()
    assert doc["ok"] is False and doc["unhealthy"] == ["n0"]
    assert doc["health"][0]["gpus_found"] == 2 and doc["health"][0]["burn_tflops"] == {"0": 700.0, "1": 700.0}


def test_an_unhealthy_node_is_not_measured_inside() -> None:
    Executor.said = {"check-health": {"n0": [smi_line(0), "GPUHEALTH done"]}}
    Executor.plans = []
    report = run_check(cluster((2,)), Executor, 29500, lambda _: None, size_mb=8, health=True, burn_s=0)
    assert [p.job for p in Executor.plans] == ["check-health"]
    assert report.notes[-1] == "no in-node all-reduce on n0: unhealthy already"


def verdicts(*sick: str) -> dict[str, NodeHealth]:
    out = {name: NodeHealth(name, 2, 2) for name in ("n0", "n1", "n2")}
    for name in sick:
        out[name].problems.append("GPU 1: 4 uncorrected ECC error(s) since the driver loaded")
    return out


def test_healthy_only_runs_on_the_healthy_nodes_as_many_as_asked_or_elastic_as_many_as_there_are() -> None:
    assert choose_healthy("c", verdicts(), None, 0) == (("n0", "n1", "n2"), 3, 0)
    assert choose_healthy("c", verdicts("n0"), 2, 0) == (("n1", "n2"), 2, 0)  # the head's place goes to n1
    assert choose_healthy("c", verdicts("n1"), 3, 2) == (("n0", "n2"), 2, 2)  # elastic 2:3 on 2
    assert choose_healthy("c", verdicts(), 3, 2) == (("n0", "n1", "n2"), 3, 2)


def test_too_few_healthy_nodes_is_one_line_naming_them() -> None:
    for nodes, min_nodes, asked in ((None, 0, "every node"), (3, 0, "--nodes 3"), (3, 2, "--nodes 2:3")):
        with pytest.raises(DdpctlError) as info:
            choose_healthy("c", verdicts("n0", "n2") if min_nodes else verdicts("n2"), nodes, min_nodes)
        assert "\n" not in str(info.value) and asked in str(info.value)
    assert str(info.value) == (
        "--healthy-only: 1 healthy node(s) of 3 in cluster 'c', 2 needed (--nodes 2:3); unhealthy: "
        "n0 (GPU 1: 4 uncorrected ECC error(s) since the driver loaded), n2 (GPU 1: 4 uncorrected ECC error(s) "
        "since the driver loaded)"
    )


def test_a_run_on_the_healthy_nodes_only_is_planned_on_them_the_first_its_head(home) -> None:
    store = StateStore(home)
    nodes = [
        NodeInfo(f"node{i}", f"10.0.0.{i + 1}", "/w", ssh=Host(name=f"node{i}", address=f"10.0.0.{i + 1}"))
        for i in range(3)
    ]
    spec = cluster_spec(name="c", provider="onprem", inventory="/dev/null", nodes=3)
    store.save(ClusterState(spec=spec, cluster_id="abc", status="up", nodes=nodes))
    opts = RunOptions(job="message-passing", name="c", nodes=2, min_nodes=2)
    prep = prepare(opts, store, only=("node1", "node2"))
    assert [n.node for n in prep.plan.nodes] == ["node1", "node2"]
    assert prep.plan.rdzv_endpoint.startswith("10.0.0.2:") and prep.plan.store.node == "node1"


def test_healthy_only_needs_a_cluster_that_is_up(home) -> None:
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs.check import healthy_run

    with pytest.raises(UsageError, match="--healthy-only checks the nodes of a cluster that is up: bring one up first"):
        healthy_run(RunOptions(job="mnist"), StateStore(home), lambda _: None)


def _result(**kw):
    from ddpctl.infra.model.results import NodeResult, NodeStatus, RunResult

    nodes = [NodeResult(f"n{i}", 0, NodeStatus.OK) for i in range(4)]
    for name in kw.pop("lost", ()):
        nodes[int(name[1])] = NodeResult(name, 1, NodeStatus.LOST)
    return RunResult(run_id="r1", exit_code=kw.pop("exit_code", 1), wall_s=1.0, nodes=nodes, **kw)


def test_after_a_run_the_nodes_it_named_are_the_ones_looked_at() -> None:
    """failed (or hung: failed_node), lost and slow nodes, only those with GPUs, in the cluster's order;
    none for a run that ended well with none named, or that Ctrl-C ended."""
    from ddpctl.infra.runs.health_in_runs import suspects

    c = cluster((4, 4, 0, 4))
    named = suspects(_result(failed_node="n3", lost=["n1"], slow=["n2 (1.60x)", "n0 (1.30x)"]), c)
    assert [n.name for n in named] == ["n0", "n1", "n3"]  # n2: no GPU
    assert suspects(_result(exit_code=0), c) == []
    assert suspects(_result(failed_node="n0", interrupted=True, exit_code=130), c) == []


def test_after_a_run_only_the_named_nodes_are_asked_and_only_the_unhealthy_said() -> None:
    from ddpctl.infra.runs.health_in_runs import after_run

    q0, _ = healthy(4)
    q1 = [
        smi_line(0),
        "GPUHEALTH xid [ 9001.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=python, GPU has fallen off the bus.",
        "GPUHEALTH done",
    ]
    Executor.said, Executor.plans = {"check-health": {"n0": q0, "n1": q1}}, []
    said: list[str] = []
    lines = after_run(_result(failed_node="n1", slow=["n0 (1.40x)"]), cluster((4, 4, 4, 4)), Executor, said.append)
    assert [p.job for p in Executor.plans] == ["check-health"]  # no burn: seconds, not minutes
    assert [n.node for n in Executor.plans[0].nodes] == ["n0", "n1"]
    assert lines == {
        "n0": "",
        "n1": "n1: unhealthy: nvidia-smi lists 1 GPU(s), configure counted 4; "
        "GPU 0: Xid 79 (pid=1, name=python, GPU has fallen off the bus.)",
    }
    assert said[0] == "health: looking at n0, n1, named by the run"
    # a node that does not answer is said so, not named unhealthy
    Executor.said, said[:] = {"check-health": {"n0": q0}}, []
    assert after_run(_result(failed_node="n1", slow=["n0 (1.40x)"]), cluster((4, 4)), Executor, said.append) == {
        "n0": ""
    }
    assert "health: n1 did not answer the health query" in said
    Executor.plans = []
    assert after_run(_result(exit_code=0), cluster((4, 4)), Executor, said.append) == {} and Executor.plans == []


def test_what_the_heads_supervisor_asked_is_judged_here() -> None:
    """A run supervised on the head node: the health query's lines it brought back, by node (``probes``),
    judged as a look of ddpctl's own; a node that printed nothing, not named."""
    from ddpctl.infra.runs.health_in_runs import judge

    probes = {"n0": healthy(4)[0], "n1": [smi_line(0, ecc=3), "GPUHEALTH done"], "n3": []}
    assert judge(cluster((4, 4, 4, 4)), probes) == [
        "n1: unhealthy: nvidia-smi lists 1 GPU(s), configure counted 4; "
        "GPU 0: 3 uncorrected ECC error(s) since the driver loaded"
    ]
    assert judge(cluster((4, 4)), {}) == []


def test_a_run_supervised_on_the_head_carries_the_health_query_of_its_gpu_nodes(home) -> None:
    """The head's supervisor asks the nodes a run named itself: the plan carries each GPU node's query
    (not in the run's record), the head's spec their lines on the mesh; a run supervised here, none."""
    from dataclasses import replace

    from ddpctl.infra.launch import head
    from ddpctl.infra.launch.launcher import Supervision

    store = StateStore(home)
    state = cluster((2, 0, 2))
    state = replace(state, spec=replace(state.spec, name="default"))
    store.save(state)
    prep = prepare(RunOptions(job="message-passing", nodes=3, name="default"), store)
    assert prep.plan.supervision == Supervision.HEAD  # on-prem: its head supervises
    assert [q.node for q in prep.plan.health_query] == ["n0", "n2"]
    assert "health_query" not in prep.plan.to_dict()
    doc = head.spec(prep.plan, ["a", "b", "c"], ["m0", "m1", "m2"], "", 3.0)
    assert [(q["node"], q["host"]) for q in doc["health"]] == [("n0", "m0"), ("n2", "m2")]
    assert "gpu_health" in doc["health"][0]["command"]
    assert doc["health_every_s"] == 600 and "health_every_s" not in prep.plan.to_dict()  # run --health-every's
    off = prepare(RunOptions(job="message-passing", nodes=3, name="default", health_every_s=0), store)
    assert head.spec(off.plan, ["a", "b", "c"], ["m0", "m1", "m2"], "", 3.0)["health_every_s"] == 0


def test_the_heads_supervisor_asks_only_the_named_nodes_with_gpus() -> None:
    from ddpctl.infra.launch import head_agent

    spec = {"nodes": [{"node": "n0"}], "health": [{"node": "n0", "host": "m0", "command": "q"}]}
    said: list[OutputLine] = []
    assert head_agent.ask_health(spec, _result(failed_node="n1"), said.append) == {} and said == []
    assert head_agent.ask_health(spec, _result(failed_node="n0", interrupted=True), said.append) == {}


def test_the_heads_timer_keeps_each_nodes_distinct_looks_the_latest_last() -> None:
    """``run --health-every`` with no ddpctl attached: the head's supervisor asks the GPU nodes on its timer
    and keeps what each said, once per distinct text, the one seen last moved last, at most KEEP."""
    import threading

    from ddpctl.infra.launch import head_agent

    ok, sick = healthy(2)[0], [smi_line(0, ecc=2), smi_line(1), "GPUHEALTH done"]
    answers = iter([{"n0": ok, "n1": ok}, {"n0": ok, "n1": sick}, {"n0": ok, "n1": ok}] + [{}] * 1000)
    asked = threading.Event()

    def asker(spec, queries):
        assert [q["node"] for q in queries] == ["n0", "n1"]
        got = next(answers)
        if not got:
            asked.set()
        return got

    spec = {"nodes": [{"node": "n0"}], "health_every_s": 0.001, "health": [{"node": "n0"}, {"node": "n1"}]}
    said: list[OutputLine] = []
    timer = head_agent.HealthTimer(spec, said.append, asker)
    assert asked.wait(10)
    assert timer.stop() == {"n0": [ok], "n1": [sick, ok]}
    assert [line.text for line in said] == ["ddpctl: health: asking n0, n1 every 0.001 s"]
    many = head_agent.HealthTimer({**spec, "health_every_s": 0}, said.append, asker)  # off: no thread, no line
    assert many.threads == [] and many.stop() == {} and len(said) == 1

    many.done.clear()  # its timer, run here by hand
    counter = iter(range(40))

    def changing(spec, queries):  # 40 looks, each saying something new: the last KEEP kept
        n = next(counter)
        if n == 39:
            many.done.set()
        return {"n1": [f"GPUHEALTH gpu {n}"]}

    many.asker = changing
    many._every(0)
    kept = many.looks["n1"]
    assert len(kept) == head_agent.HealthTimer.KEEP and kept[-1] == ["GPUHEALTH gpu 39"]


def test_the_heads_supervisor_looks_at_once_at_a_node_named_slow() -> None:
    """With no ddpctl attached, a node the watcher names slow is asked at once (its clocks may be held down
    only while it is slow), once a run, whatever the timer; a node without GPUs, a rank's line: not asked."""
    from ddpctl.infra.launch import head_agent

    sick = [smi_line(0, mask="0x0000000000000040"), "GPUHEALTH done"]
    asked: list[list[str]] = []

    def asker(spec, queries):
        asked.append([q["node"] for q in queries])
        return {q["node"]: sick for q in queries}

    spec = {"nodes": [{"node": "n0"}], "health_every_s": 0, "health": [{"node": "n0"}, {"node": "n1"}]}
    timer = head_agent.HealthTimer(spec, lambda line: None, asker)
    note = "ddpctl: n1 is slow: its ranks compute 1.40x the median step time (window of 20 steps)"
    timer.line(OutputLine("n1", 1, note))  # a rank printing it: not the watcher
    timer.line(OutputLine("n1", None, note))
    timer.line(OutputLine("n1", None, note))  # once a run
    timer.line(OutputLine("n2", None, note.replace("n1", "n2")))  # no GPUs: not in the query
    assert timer.stop() == {"n1": [sick]} and asked == [["n1"]]
    timer.line(OutputLine("n0", None, note.replace("n1", "n0")))  # the run is over
    assert asked == [["n1"]]


def test_what_the_heads_timer_found_is_judged_here_the_end_s_look_first() -> None:
    """The looks judged as ``LiveLook`` keeps its own (a node's last unhealthy line, though it looked healthy
    after), after the nodes the look at the run's end asked; a node that end's look asked, as it says."""
    from ddpctl.infra.runs.health_in_runs import found_in_looks, recorded

    ok, sick = healthy(2)[0], [smi_line(0, ecc=2), smi_line(1), "GPUHEALTH done"]
    c = cluster((2, 2, 2))
    looks = {"n0": [ok], "n1": [sick, ok], "n2": [sick]}
    ecc = "GPU 0: 2 uncorrected ECC error(s) since the driver loaded"
    assert found_in_looks(c, looks) == {"n1": f"n1: unhealthy: {ecc}", "n2": f"n2: unhealthy: {ecc}"}
    assert recorded(c, {}, looks) == [f"n1: unhealthy: {ecc}", f"n2: unhealthy: {ecc}"]
    assert recorded(c, {"n2": ok}, looks) == [f"n1: unhealthy: {ecc}"]  # n2 healthy at the end
    assert recorded(c, {"n0": sick}, {}) == [f"n0: unhealthy: {ecc}"]
    # named at the end but silent there: what the timer found of it stays (attached, ``with_found`` too)
    assert recorded(c, {"n2": []}, looks) == [f"n1: unhealthy: {ecc}", f"n2: unhealthy: {ecc}"]


def test_runs_says_which_named_nodes_were_unhealthy() -> None:
    from ddpctl.infra.runs.records import sickness

    doc = {"result": {"cause": "", "slow": ["n0 (1.40x)"], "health": ["n1: unhealthy: GPU 0: Xid 79 (...)"]}}
    assert sickness(doc, "failed (exit 1)") == "failed (exit 1); slow: n0 (1.40x); unhealthy: n1"
    assert sickness({"result": {}}, "succeeded") == "succeeded"


def test_a_lost_nodes_reasons_from_the_query_alone() -> None:
    from ddpctl.infra.runs.health_in_runs import node_reasons

    q1 = [smi_line(0, ecc=2), smi_line(1), "GPUHEALTH done"]
    Executor.said, Executor.plans = {"check-health": {"n1": q1, "n0": healthy(2)[0]}}, []
    c = cluster((2, 2))
    assert (
        node_reasons(c, "n1", Executor, lambda _: None) == "GPU 0: 2 uncorrected ECC error(s) since the driver loaded"
    )
    assert [p.job for p in Executor.plans] == ["check-health"] and [n.node for n in Executor.plans[0].nodes] == ["n1"]
    assert node_reasons(c, "n0", Executor, lambda _: None) == ""
    Executor.said = {"check-health": {}}  # n1 did not answer: not replaced on its silence
    assert node_reasons(c, "n1", Executor, lambda _: None) == ""


def test_a_node_named_slow_while_the_run_goes_is_looked_at_once_in_the_background() -> None:
    from ddpctl.infra.runs.health_in_runs import LiveLook

    asked: list[list[str]] = []
    said: list[str] = []

    def ask(nodes):
        asked.append([n.name for n in nodes])
        return [f"{nodes[0].name}: unhealthy: GPU 0: clocks held down: HW Thermal Slowdown"]

    live = LiveLook(cluster((2, 2, 0)), ask, said.append)
    slow = "ddpctl: {} is slow: its ranks compute 1.60x the other nodes' median (160 ms vs 100 ms a step), ..."
    live.line(OutputLine("n1", 0, slow.format("n1")))  # a rank's own line: not the supervisor's note
    live.line(OutputLine("n1", None, slow.format("n1")))
    live.line(OutputLine("n1", None, slow.format("n1")))  # named again later: looked at once
    live.line(OutputLine("n2", None, slow.format("n2")))  # no GPU: nothing to look at
    live.line(OutputLine("n0", None, "ddpctl: n0 is back to the others' speed (1.01x)"))
    live.wait()
    assert asked == [["n1"]]
    assert said == ["health: n1: unhealthy: GPU 0: clocks held down: HW Thermal Slowdown"]


def test_the_live_look_asks_on_its_timer_and_says_what_changed() -> None:
    """``run --health-every``: the run's nodes with GPUs asked on a timer; a node's line said when it first
    comes and when it changes, not at every look; what was found kept for the summary; stopped by ``wait``."""
    import threading

    from ddpctl.infra.runs.health_in_runs import LiveLook

    answers = [[], ["n1: unhealthy: GPU 0: 2 uncorrected ECC error(s) since the driver loaded"]] * 2
    answers += [["n1: unhealthy: GPU 0: 4 uncorrected ECC error(s) since the driver loaded"]] * 50
    asked: list[list[str]] = []
    said: list[str] = []
    enough = threading.Event()

    def ask(nodes):
        asked.append([n.name for n in nodes])
        if len(asked) >= 6:
            enough.set()
        return answers[len(asked) - 1]

    live = LiveLook(cluster((2, 2, 0)), ask, said.append, every_s=0.01)
    assert enough.wait(30)
    live.wait()
    looks = len(asked)
    assert asked[0] == ["n0", "n1"]  # the nodes with GPUs, not n2
    assert said == [
        "health: n1: unhealthy: GPU 0: 2 uncorrected ECC error(s) since the driver loaded",
        "health: n1: unhealthy: GPU 0: 4 uncorrected ECC error(s) since the driver loaded",
    ]
    assert live.found == {"n1": "n1: unhealthy: GPU 0: 4 uncorrected ECC error(s) since the driver loaded"}
    time.sleep(0.1)
    assert len(asked) == looks  # stopped
    assert LiveLook(cluster((2, 2)), ask, said.append, every_s=0).threads == []  # --health-every 0: off
    assert LiveLook(cluster((0, 0)), ask, said.append, every_s=5).threads == []  # no GPUs: nothing to ask


def test_parallelclusters_compute_nodes_are_counted_by_their_instance_type() -> None:
    """pcluster's compute nodes are never configured one by one: their GPU count is the instance type's."""
    from dataclasses import replace

    c = cluster((4,))
    pc = replace(c, spec=cluster_spec(name="c", provider="pcluster", nodes=1))
    q = [smi_line(0), smi_line(1), "GPUHEALTH done"]
    Executor.said = {"check-health": {"n0": q}, "check-burn": {}}
    [onprem] = run_health(c, Executor, lambda _: None, burn_s=0).values()
    [compute] = run_health(pc, Executor, lambda _: None, burn_s=0).values()
    assert onprem.problems == ["nvidia-smi lists 2 GPU(s), configure counted 4"]
    assert compute.problems == ["nvidia-smi lists 2 GPU(s), its instance type has 4"]
