"""Watching a run (launch/watch.py), pure: beats and lines in at given times, alarms out; the
heartbeat's throttle (training/metrics.py) on a fake clock; what ``look`` finds turned into one line."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

import ddpctl
from ddpctl.infra.launch.watch import Beat, RankLook, Rules, Stacks, Watcher, hang_cause, parse_beat, parse_look
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.spec import RunSpec

RULES = Rules(hang_timeout_s=600, floor_s=60, steps=20, window_s=30)


def beating(w: Watcher, until: float, nodes: dict[str, float], every: float = 5.0, start: float = 0.0) -> None:
    """Each node's rank (rank i on node i) beats every ``every`` s from ``start`` to ``until``, each
    with a step time of 0.1 s and the node's compute time."""
    t = start
    while t <= until:
        for i, (node, compute) in enumerate(nodes.items()):
            w.beat(node, i, Beat(int(t * 10), 0.1, compute), t)
        t += every


def alarms_until(w: Watcher, start: float, until: float, step: float = 1.0) -> list:
    found, t = [], start
    while t <= until:
        found += w.tick(t)
        t += step
    return found


def test_a_beat_line_is_parsed_and_anything_else_is_not() -> None:
    assert parse_beat('DDPCTL_BEAT {"step": 7, "step_s": 0.25, "compute_s": 0.1}') == Beat(7, 0.25, 0.1)
    assert parse_beat('DDPCTL_BEAT {"step": 1}') == Beat(1)
    assert parse_beat("DDPCTL_BEAT {broken") is None
    assert parse_beat('DDPCTL_BEAT {"step": "x"}') is None
    assert parse_beat("step 7 | loss 0.3") is None
    assert parse_beat('DDPCTL_BEAT {"step": 3, "step_s": -1, "compute_s": true}') == Beat(3)


def test_a_run_whose_ranks_all_stop_beating_is_hung_after_its_floor() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 100, {"node0": 0.05, "node1": 0.05})
    assert alarms_until(w, 0, 100) == []
    assert w.timeout_s() == 60  # 20 steps of 0.1 s is less than the floor
    found = alarms_until(w, 101, 200)
    assert [a.kind for a in found] == ["hung"]
    assert "no beat and no output from any rank for 60 s" in found[0].text
    assert w.tick(300) == []  # said once


def test_the_timeout_follows_the_runs_own_step_time() -> None:
    w = Watcher(RULES, started=0.0)
    w.beat("node0", 0, Beat(1, 30.0), 0.0)  # 30 s steps: 20 of them
    assert w.timeout_s() == 600
    assert alarms_until(w, 0, 599, 10) == []
    assert [a.kind for a in w.tick(600)] == ["hung"]


def test_output_is_progress_too() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 10, {"node0": 0.05})
    for t in range(10, 300, 30):
        w.line(t)  # an evaluation printing, no beats
        assert w.tick(t) == []


def test_a_script_that_never_beats_is_hung_after_the_hang_timeout_of_silence() -> None:
    w = Watcher(Rules(hang_timeout_s=120), started=0.0)
    w.line(50, rank=0)  # a rank's line: the job runs
    assert alarms_until(w, 50, 169, 10) == []
    found = w.tick(170)
    assert [a.kind for a in found] == ["hung"] and found[0].text.startswith("no output from any rank for 120 s")


def test_no_hang_is_called_while_torchrun_may_still_rendezvous() -> None:
    w = Watcher(Rules(hang_timeout_s=20), started=0.0)
    w.line(1)  # the agents' start-up lines: no rank has printed yet
    assert w.timeout_s() == 900 and alarms_until(w, 1, 900, 10) == []  # torchrun's join timeout is 600 s
    assert [a.kind for a in w.tick(901)] == ["hung"]  # a job stuck before its first line, all the same


def test_a_short_hang_timeout_shortens_the_floor() -> None:
    w = Watcher(Rules(hang_timeout_s=15, floor_s=120), started=0.0)
    w.beat("node0", 0, Beat(1, 0.1), 0.0)
    assert w.timeout_s() == 15


def test_a_rank_silent_while_the_others_beat_is_named_behind_once() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 50, {"node0": 0.05, "node1": 0.05})
    t = 55.0
    while t <= 200:
        w.beat("node0", 0, Beat(int(t), 0.1, 0.05), t)  # node1's rank 1 stopped beating at 50
        t += 5
    found = alarms_until(w, 50, 200)
    assert [(a.kind, a.node, a.rank) for a in found] == [("behind", "node1", 1)]
    assert "rank 1 on node1 has sent no heartbeat for 60 s" in found[0].text
    w.beat("node1", 1, Beat(999, 0.1), 201)  # back: may be named again later
    assert not w.ranks[("node1", 1)].behind_said


