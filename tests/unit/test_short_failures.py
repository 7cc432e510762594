"""Short failures (issue 30, cli/failures.py): the terminal shows the first failing rank's own
traceback once, torchrun's root cause where no rank printed one, and a count of what it left out;
``output.log`` keeps every line. The rule on real captured outputs of failing runs
(tests/golden/fail-rank1-*.log: `ddpctl run ./fail.py --nodes 2`, rank 1 raising after
init_process_group; the same with torchelastic's ``@record``; rank 1 killed by SIGKILL), as a table,
through ``Output``, and one real failing run end to end.
Its tests that start processes (real parts) are in tests/integration/test_short_failures.py.
"""

from __future__ import annotations

import pytest

from ddpctl.failures import SecondaryTraces
from ddpctl.infra.launch.nodes import OutputLine
from ddpctl.infra.runs.logs import parse
from ddpctl.output import Output
from tests.support import GOLDEN
from tests.support.short_failures import NOTE, TB


def label(line: OutputLine) -> str:
    return f"[{line.node}{'' if line.rank is None else f' r{line.rank}'}] {line.text}"


def shown(lines: list[OutputLine], run_id: str = "r1") -> list[str]:
    """What the terminal shows of ``lines``: each shown line as ``[node r] text``, then what the
    end releases and the note."""
    traces, out = SecondaryTraces(run_id), []
    for line in lines:
        out += [label(s) for s in traces.take(line)]
    out += [s if isinstance(s, str) else label(s) for s in traces.end()]
    return out + [n for n in [traces.note()] if n]


def golden(name: str) -> list[OutputLine]:
    return [OutputLine(x.node, x.rank, x.text) for x in map(parse, (GOLDEN / name).read_text().splitlines())]


def left_out(out: list[str]) -> int:
    return int(NOTE.match(out[-1])[1])


def test_a_failing_rank_real_output() -> None:
    lines = golden("fail-rank1-2-nodes.log")
    out = shown(lines)
    assert out[:-1] == [
        "[node1 r1] [rank1]: Traceback (most recent call last):",
        '[node1 r1] [rank1]:   File "/tmp/pyapi-fail/fail.py", line 7, in <module>',
        '[node1 r1] [rank1]:     raise ValueError("rank 1 fails on purpose")',
        "[node1 r1] [rank1]: ValueError: rank 1 fails on purpose",
    ]
    assert left_out(out) == len(lines) - 4  # rank 0's reaction, both agents' traces and blocks
    assert len(lines) > 70


def test_an_agents_logged_traceback_as_it_is_stopped_is_left_out() -> None:
    """Captured from a full run on a loaded machine (final run of 2026-11-30: the one failure, two
    tracebacks on the terminal): rank 0 reacted with a traceback of its own (the peer's connection
    closed), and node0's torchrun, stopped as it ended, logged its log tailer's SignalException with a
    traceback behind torch's logging prefix (``E1130 02:41:25.576000 32294 tail_log.py:154] ...``):
    both left out, rank 1's own traceback shown once."""
    lines = golden("fail-rank1-tailer.log")
    assert sum("tail_log.py:154] Traceback (most recent call last):" in line.text for line in lines) == 1
    out = shown(lines)
    assert out[:-1] == [
        "[node1 r1] [rank1]: Traceback (most recent call last):",
        '[node1 r1] [rank1]:   File "/tmp/pyapi-fail/fail.py", line 5, in <module>',
        '[node1 r1] [rank1]:     raise ValueError("rank 1 fails on purpose")',
        "[node1 r1] [rank1]: ValueError: rank 1 fails on purpose",
    ]
    assert left_out(out) == len(lines) - 4


def test_a_failing_rank_with_record() -> None:
    """``@record``: the rank's own traceback once (the ChildFailedError block repeats it from the error file)."""
    lines = golden("fail-rank1-record.log")
    out = shown(lines)
    assert sum("ValueError: rank 1 fails on purpose" in s for s in out) == 1
    assert out[0].startswith("[node1 r1]") and all(s.startswith("[node1 r1]") for s in out[:-1])
    assert not any("ChildFailedError" in s or "Connection closed by peer" in s for s in out)
    assert left_out(out) == len(lines) - len(out) + 1


def test_a_rank_killed_by_a_signal_named_by_torchruns_root_cause() -> None:
    """No traceback of its own: the other rank's reaction left out, the error file's root cause shown."""
    lines = golden("fail-rank1-sigkill.log")
    out = shown(lines)
    assert out[:2] == [
        "ddpctl: torchrun's root cause: rank 1 on node1, exit code -9:",
        "  Signal 9 (SIGKILL) received by PID 16405",
    ]
    assert left_out(out) == len(lines)


