"""Metrics from every run: the lines the bundled jobs (and training/metrics.py) write, brought into the
run's record, read back by `ddpctl metrics` (table, --json, --png) and summarised by `ddpctl runs`.
Its tests that start processes (real parts) are in tests/integration/test_metrics.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddpctl.infra.runs import metrics
from tests.support.metrics import LINES
from tests.support.specs import cluster_spec

# ---- the pure parts ------------------------------------------------------------------------------


def test_parse_keeps_objects_and_leaves_out_a_cut_off_line() -> None:
    text = "\n".join(json.dumps(d) for d in LINES[:2]) + '\n[1, 2]\n{"kind": "step", "st'
    assert metrics.parse(text) == LINES[:2]


def test_read_the_whole_file_or_its_tail(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(d) + "\n" for d in LINES))
    assert metrics.read(tmp_path) == LINES
    last_bytes = len(json.dumps(LINES[-1])) + 10  # the last line and part of the one before
    assert metrics.read(tmp_path, tail=last_bytes) == LINES[-1:]
    assert metrics.read(tmp_path / "none") == []


def test_summary_is_the_last_of_each_and_none_where_absent() -> None:
    assert metrics.summary(LINES) == {"loss": 0.4, "accuracy": 91.2, "step": 80}
    assert metrics.summary([{"loss": "nan?"}, {"step": True}]) == {"loss": None, "accuracy": None, "step": None}
    assert metrics.summary([]) == {"loss": None, "accuracy": None, "step": None}


def test_shown_keeps_every_epoch_line_and_the_last_step_lines() -> None:
    assert metrics.shown(LINES, 1) == [LINES[2], LINES[3]]
    assert metrics.shown(LINES, 0) == LINES


def test_cells() -> None:
    assert metrics.cell("mfu", 0.4123) == "41.2%"
    assert metrics.cell("samples_per_s", 12345.6) == "12,346"
    assert metrics.cell("loss", 0.123456) == "0.1235"
    assert metrics.cell("kind", "epoch") == "epoch"
    assert metrics.cell("accuracy", None) == ""


def _head_here(snapshots: Path):
    """A cluster whose head node is this machine, and a run that keeps its snapshots in ``snapshots``."""
    from ddpctl.infra.model.spec import RunSpec
    from ddpctl.infra.model.state import ClusterState, NodeInfo

    state = ClusterState(
        spec=cluster_spec(name="c", nodes=1), cluster_id="x", nodes=[NodeInfo("node0", "127.0.0.1", "/w")]
    )
    return state, RunSpec(job="mnist", run_id="rfol1", snapshot_dir=str(snapshots))


def test_the_follower_brings_whole_lines_as_they_come(tmp_path: Path) -> None:
    """As a run goes: the head's new whole lines appended to the record (a line being written waits
    for the next poll); the first lines replace what the record had (a resumed run's file has them)."""
    head, record = tmp_path / "snap", tmp_path / "record.jsonl"
    head.mkdir()
    record.write_text(json.dumps(LINES[0]) + "\n")  # an earlier attempt's record
    state, run = _head_here(head)
    follower = metrics.Follower(state, run, record, every_s=3600)
    assert follower.poll() == 0 and record.read_text() == json.dumps(LINES[0]) + "\n"  # nothing there yet
    text = "".join(json.dumps(d) + "\n" for d in LINES)
    (head / "metrics.jsonl").write_text(text[:-10])  # the last line half written
    follower.poll()
    assert metrics.parse(record.read_text()) == LINES[:3]
    assert record.stat().st_mode & 0o777 == 0o600
    (head / "metrics.jsonl").write_text(text)
    follower.poll()
    assert record.read_text() == text
    with metrics.Follower(state, run, tmp_path / "other.jsonl", every_s=3600):  # a thread, stopped at the end
        pass
    s3 = metrics.Follower(state, type(run)(job="mnist", snapshot_dir="s3://my-bucket/p"), record)
    with s3:
        assert s3._thread is None  # nothing is brought from S3


def test_follow_reads_on_while_the_run_is_alive(tmp_path: Path) -> None:
    record = tmp_path / "metrics.jsonl"
    record.write_text(json.dumps(LINES[0]) + "\n")
    alive = iter([True, True, False])
    more = iter([LINES[1:3], LINES[3:]])

    def sleep(_: float) -> None:  # meanwhile, the run's lines come in (the last one replaced whole at the end)
        with open(record, "a") as f:
            f.write("".join(json.dumps(d) + "\n" for d in next(more)))

    batches = list(metrics.follow(tmp_path, lambda: next(alive), sleep=sleep))
    assert batches == [LINES[:1], LINES[1:3], LINES[3:]]
    assert list(metrics.follow(tmp_path / "none", lambda: False)) == [[]]  # no file: one empty batch


def test_how_often_the_follower_looks() -> None:
    said = [metrics.every_from({metrics.ENV_EVERY_S: v}) for v in ("", "1", "0", "soon", "inf", "nan")]
    assert said == [5.0, 1.0, 0.1, 5.0, 5.0, 5.0]  # never a busy loop, never a failed run


def test_a_line_as_follow_prints_it() -> None:
    doc = {"kind": "epoch", "step": 71, "epoch": 1, "loss": 0.41, "accuracy": 96.1, "samples_per_s": 2302.7}
    assert metrics.line_text(doc) == "epoch | step 71 | epoch 1 | loss 0.41 | accuracy 96.10% | 2,303 samples/s"
    assert metrics.line_text({"step": 3, "mfu": 0.41, "gpu_mem_gb": 3.25}) == "line | step 3 | MFU 41.0% | GPU 3.25 GiB"
