"""Repeated agent lines shown once on the terminal (issue 18, cli/repeats.py): the rule as a table of
line sequences and what the terminal shows of them, the wiring through ``Output`` and ``run
--all-lines``, and a real 3-node run whose torchrun agents all print the same start-up lines.
Its tests that start processes (real parts) are in tests/integration/test_repeated_lines.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.config_file import load_default_map
from ddpctl.infra.launch.nodes import OutputLine
from ddpctl.output import Output
from ddpctl.repeats import FAILING, RepeatedAgentLines


def glog(level: str, when: str, pid: int, text: str) -> str:
    """A line as torch logs it (its glog-style header: level, date, time, pid, file:line)."""
    return f"{level}1125 08:28:{when} {pid} torch/distributed/run.py:793] {text}"


def omp_block(node: int) -> list[tuple[str, int | None, str]]:
    """torchrun's OMP_NUM_THREADS warning, as each node's agent prints it (its own time and pid)."""
    when, pid = f"3{node}.15{node}000", 23340 + node
    texts = ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1", "*" * 41]
    return [(f"node{node}", None, glog("W", when, pid, t)) for t in texts]


def c10d_hostname(node: str) -> str:
    """c10d's C++ warning as torch 2.x prints it on nodes without reverse DNS (the time differs per node)."""
    when = f"11:48:38.{sum(map(ord, node))}592255"
    return f"[W1126 {when} socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3"


def note(hidden: int, nodes: int, run_id: str = "r1") -> str:
    lines = f"{hidden} repeated agent line{'' if hidden == 1 else 's'}"
    return (
        f"ddpctl: {lines} from {nodes} node{'' if nodes == 1 else 's'} not shown "
        f"(`ddpctl logs {run_id}` has them all; `run --all-lines` shows them)"
    )


def shown(lines: list[tuple[str, int | None, str]]) -> list[str]:
    """What the terminal shows of ``lines``, in order: each shown line as ``[node r] text``, and the
    note where it comes."""
    repeats, out = RepeatedAgentLines("r1"), []
    for node, rank, text in lines:
        show = repeats.take(OutputLine(node, rank, text))
        out += [n for n in [repeats.note()] if n]
        if show:
            out.append(f"[{node}{'' if rank is None else f' r{rank}'}] {text}")
    repeats.end()
    return out + [n for n in [repeats.note()] if n]


A, B, C = "node0", "node1", "node2"
LAUNCH = "Starting elastic_operator with launch configs:"
CASES = {
    "the same start-up block from three nodes: once, the note before the first rank line": (
        [*omp_block(0), *omp_block(1), *omp_block(2), (A, 0, "step 1"), (B, 1, "step 1")],
        [*(f"[node0] {t}" for *_, t in omp_block(0)), note(8, 2), "[node0 r0] step 1", "[node1 r1] step 1"],
    ),
    "a line one node says differently is shown, in the middle of repeats": (
        [(A, None, LAUNCH), (A, None, "  is_host: 1"), (B, None, LAUNCH), (B, None, "  is_host: 0"), (C, None, LAUNCH)],
        [f"[node0] {LAUNCH}", "[node0]   is_host: 1", "[node1]   is_host: 0", note(2, 2)],
    ),
    "a node may repeat its own line: only another node's copy is hidden": (
        [(A, None, "***"), (A, None, "***"), (B, None, "***"), (B, None, "***")],
        ["[node0] ***", "[node0] ***", note(2, 1)],
    ),
    "ranks' lines are never hidden, however alike": (
        [(A, 0, "loss 1.0"), (B, 1, "loss 1.0"), (B, 1, "loss 1.0"), (C, 2, "loss 1.0")],
        ["[node0 r0] loss 1.0", "[node1 r1] loss 1.0", "[node1 r1] loss 1.0", "[node2 r2] loss 1.0"],
    ),
    "after the first rank line every agent line is shown (a relaunched node's start-up too)": (
        [(A, None, "up"), (B, None, "up"), (A, 0, "go"), (B, None, "finished"), (C, None, "finished"), (C, None, "up")],
        ["[node0] up", note(1, 1), "[node0 r0] go", "[node1] finished", "[node2] finished", "[node2] up"],
    ),
    "a traceback in start-up: the note, then every line, repeated or not": (
        [(A, None, "up"), (B, None, "up"), (B, None, "Traceback (most recent call last):"), (C, None, "up")]
        + [(A, None, "Traceback (most recent call last):")],
        ["[node0] up", note(1, 1), "[node1] Traceback (most recent call last):", "[node2] up"]
        + ["[node0] Traceback (most recent call last):"],
    ),
    "torch's error level ends the window, whatever the words": (
        [(A, None, glog("I", "1.0", 1, "x")), (A, None, glog("E", "2.0", 1, "x")), (B, None, glog("E", "2.1", 2, "x"))],
        [
            f"[node0] {glog('I', '1.0', 1, 'x')}",
            f"[node0] {glog('E', '2.0', 1, 'x')}",
            f"[node1] {glog('E', '2.1', 2, 'x')}",
        ],
    ),
    "the same words at another level or from another source line are another line": (
        [(A, None, glog("I", "1.0", 1, "x")), (B, None, glog("W", "1.1", 2, "x"))]
        + [(C, None, glog("I", "1.2", 3, "x").replace("run.py:793", "api.py:257"))],
        [f"[node0] {glog('I', '1.0', 1, 'x')}", f"[node1] {glog('W', '1.1', 2, 'x')}"]
        + [f"[node2] {glog('I', '1.2', 3, 'x').replace('run.py:793', 'api.py:257')}"],
    ),
    "c10d's hostname warning (C++ log header, no reverse DNS on the nodes): once, and no failure": (
        [(n, None, c10d_hostname(n)) for n in (A, B, C)] + [(A, 0, "hi")],
        [f"[node0] {c10d_hostname(A)}", note(2, 2), "[node0 r0] hi"],
    ),
    "the C++ log header's error level ends the window": (
        [(A, None, "[E1126 11:48:38.1 x.cpp:1] [c10d] x"), (B, None, "[E1126 11:48:38.2 x.cpp:1] [c10d] x")],
        ["[node0] [E1126 11:48:38.1 x.cpp:1] [c10d] x", "[node1] [E1126 11:48:38.2 x.cpp:1] [c10d] x"],
    ),
    "Python logging's own format (no time): repeats hidden all the same": (
        [(A, None, "WARNING:torch.distributed.run:"), (B, None, "WARNING:torch.distributed.run:"), (A, 0, "hi")],
        ["[node0] WARNING:torch.distributed.run:", note(1, 1), "[node0 r0] hi"],
    ),
    "ddpctl's own notes name their node, so each is shown": (
        [(B, None, "ddpctl: node1 lost (exit 1); the run goes on with 2 node(s)")]
        + [(C, None, "ddpctl: node2 lost (exit 1); the run goes on with 1 node(s)")],
        ["[node1] ddpctl: node1 lost (exit 1); the run goes on with 2 node(s)"]
        + ["[node2] ddpctl: node2 lost (exit 1); the run goes on with 1 node(s)"],
    ),
    "no rank line ever (the run ended in start-up): the note at the end": (
        [(A, None, "waiting"), (B, None, "waiting"), (C, None, "waiting")],
        ["[node0] waiting", note(2, 2)],
    ),
    "nothing repeated: no note": (
        [(A, None, "a"), (B, None, "b"), (A, 0, "c")],
        ["[node0] a", "[node1] b", "[node0 r0] c"],
    ),
}


