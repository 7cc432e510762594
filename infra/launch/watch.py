"""Watching a run that goes (pure): its ranks' heartbeats and output in, alarms out.

A rank that calls ``training/metrics.py``'s ``beat`` prints a ``DDPCTL_BEAT {json}`` line every few
seconds: its step, its mean step time and its mean compute time (time outside collectives). The
supervisor hands every beat and every other line to a ``Watcher`` with the time (its ``Clock``'s), and
asks it each turn (``tick``) what to say:

- ``hung``: no progress (a beat or any line) from any rank for the hang timeout: once ranks beat,
  ``max(floor, steps x the slowest rank's step time)``, the run's own pace; before (a script that never
  beats), the run's ``--hang-timeout``; before any rank's first line, not before torchrun's rendezvous
  would have timed out (``STARTUP_S``). The supervisor then looks at every rank (``look``) and ends the run;
  where every node answers and none has a rank left (they ended; torchrun is ending the run, or starting
  them again), it waits on, as after a restart, and a second such silence is the hang.
- ``behind``: a rank that beat, silent for that long while the others beat on (within half of it); once
  until it beats again.
- ``slow``: a node whose ranks' compute time over the last ``window_s`` is ``slow_ratio`` times the
  median of the other nodes'; once, and again after it was back to speed (``recovered``) and slows again.

``hang_cause`` turns what ``look`` found on each node (node_programs/stop.py's ``look`` mode: each rank's
process state, and the innermost frame of the stack it printed) into the run's cause and hint.
Standard library only, Python 3.8+: it runs on the head node too (``head.py``'s bundle).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

BEAT_MARK = "DDPCTL_BEAT"  # training/metrics.py's
#: the supervisor's note that names a slow node (``Watcher``'s "slow" alarm, as ``Supervisor._note`` says it)
SLOW_NOTE = re.compile(r"^ddpctl: (?P<node>\S+) is slow: its ranks compute ")
HANG_TIMEOUT_S = 600.0  # ranks that never beat: this long without a line from any node is a hang
#: the least wait once ranks beat (an epoch's end: evaluation, a snapshot saved, print nothing)
FLOOR_S = 120.0
STEPS = 20.0  # ... or this many of the slowest rank's steps
#: before any rank has printed a line, the agents are torchrun's: its rendezvous waits 600 s for a node
#: (its join timeout), and says which one never came (launch/store.py): a hang is not called before
STARTUP_S = 900.0


@dataclass(frozen=True)
class Beat:
    step: int
    step_s: float | None = None  # mean since the rank's last beat (None: its first)
    compute_s: float | None = None


def parse_beat(text: str) -> Beat | None:
    """A rank's ``DDPCTL_BEAT {json}`` line, or None for any other (a damaged beat is an ordinary line)."""
    if not text.startswith(BEAT_MARK + " "):
        return None
    try:
        doc = json.loads(text[len(BEAT_MARK) + 1 :])
        return Beat(int(doc["step"]), _seconds(doc.get("step_s")), _seconds(doc.get("compute_s")))
    except (ValueError, KeyError, TypeError):
        return None


def is_beat(rank: int | None, text: str) -> bool:
    """Whether a parsed line is a rank's heartbeat: read by the supervisor, never shown (a Slurm job's too)."""
    return rank is not None and text.startswith(BEAT_MARK + " ")