A, B = "node0", "node1"


def tb(node: str, rank: int | None, error: str, frames: int = 1) -> list[OutputLine]:
    prefix = "" if rank is None else f"[rank{rank}]: "
    body = [TB] + [f'  File "x.py", line {i}, in f' for i in range(frames)] + [error]
    return [OutputLine(node, rank, prefix + t) for t in body]


CASES = {
    "no failure: every line, no note": (
        [OutputLine(A, None, "up"), OutputLine(A, 0, "loss 1"), OutputLine(B, 1, "loss 1")],
        ["[node0] up", "[node0 r0] loss 1", "[node1 r1] loss 1"],
    ),
    "the first cause shown; a reaction that came first left out": (
        tb(A, 0, "RuntimeError: Connection closed by peer") + tb(B, 1, "ValueError: mine"),
        [label(x) for x in tb(B, 1, "ValueError: mine")] + ["3"],
    ),
    "only reactions: the first is shown at the end": (
        tb(A, 0, "RuntimeError: Connection reset by peer") + tb(B, 1, "RuntimeError: Connection reset by peer"),
        [label(x) for x in tb(A, 0, "RuntimeError: Connection reset by peer")] + ["3"],
    ),
    "a second rank's own error is left out, with its chain; its next line shown": (
        tb(A, 0, "ValueError: a")
        + tb(B, 1, "KeyError: b")
        + [
            OutputLine(B, 1, ""),
            OutputLine(B, 1, "During handling of the above exception, another exception occurred:"),
        ]
        + tb(B, 1, "OSError: c")
        + [OutputLine(B, 1, "epoch 2"), OutputLine(A, 0, "after")],
        [label(x) for x in tb(A, 0, "ValueError: a")] + ["[node1 r1] epoch 2", "[node0 r0] after", "8"],
    ),
    "a rank that goes on after its traceback (one it caught and logged) did not fail: the next one is shown": (
        tb(A, 0, "ValueError: logged") + [OutputLine(A, 0, "epoch 2")] + tb(B, 1, "OSError: real"),
        [label(x) for x in tb(A, 0, "ValueError: logged") + [OutputLine(A, 0, "epoch 2")] + tb(B, 1, "OSError: real")],
    ),
    "an agent's elastic error (no rank ever failed): its exception line once": (
        tb(A, None, "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out", 3)
        + tb(B, None, "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out", 3),
        ["[node0] torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: timed out", "9"],
    ),
    "a traceback cut off (its process killed): shown at the end": (
        tb(A, 0, "ValueError: a")[:2],
        [label(x) for x in tb(A, 0, "ValueError: a")[:2]],
    ),
    "torchrun's one-line reactions left out once a rank failed, not before": (
        [OutputLine(A, None, "Sending process 7 closing signal SIGTERM")]
        + tb(B, 1, "ValueError: b")
        + [OutputLine(A, None, "E1126 failed (exitcode: 1) local_rank: 0 (pid: 7) of binary: python")],
        ["[node0] Sending process 7 closing signal SIGTERM"] + [label(x) for x in tb(B, 1, "ValueError: b")] + ["1"],
    ),
}


@pytest.mark.parametrize("lines, expected", CASES.values(), ids=list(CASES))
def test_what_the_terminal_shows(lines: list[OutputLine], expected: list[str]) -> None:
    out = shown(lines)
    if expected and expected[-1].isdigit():  # the count of lines left out
        assert left_out(out) == int(expected[-1])
        out, expected = out[:-1], expected[:-1]
    assert out == expected


def test_output_wiring_and_all_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """``Output.line`` as the run's sink, ``end_lines`` after it; without ``hide_repeats`` (`run
    --all-lines`) every line."""
    lines = golden("fail-rank1-2-nodes.log")
    out = Output()
    out.hide_repeats("rx")
    for line in lines:
        out.line(line)
    out.end_lines()
    printed = capsys.readouterr().out.splitlines()
    assert sum("ValueError: rank 1 fails on purpose" in s for s in printed) == 1
    assert NOTE.match(printed[-1]) and not any("ChildFailedError" in s for s in printed)

    everything = Output()
    for line in lines:
        everything.line(line)
    everything.end_lines()
    assert capsys.readouterr().out.splitlines() == [label(x) for x in lines]
