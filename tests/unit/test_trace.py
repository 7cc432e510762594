"""The round-trip record the scale benchmark reads (infra/tools/trace.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddpctl.infra.tools.trace import sequential_steps, traced


@pytest.mark.parametrize(
    ("intervals", "steps"),
    [
        ([], 0),
        ([(0, 1)] * 16, 1),  # sixteen at once: one step
        ([(i, i + 1) for i in range(16)], 16),  # one after the other
        ([(0, 1), (0.5, 1.5), (1.2, 2), (2, 3)], 3),  # two waves overlapping, then one
    ],
)
def test_sequential_steps(intervals: list[tuple[float, float]], steps: int) -> None:
    assert sequential_steps(intervals) == steps


def test_traced_writes_only_where_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with traced("connect", "node0"):
        pass  # no DDPCTL_TRACE: nothing written anywhere
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv("DDPCTL_TRACE", str(path))
    with traced("connect", "node1"):
        pass
    [record] = [json.loads(line) for line in path.read_text().splitlines()]
    assert record["op"] == "connect" and record["node"] == "node1" and record["t1"] >= record["t0"]