def _seconds(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e9:
        return float(value)
    return None


@dataclass(frozen=True)
class Rules:
    hang_timeout_s: float = HANG_TIMEOUT_S  # 0: a hang is never called (stragglers are still named)
    floor_s: float = FLOOR_S  # capped at hang_timeout_s: a short --hang-timeout shortens it too
    steps: float = STEPS
    startup_s: float = STARTUP_S  # the least timeout before any rank's first line
    slow_ratio: float = 1.25
    recovered_ratio: float = 1.1
    window_s: float = 60.0
    min_samples: int = 2  # beats with a compute time, per node in the window, before it is judged


@dataclass(frozen=True)
class Alarm:
    kind: str  # hung | behind | slow | recovered
    text: str  # the line to show (without "ddpctl: ")
    node: str = ""
    rank: int | None = None
    ratio: float = 0.0  # slow: the node's compute time over the others' median


@dataclass
class _RankState:
    last: float  # when it last beat
    step: int
    step_s: float | None = None
    behind_said: bool = False


@dataclass
class Watcher:
    rules: Rules
    started: float
    last_progress: float = -1.0
    ranks: dict[tuple[str, int], _RankState] = field(default_factory=dict)
    samples: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)  # node -> (when, compute_s)
    slow_now: dict[str, float] = field(default_factory=dict)  # node -> its ratio, while named slow
    slowest: dict[str, float] = field(default_factory=dict)  # node -> its worst ratio named (the record)
    hung: bool = False
    ranks_seen: bool = False  # a rank has printed (or beaten): the job runs, past torchrun's rendezvous
    restarted: bool = False  # an elastic run's ranks restarted: only a beat says the new ones run (the
    # old ones' last lines, their tracebacks, come after the restart)

    def __post_init__(self) -> None:
        if self.last_progress < 0:
            self.last_progress = self.started

    def line(self, now: float, rank: int | None = None) -> None:
        """Any line of the run's output (``rank``: a rank's, not an agent's): progress."""
        self.last_progress = max(self.last_progress, now)
        self.ranks_seen = self.ranks_seen or (rank is not None and not self.restarted)

    def beat(self, node: str, rank: int, beat: Beat, now: float) -> None:
        self.restarted = False
        self.line(now, rank)
        state = self.ranks.get((node, rank))
        if state is None:
            self.ranks[(node, rank)] = _RankState(now, beat.step, beat.step_s)
        else:
            state.last, state.step, state.behind_said = now, beat.step, False
            state.step_s = beat.step_s if beat.step_s is not None else state.step_s
        if beat.compute_s is not None and state is not None:  # not a rank's first: its warm-up, a compile
            self.samples.setdefault(node, deque()).append((now, beat.compute_s))

    def timeout_s(self) -> float:
        """How long no progress at all means a hang: the run's own pace once its ranks beat."""
        if not self.ranks_seen:
            return max(self.rules.hang_timeout_s, self.rules.startup_s)
        if not self.ranks:
            return self.rules.hang_timeout_s
        return max(min(self.rules.floor_s, self.rules.hang_timeout_s), self.rules.steps * self._slowest_step_s())

    def restart(self, now: float) -> None:
        """An elastic run going on without a hung node: its ranks start again, under new numbers, after
        a rendezvous of torchrun's (``STARTUP_S`` again until a rank beats)."""
        self.ranks.clear()
        self.samples.clear()
        self.slow_now.clear()
        self.hung, self.last_progress, self.ranks_seen, self.restarted = False, now, False, True

    def _slowest_step_s(self) -> float:
        return max((s.step_s or 0.0 for s in self.ranks.values()), default=0.0)

    def tick(self, now: float) -> list[Alarm]:
        """What to say now (each alarm once)."""
        if self.hung:
            return []
        silent = now - self.last_progress
        if self.rules.hang_timeout_s and silent >= self.timeout_s():
            self.hung = True
            how = "no beat and no output" if self.ranks else "no output"
            return [Alarm("hung", f"{how} from any rank for {silent:.0f} s: the run is hung")]
        return self._behind(now) + self._slow(now)

    def _behind(self, now: float) -> list[Alarm]:
        limit = self.timeout_s()
        alarms: list[Alarm] = []
        if not self.rules.hang_timeout_s:
            return alarms
        for (node, rank), state in sorted(self.ranks.items()):
            # the others clearly go on (not a whole run going quiet, whose ranks' last beats differ by a beat)
            others = any(now - s.last < limit / 2 for r, s in self.ranks.items() if r != (node, rank))
            if now - state.last >= limit and others and not state.behind_said:
                state.behind_said = True
                alarms.append(
                    Alarm(
                        "behind",
                        f"rank {rank} on {node} has sent no heartbeat for {now - state.last:.0f} s (its last at "
                        f"step {state.step}) while the others go on: it is stuck or stopped",
                        node,
                        rank,
                    )
                )
        return alarms

    def _slow(self, now: float) -> list[Alarm]:
        means = {}
        for node, samples in self.samples.items():
            while samples and now - samples[0][0] > self.rules.window_s:
                samples.popleft()
            if len(samples) >= self.rules.min_samples:
                means[node] = statistics.mean(c for _, c in samples)
        alarms = []
        for node in sorted(means):
            others = [m for n, m in means.items() if n != node]
            if not others or statistics.median(others) <= 0:
                continue
            median = statistics.median(others)
            ratio = means[node] / median
            if ratio >= self.rules.slow_ratio and node not in self.slow_now:
                self.slow_now[node] = ratio
                self.slowest[node] = max(ratio, self.slowest.get(node, 0.0))
                text = (
                    f"{node} is slow: its ranks compute {ratio:.2f}x the other nodes' median "
                    f"({_ms(means[node])} vs {_ms(median)} a step), and every rank waits for it: "
                    "where it has GPUs, ddpctl looks at their health now (`ddpctl check` at any time); "
                    "leave it out with --nodes"
                )
                alarms.append(Alarm("slow", text, node, ratio=round(ratio, 2)))
            elif node in self.slow_now and ratio >= self.rules.recovered_ratio:
                self.slowest[node] = max(ratio, self.slowest[node])  # still slow: its worst, for the record
            elif ratio < self.rules.recovered_ratio and node in self.slow_now:
                del self.slow_now[node]
                alarms.append(Alarm("recovered", f"{node} is back to the others' speed ({ratio:.2f}x)", node))
        return alarms

    def slow_nodes(self) -> list[str]:
        """The nodes named slow during the run, with their worst ratio (the run's record)."""
        return [f"{node} ({ratio:.2f}x)" for node, ratio in sorted(self.slowest.items())]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.0f} s"