@pytest.mark.parametrize("lines, expected", CASES.values(), ids=list(CASES))
def test_what_the_terminal_shows(lines: list[tuple[str, int | None, str]], expected: list[str]) -> None:
    assert shown(lines) == expected


@pytest.mark.parametrize(
    "text, failing",
    [
        # torchrun's ordinary start-up (LOGLEVEL=INFO), which must not end the window
        (glog("I", "2.1", 9, "  signals_to_handle        : SIGTERM,SIGINT,SIGHUP,SIGQUIT"), False),
        (glog("I", "2.1", 9, "  duplicate_stderr_filters : []"), False),
        (glog("I", "2.1", 9, "  rdzv_configs             : {'is_host': '0', 'timeout': 900}"), False),
        (glog("I", "2.1", 9, "Environment variable 'TORCHELASTIC_ENABLE_FILE_TIMER' not found. Do not start"), False),
        (glog("I", "2.1", 9, "[default] Rendezvous'ing worker group"), False),
        (glog("W", "2.1", 9, "Setting OMP_NUM_THREADS environment variable for each process to be 1"), False),
        # what failures and stops print
        (glog("E", "2.1", 9, "failed (exitcode: 1) local_rank: 0 (pid: 7) of binary: python"), True),
        (glog("W", "2.1", 9, "Received Signals.SIGTERM death signal, shutting down workers"), True),
        (glog("W", "2.1", 9, "Sending process 7 closing signal SIGTERM"), True),
        ("Traceback (most recent call last):", True),
        ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", True),
        ("torch.distributed.DistNetworkError: Connection refused", True),
        ("/opt/venv/bin/python: No module named torch", True),
        ("ERROR:torch.distributed.elastic.multiprocessing.api:failed", True),
        ("bash: line 1: 123 Killed  torchrun ...", True),
        ("ddpctl: node2 lost (exit 1); the run goes on with 2 node(s)", True),
    ],
)
def test_failure_looking_lines(text: str, failing: bool) -> None:
    assert bool(FAILING.search(text)) is failing


def test_output_prints_once_and_notes_at_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    """The wiring: ``Output.line`` as the run's sink, ``end_lines`` after the run; without
    ``hide_repeats`` (`run --all-lines`) every line."""
    lines = [OutputLine(n, None, "agent up") for n in (A, B, C)]
    out = Output()
    out.hide_repeats("rx")
    for line in lines:
        out.line(line)
    out.end_lines()
    assert capsys.readouterr().out.splitlines() == ["[node0] agent up", note(2, 2, "rx")]

    everything = Output()
    for line in lines:
        everything.line(line)
    everything.end_lines()
    assert capsys.readouterr().out.splitlines() == [f"[{n}] agent up" for n in (A, B, C)]


def test_all_lines_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "ddpctl.toml"
    config.write_text("[run]\nall_lines = true\n")
    assert load_default_map(config)["run"]["all_lines"] is True