def test_a_node_slower_than_the_others_is_named_once_and_again_after_recovering() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 60, {"node0": 0.10, "node1": 0.10, "node2": 0.10})
    assert alarms_until(w, 0, 60, 5) == []
    beating(w, 120, {"node0": 0.10, "node1": 0.18, "node2": 0.10}, start=65)
    found = alarms_until(w, 65, 120, 5)
    assert [(a.kind, a.node) for a in found] == [("slow", "node1")]
    assert "node1 is slow: its ranks compute 1." in found[0].text and "the other nodes' median" in found[0].text
    beating(w, 200, {"node0": 0.10, "node1": 0.10, "node2": 0.10}, start=125)
    assert [(a.kind, a.node) for a in alarms_until(w, 125, 200, 5)] == [("recovered", "node1")]
    beating(w, 260, {"node0": 0.10, "node1": 0.30, "node2": 0.10}, start=205)
    assert [(a.kind, a.node) for a in alarms_until(w, 205, 260, 5)] == [("slow", "node1")]
    assert w.slow_nodes() == ["node1 (3.00x)"]


def test_two_nodes_one_half_as_fast_again_is_named() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 60, {"node0": 0.10, "node1": 0.15})
    assert [(a.kind, a.node) for a in alarms_until(w, 0, 60, 5)] == [("slow", "node1")]


def test_one_node_or_no_compute_times_names_no_straggler() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 60, {"node0": 0.10})
    w.beat("node1", 1, Beat(1, 0.1), 1.0)  # beats without a compute time
    assert [a for a in alarms_until(w, 0, 60, 5) if a.kind == "slow"] == []


def test_an_elastic_restart_that_prints_is_not_a_hang() -> None:
    w = Watcher(RULES, started=0.0)
    beating(w, 30, {"node0": 0.05, "node1": 0.05, "node2": 0.05})
    for t in range(30, 120, 20):  # node2 lost: the survivors' agents print their new rendezvous
        w.line(t)
    beating(w, 200, {"node0": 0.05, "node1": 0.05}, start=120)
    found = alarms_until(w, 30, 200, 5)
    assert [a.kind for a in found] == ["behind"] and found[0].node == "node2"  # named, not hung


def test_a_stopped_rank_is_blamed_with_its_state() -> None:
    looks = [RankLook("node0", 0, 11, "S"), RankLook("node1", 1, 12, "T"), RankLook("node1", 2, 13, "S")]
    node, text = hang_cause(looks, {}, 61.2, "r1")
    assert node == "node1"
    assert text.startswith("hung: rank 1 on node1 is stopped (T) (no progress for 61 s); stopped from outside")
    assert "`ddpctl logs r1`" in text and "\n" not in text


def test_a_rank_elsewhere_than_the_others_is_blamed() -> None:
    looks = [RankLook(f"node{r // 2}", r, 10 + r, "S") for r in range(4)]
    places = {(f"node{r // 2}", r): "train.py:20 (main)" for r in range(4)}
    places[("node0", 1)] = "train.py:24 (main)"
    node, text = hang_cause(looks, places, 30, "r1")
    assert node == "node0"
    assert text.startswith(
        "hung: rank 1 on node0 at train.py:24 (main), 3 other rank(s) at train.py:20 (main) (no progress for 30 s); "
    )
    assert "a rank skipped (or added) a collective" in text


def test_two_ranks_at_different_places_are_both_named() -> None:
    looks = [RankLook("node0", 0, 10, "S"), RankLook("node1", 1, 11, "S")]
    _, text = hang_cause(looks, {("node0", 0): "a.py:1 (f)", ("node1", 1): "a.py:2 (g)"}, 30, "r1")
    assert "rank 0 on node0 at a.py:1 (f), rank 1 on node1 at a.py:2 (g)" in text


def test_every_rank_at_one_place_or_none_looked_at() -> None:
    looks = [RankLook("node0", 0, 10, "S"), RankLook("node1", 1, 11, "S")]
    _, text = hang_cause(looks, {("node0", 0): "a.py:1 (f)", ("node1", 1): "a.py:1 (f)"}, 30, "r1")
    assert text.startswith("hung: every rank waits at a.py:1 (f), none stopped (no progress for 30 s); ")
    assert "no rank could be looked at" in hang_cause([], {}, 30, "r1")[1]


def test_look_lines_and_stacks_are_read() -> None:
    assert parse_look("node1", "rank=3 pid=42 state=T") == RankLook("node1", 3, 42, "T")
    assert parse_look("node1", "2") is None
    stacks = Stacks()
    dump = [
        "Thread 0x00007f01 (most recent call first):",
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait',
        "",
        "Current thread 0x00007f00 (most recent call first):",
        '  File "/x/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper',
        '  File "/work/proj/train.py", line 24 in main',
        '  File "/work/proj/train.py", line 40 in <module>',
    ]
    for text in dump:
        stacks.feed("node0", 1, text)
    stacks.feed("node0", None, '  File "/work/proj/agent.py", line 1 in x')
    assert stacks.places == {("node0", 1): "train.py:24 (main)"}