# -- what each rank was doing when the run hung

STATES = {"R": "running", "S": "waiting", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped by a debugger"}
STACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
#: frames of Python itself and of torch: a rank's place is its innermost frame elsewhere (its script's)
LIBRARY = re.compile(r"/lib/python3\.\d+/(?!site-packages|dist-packages)|/(site|dist)-packages/(torch|numpy)/")


@dataclass(frozen=True)
class RankLook:
    """One rank as ``look`` saw it: its process state (``T``...) and, once its stack came back, its place."""

    node: str
    rank: int
    pid: int
    state: str
    where: str = ""  # "train.py:15 (main)": the innermost frame outside Python and its packages


def parse_look(node: str, line: str) -> RankLook | None:
    """A line of ``stop.py look``: ``rank=R pid=P state=S``."""
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    try:
        return RankLook(node, int(fields["rank"]), int(fields["pid"]), fields["state"][:1])
    except (KeyError, ValueError):
        return None


@dataclass
class Stacks:
    """Each rank's place, from the faulthandler stacks it prints on SIGUSR1 (most recent call first)."""

    places: dict[tuple[str, int], str] = field(default_factory=dict)
    _current: dict[tuple[str, int], bool] = field(
        default_factory=dict
    )  # in the current thread's stack, place not found yet

    def feed(self, node: str, rank: int | None, text: str) -> None:
        if rank is None:
            return
        key = (node, rank)
        if text.startswith("Current thread") or (text.startswith("Thread 0x") and key not in self.places):
            self._current[key] = True
            return
        m = STACK_FRAME.match(text)
        if m and self._current.get(key) and not LIBRARY.search(m["file"]):
            self.places[key] = f"{m['file'].rsplit('/', 1)[-1]}:{m['line']} ({m['func']})"
            self._current[key] = False


WHY = {
    "T": "stopped from outside: SIGSTOP, Ctrl-Z, a debugger",
    "t": "held by a debugger (ptrace)",
    "D": "stuck in the kernel: a hung filesystem, device or driver (`dmesg` on the node)",
    "Z": "a zombie: it exited and its agent has not noticed",
}


def hang_cause(
    looks: list[RankLook], places: dict[tuple[str, int], str], waited_s: float, run_id: str, *, answered: bool = False
) -> tuple[str, str]:
    """(the node to blame, "" where no one node is: one line, ``hung: WHO (no progress for N s); what it
    means; what to do``, whose first clause ``runs`` shows). WHO: the ranks stopped, else the ranks
    elsewhere than most others. ``answered``: every node answered the look (none found no rank: their
    agents, torchrun, are what is stuck)."""
    looks = [RankLook(k.node, k.rank, k.pid, k.state, places.get((k.node, k.rank), "")) for k in looks]
    todo = f"each rank's stack is in `ddpctl logs {run_id}`; fix it and run again (--resume-from {run_id})"
    quiet = f"(no progress for {waited_s:.0f} s)"
    if not looks and answered:
        return "", (
            f"hung {quiet}; no rank runs on any node and torchrun has not ended: its agents wait (a rendezvous, "
            f"a node gone: `ddpctl check`); {todo}"
        )
    if not looks:
        return "", f"hung {quiet}; no rank could be looked at: its node did not answer (`ddpctl check`); {todo}"
    odd = [k for k in looks if k.state in WHY]
    if odd:
        named = ", ".join(f"rank {k.rank} on {k.node} is {STATES.get(k.state, 'a zombie')} ({k.state})" for k in odd)
        why = "; ".join(dict.fromkeys(WHY[k.state] for k in odd))
        return odd[0].node, f"hung: {named} {quiet}; {why}; the others wait for it in a collective; {todo}"
    counts = Counter(k.where for k in looks if k.where)
    if len(counts) > 1:
        common, n = counts.most_common(1)[0]
        skipped = "a rank skipped (or added) a collective: every rank must call the same ones, in the same order"
        if n * 2 > len(looks):
            odd = [k for k in looks if k.where != common]
            named = ", ".join(f"rank {k.rank} on {k.node} at {k.where or '?'}" for k in odd)
            return odd[0].node, f"hung: {named}, {n} other rank(s) at {common} {quiet}; {skipped}; {todo}"
        named = ", ".join(f"rank {k.rank} on {k.node} at {k.where or '?'}" for k in looks[:8])
        return "", f"hung: the ranks wait at different places, {named} {quiet}; {skipped}; {todo}"
    common = next(iter(counts), "")
    at = f" at {common}" if common else ""
    return "", (
        f"hung: every rank waits{at}, none stopped {quiet}; a collective that never completes: a node's "
        f"network (`ddpctl check`), or a peer outside the run; {todo}"
    )
