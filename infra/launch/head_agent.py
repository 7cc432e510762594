"""The run's supervisor on the head node: the same ``supervise()`` as on the controller, run there.

Shipped to the head as a zip with ``supervise.py``, ``store.py``, ``nodes.py``, ``diagnose.py`` and
``model/errors.py`` (``head.py`` packs it; those modules and this one import nothing but the standard
library and each other) and
started there so that it outlives the SSH session that started it. It reads ``spec.json`` from its
folder (and removes it: it holds the secrets' values), starts the run's rendezvous store and every
node's agent over the cluster's own SSH mesh (``ssh NODE``: the ssh_mesh role's keys and client
config), supervises them (fail fast; elastic: a lost node started again, first replaced on a new machine where
``spec["replace"]`` says how: ``replace_lost``), and writes, in its folder,
``pid``, ``output.log`` (``[node rRANK] text`` lines, as ``runs/<id>/output.log``) and, last,
``run.json`` (the run's record; with ``error``, one line, where the run could not start: the rendezvous
port taken; with the health query's lines from the nodes the run named, ``ask_health``, and those of
its looks on the ``run --health-every`` timer, ``HealthTimer``, for the controller to judge). SIGINT or
SIGTERM stops the run as Ctrl-C does.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..model.errors import DdpctlError
from ..tools.trace import ENV as TRACE_ENV
from ..tools.trace import traced
from .diagnose import Agent
from .nodes import Elastic, NodeResult, OutputLine, RunResult, log_line
from .store import RdzvStore
from .supervise import supervise
from .watch import HANG_TIMEOUT_S, SLOW_NOTE, Rules


class MeshProcess:
    """A ``NodeProcess``: one shell line on a node over the cluster's SSH mesh."""

    def __init__(self, spec: dict, host: str, node: str, command: str, secret: str = "") -> None:
        self.node = node
        self._spec, self._host = spec, host
        self._proc = subprocess.Popen(
            [*ssh(spec), host, command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert self._proc.stdin is not None
        if secret:  # read by the launch line: secrets never ride on a command line
            self._proc.stdin.write(secret.encode())
        self._proc.stdin.close()

    def lines(self):
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            yield raw.decode(errors="replace")

    def poll(self) -> int | None:
        code = self._proc.poll()
        return None if code is None else (code if code >= 0 else -1)

    def terminate(self) -> None:
        stop(self._spec, self._host, "term", self._spec["node_key"], self.node)

    def kill(self) -> None:
        stop(self._spec, self._host, "kill", self._spec["node_key"], self.node)

    def look(self) -> list:
        """Its ranks' states, each one's stack asked for (node_programs/stop.py's ``look``)."""
        return stop(self._spec, self._host, "look", self._spec["node_key"], self.node)

    def end(self) -> None:
        """Its agent and ranks killed (``kill`` reaches both on a remote node)."""
        self.kill()


def stop(spec: dict, host: str, mode: str, key: str = "", value: str = "", marker: str = "") -> list:
    """Signal the run's processes on ``host`` (node_programs/stop.py), narrowed by ``key=value``; its lines."""
    extra = f" {key} {shlex.quote(value)}" if key else ""
    command = (
        f"{spec['stop_command']} {marker or spec['run_key']} "
        f"{shlex.quote(spec['run_id'])} {mode} {spec['grace_s']}{extra}"
    )
    with traced("stop", host):  # a round trip, for bench/scale.py and test_scale (DDPCTL_TRACE)
        done = subprocess.run([*ssh(spec), host, command], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    return done.stdout.decode(errors="replace").splitlines()


def ssh(spec: dict) -> list[str]:
    """OpenSSH over the cluster's mesh: its client config (keys, known hosts, BatchMode) where the
    ssh_mesh role put it."""
    config = os.path.expanduser(spec.get("ssh_config") or "")
    return ["ssh", "-T", *(["-F", config] if config else [])]


def run(spec: dict, sink, replaced: dict | None = None) -> RunResult:
    """Start the store, then the agents, and supervise them (``spec``: what ``head.py`` wrote), as
    the SSH executor does from the controller: a store that cannot start is ``StoreFailed``. A lost
    node of an elastic run is started again; where ``spec["replace"]`` says how, replaced on a new
    machine first if its own is gone (``replace_lost``), what was replaced kept in ``replaced``."""
    run_id, nodes, grace = spec["run_id"], spec["nodes"], float(spec["grace_s"])
    store: RdzvStore | None = None
    procs: list[MeshProcess] = []

    def cleanup() -> None:
        if store is not None:
            store.stop()
        if procs and all(p.poll() == 0 for p in procs):
            return
        stops = [threading.Thread(target=stop, args=(spec, n["host"], "stop")) for n in nodes]
        for each in stops:  # every node at once: one round trip, not one per node
            each.start()
        for each in stops:
            each.join()

    try:
        if spec["store"] is not None:
            s = spec["store"]
            proc = MeshProcess(spec, s["host"], s["node"], s["command"])
            store = RdzvStore.start(
                s["node"], proc, sink, lambda: stop(spec, s["host"], "stop", marker=spec["store_key"])
            )
        for n in nodes:
            procs.append(MeshProcess(spec, n["host"], n["node"], n["command"], n["secret"]))
        if store is not None:
            store.ready()  # it imports torch as the agents do: their clients wait in its backlog
    except BaseException:  # an agent that did start, and the store, do not outlive this
        procs.clear()
        cleanup()
        raise

    one_at_a_time = threading.Lock()  # lost nodes come back in threads of their own; the cluster's state is one

    def relaunch(i: int) -> MeshProcess:
        n = nodes[i]
        if spec.get("replace") and i > 0:  # the head itself: the run cannot go on without it
            with one_at_a_time:
                doc = replace_lost(spec, n, sink)
            if doc.get("replaced"):
                nodes[i] = n = moved(n, doc["host"])
                if replaced is not None:
                    replaced[n["node"]] = {"instance": doc["instance"], "host": doc["host"]}
                ready(spec, n, nodes[0], sink)
        stop(spec, n["host"], "kill", spec["node_key"], n["node"])
        return MeshProcess(spec, n["host"], n["node"], n["command"], n["secret"])

    elastic = None
    if spec["min_nodes"]:
        elastic = Elastic(spec["min_nodes"], relaunch=relaunch, store_alive=None if store is None else store.alive)
    watch = Rules(hang_timeout_s=float(spec.get("hang_timeout_s", HANG_TIMEOUT_S)))
    result = supervise(run_id, procs, sink, cleanup=cleanup, grace_s=grace, elastic=elastic, watch=watch)
    if store is None:
        return result
    return store.explain(result, [Agent(n["node"], n.get("address", "")) for n in nodes])


def replace_lost(spec: dict, n: dict, sink) -> dict:
    """Lost node ``n`` replaced on a new machine if its own is gone, by ``spec["replace"]`` (run here,
    the node's name appended: ``runs/head_replace.py``), its progress lines to ``sink``; what
    it said (its JSON line: ``replaced``, ``instance``, ``host``), {} where it could not run."""
    node = n["node"]
    try:
        proc = subprocess.Popen(
            [*spec["replace"], node], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        sink(OutputLine(node, None, f"ddpctl: {node} not replaced: {exc}"))
        return {}
    assert proc.stdout is not None
    doc = answer((raw.decode(errors="replace") for raw in proc.stdout), node, sink)
    proc.wait()
    return doc


def answer(lines, node: str, sink) -> dict:
    """What a replacement said: its progress lines to ``sink`` (as the node's ddpctl lines), its JSON
    line returned ({} where it printed none)."""
    doc: dict = {}
    for raw in lines:
        text = raw.rstrip("\n")
        if text.startswith("{"):
            try:
                doc = json.loads(text)
                continue
            except ValueError:
                pass
        sink(OutputLine(node, None, text))
    return doc if isinstance(doc, dict) else {}


def moved(n: dict, address: str) -> dict:
    """Node ``n``'s entry on its new machine at ``address``: its launch line's own address too (torchrun's
    ``--local-addr``); its name on the mesh stays (the ssh_mesh role rewrote every node's config)."""
    old, new = f"--local-addr {n['address']}", f"--local-addr {address}"
    return {**n, "address": address, "command": n["command"].replace(old, new)}


def ready(spec: dict, n: dict, head: dict, sink) -> None:
    """A new machine made ready for node ``n``'s agent, as the controller readies every node before a run:
    the user's project copied from the head's copy (``head``'s entry), the run's packages installed; a step
    that fails is said (the agent then fails there, and the elastic run goes on without it)."""
    q, remote = shlex.quote, shlex.join([*ssh(spec), n["host"]])
    steps = []
    if n.get("project_dir"):
        dest, tmp = n["project_dir"], n["project_dir"] + ".tmp"
        unpack = f"rm -rf {q(tmp)} && mkdir -p {q(tmp)} && tar -xzf - -C {q(tmp)} && mv -T {q(tmp)} {q(dest)}"
        copy = f"tar -C {q(head.get('project_dir') or dest)} -czf - . | {remote} {q(unpack)}"
        steps.append(("its project", f"{remote} test -d {q(dest)} || ({copy})"))
    if n.get("deps"):
        steps.append(("the run's packages", f"{remote} {q(n['deps'])}"))
    for what, line in steps:
        done = subprocess.run(["sh", "-c", line], stdin=subprocess.DEVNULL, capture_output=True, timeout=3600)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines() or ["no output"]
            sink(OutputLine(n["node"], None, f"ddpctl: {n['node']}: {what} on its new machine failed: {said[-1]}"))


def ask(spec: dict, queries: list[dict]) -> dict:
    """The health query's lines from each of ``queries`` (``spec["health"]``'s: a node, its shell line), all at
    once, by node; a node that does not answer is left out (not judged)."""
    got: dict = {}

    def one(q: dict) -> None:
        try:
            done = subprocess.run(
                [*ssh(spec), q["host"], q["command"]], stdin=subprocess.DEVNULL, capture_output=True, timeout=60
            )
            got[q["node"]] = done.stdout.decode(errors="replace").splitlines()
        except (OSError, subprocess.SubprocessError):  # a node that does not answer: not judged
            pass

    threads = [threading.Thread(target=one, args=(q,), daemon=True) for q in queries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    return {q["node"]: got[q["node"]] for q in queries if q["node"] in got}


def ask_health(spec: dict, result: RunResult, sink) -> dict:
    """The health query's lines from the nodes the run named, while they are still up, by node: the
    controller judges them."""
    named = result.named()
    asked = [q for q in spec.get("health", []) if q["node"] in named]
    if not asked:
        return {}
    names = ", ".join(q["node"] for q in asked)
    sink(OutputLine(spec["nodes"][0]["node"], None, f"ddpctl: health: asking {names}, named by the run"))
    return ask(spec, asked)


class HealthTimer:
    """The health query of the run's nodes with GPUs while the run goes, with no ddpctl attached: all of them
    every ``spec["health_every_s"]`` seconds (``run --health-every``; 0: never), and at once a node the
    watcher names slow (``watch.SLOW_NOTE``, once a run: ``line`` sees every line), as the controller's
    ``LiveLook`` does. This program cannot judge (the controller's ``health_in_runs`` does, from
    ``RunResult.looks``), so it keeps each node's distinct outputs, the one seen last moved last, at most
    ``KEEP`` (a healthy node says the same each time: one or two texts)."""

    KEEP = 16

    def __init__(self, spec: dict, sink, asker=ask) -> None:
        self.spec, self.asker = spec, asker
        self.queries: list[dict] = spec.get("health", [])
        self.looks: dict[str, list[list[str]]] = {}
        self.asked: set[str] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads: list[threading.Thread] = []
        every = float(spec.get("health_every_s") or 0)
        if every and self.queries:
            names = ", ".join(q["node"] for q in self.queries)
            sink(OutputLine(spec["nodes"][0]["node"], None, f"ddpctl: health: asking {names} every {every:g} s"))
            self._start(self._every, every)

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def line(self, line: OutputLine) -> None:
        found = SLOW_NOTE.match(line.text) if line.rank is None else None
        if found is None or found["node"] in self.asked or self.done.is_set():
            return
        self.asked.add(found["node"])
        queries = [q for q in self.queries if q["node"] == found["node"]]
        if queries:
            self._start(self._look, queries)

    def _every(self, every: float) -> None:
        while not self.done.wait(every):
            self._look(self.queries)

    def _look(self, queries: list[dict]) -> None:
        for node, lines in self.asker(self.spec, queries).items():
            with self.lock:
                kept = self.looks.setdefault(node, [])
                if lines in kept:
                    kept.remove(lines)
                kept.append(lines)
                del kept[: -self.KEEP]

    def stop(self) -> dict[str, list[list[str]]]:
        """The timer stopped (a look under way ends first, within its timeout); what the looks said."""
        self.done.set()
        for thread in list(self.threads):
            thread.join(90)
        with self.lock:  # a copy: a slow look started as the run ended may still be writing
            return {node: list(outputs) for node, outputs in self.looks.items()}


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    folder = Path((sys.argv[1:] if argv is None else argv)[0])
    spec = json.loads((folder / "spec.json").read_text())
    (folder / "spec.json").unlink()
    if spec.get("trace"):  # the controller traces its round trips: this program's go beside them
        os.environ[TRACE_ENV] = str((folder / "trace.jsonl").resolve())
    signal.signal(signal.SIGINT, _interrupt)  # nohup left it ignored: `ddpctl stop` and Ctrl-C send it
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    (folder / "pid").write_text(f"{os.getpid()}\n")
    with open(folder / "output.log", "a", buffering=1) as log:

        def write(line: OutputLine) -> None:
            log.write(log_line(line))

        timer = HealthTimer(spec, write)

        def sink(line: OutputLine) -> None:
            write(line)
            timer.line(line)

        started, error, replaced = time.monotonic(), "", {}
        try:
            result = run(spec, sink, replaced)
        except KeyboardInterrupt:
            result = RunResult(spec["run_id"], 130, time.monotonic() - started, interrupted=True)
        except Exception as exc:  # the run did not start: the controller says why, in one line
            error = str(exc) if isinstance(exc, DdpctlError) else f"{type(exc).__name__}: {exc}"
            result = RunResult(spec["run_id"], 1, time.monotonic() - started, failed_node=spec["nodes"][0]["node"])
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run is over: its record is written whatever comes
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        result.looks = timer.stop()
        result.replaced = replaced  # recorded in the cluster's state by the controller
        if not error:
            result.probes = ask_health(spec, result, sink)
    result.nodes = [r if isinstance(r, NodeResult) else NodeResult(**r) for r in result.nodes]
    doc = {"cluster": spec["cluster"], "plan": spec["plan"], "result": result.to_dict()}
    if error:
        doc["error"] = error
    tmp = folder / "run.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, folder / "run.json")