def _metrics_module():
    path = Path(__file__).resolve().parents[2] / "training" / "metrics.py"
    spec = importlib.util.spec_from_file_location("metrics_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_heartbeat_prints_at_once_then_at_most_every_few_seconds(monkeypatch) -> None:
    metrics = _metrics_module()
    monkeypatch.setattr(metrics, "_stack_on_sigusr1", lambda: None)  # no handler in the test process
    out, now = io.StringIO(), [0.0]
    heart = metrics.Heartbeat(every_s=5, out=out, clock=lambda: now[0], on=True)
    for step in range(1, 101):  # 100 steps of 0.1 s, forward taking 0.04 s
        heart.beat(step, compute_s=0.04)
        now[0] += 0.1
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # at 0 s and at 5 s: not a line a step
    beats = [parse_beat(line) for line in lines]
    assert beats[0] == Beat(1, None, 0.04)
    assert beats[1].step in (51, 52)  # 5 s of 0.1 s steps, give or take a float's rounding
    assert abs(beats[1].step_s - 0.1) < 1e-6 and abs(beats[1].compute_s - 0.04) < 1e-6
    assert json.loads(lines[1].split(" ", 1)[1])["steps"] == beats[1].step - 1


def test_a_whole_run_going_quiet_is_hung_not_a_rank_behind() -> None:
    w = Watcher(RULES, started=0.0)
    for t in range(0, 30):  # each rank's beats a little apart, as real ranks' are
        for rank in range(4):
            w.beat(f"node{rank // 2}", rank, Beat(t, 0.02, 0.01), t + rank * 0.3)
    assert [a.kind for a in alarms_until(w, 30, 200, 0.5)] == ["hung"]


def test_the_heartbeat_is_silent_outside_ddpctl(monkeypatch) -> None:
    monkeypatch.delenv("DDPCTL_RUN_ID", raising=False)
    out = io.StringIO()
    _metrics_module().Heartbeat(out=out).beat(1, compute_s=0.1)  # plain torchrun: no marker
    assert out.getvalue() == ""


def test_the_hang_timeout_is_checked_once_for_the_cli_and_the_api() -> None:
    with pytest.raises(UsageError, match=r"--hang-timeout 3 is not a time in seconds: give 5 or more"):
        RunSpec("mnist", hang_timeout_s=3)
    assert RunSpec("mnist", hang_timeout_s=0).hang_timeout_s == 0  # off
    assert RunSpec("mnist").hang_timeout_s == 600
    with pytest.raises(UsageError, match="--hang-timeout"):
        ddpctl.run("message-passing", hang_timeout=-1)
    # --health-every: the same rule, its own least
    with pytest.raises(UsageError, match=r"--health-every 5 is not a time in seconds: give 10 or more"):
        RunSpec("mnist", health_every_s=5)
    assert RunSpec("mnist", health_every_s=0).health_every_s == 0 and RunSpec("mnist").health_every_s == 600
    with pytest.raises(UsageError, match="--health-every"):
        ddpctl.run("message-passing", health_every=-1)


def test_a_compute_time_function_is_read_only_when_a_line_goes_out(monkeypatch) -> None:
    metrics = _metrics_module()
    monkeypatch.setattr(metrics, "_stack_on_sigusr1", lambda: None)
    out, now, reads = io.StringIO(), [0.0], []

    def gpu_time() -> float:  # as the Trainer's CUDA event pair: a sync, so only every few seconds
        reads.append(now[0])
        return 0.03

    heart = metrics.Heartbeat(every_s=5, out=out, clock=lambda: now[0], on=True)
    for step in range(1, 101):
        heart.beat(step, compute_s=gpu_time)
        now[0] += 0.1
    assert len(reads) == 2 and [parse_beat(line).compute_s for line in out.getvalue().splitlines()] == [0.03, 0.03]


def test_after_an_elastic_restart_only_a_beat_rearms_the_pace() -> None:
    w = Watcher(Rules(hang_timeout_s=10), started=0.0)
    beating(w, 20, {"node0": 0.05, "node1": 0.05, "node2": 0.05}, every=1.0)
    w.restart(30.0)  # node1 ended: the survivors restart their workers
    w.line(31.0, rank=0)  # the old workers' tracebacks
    assert w.timeout_s() == 900 and alarms_until(w, 31, 60) == []  # the new ones import torch, rendezvous
    w.beat("node0", 0, Beat(1), 70.0)
    assert w.timeout_s() == 10 and [a.kind for a in alarms_until(w, 70, 90)] == ["hung"]


def test_a_ranks_first_beat_is_its_warm_up_and_no_compute_sample() -> None:
    w = Watcher(RULES, started=0.0)
    w.beat("node0", 0, Beat(1, None, 0.1), 0.0)
    w.beat("node1", 1, Beat(1, None, 40.0), 0.0)  # its first step compiled for longer
    beating(w, 30, {"node0": 0.10, "node1": 0.10}, start=5)
    assert [a for a in alarms_until(w, 0, 30, 5) if a.kind == "slow"] == []
