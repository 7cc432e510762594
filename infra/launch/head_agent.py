"""The run's supervisor on the head node: the same ``supervise()`` as on the controller, run there.

Shipped to the head as a zip with ``supervise.py``, ``nodes.py`` and ``diagnose.py`` (``head.py``
packs it; those modules and this one import nothing but the standard library and each other) and
started there so that it outlives the SSH session that started it. It reads ``spec.json`` from its
folder (and removes it: it holds the secrets' values), starts the run's rendezvous store and every
node's agent over the cluster's own SSH mesh (``ssh NODE``: the ssh_mesh role's keys and client
config), supervises them (fail fast; elastic: a lost node started again), and writes, in its folder,
``pid``, ``output.log`` (``[node rRANK] text`` lines, as ``runs/<id>/output.log``) and, last,
``run.json`` (the run's record). SIGINT or SIGTERM stops the run as Ctrl-C does.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from .nodes import Elastic, NodeResult, OutputLine, RunResult
from .supervise import supervise

LISTENING = re.compile(r"^LISTENING \S+$")
READY = re.compile(r"^READY \S+$")
STORE_TIMEOUT_S = 120.0
#: a line of ``output.log``, as ``runs/<id>/output.log`` has them (``runs/logs.py``)
LOG_LINE = re.compile(r"\[(?P<node>[^\] ]+)(?: r(?P<rank>\d+))?\] (?P<text>.*)")


def log_line(line: OutputLine) -> str:
    rank = "" if line.rank is None else f" r{line.rank}"
    return f"[{line.node}{rank}] {line.text}\n"


def read_log_line(raw: str) -> OutputLine:
    m = LOG_LINE.fullmatch(raw.rstrip("\n"))
    if m is None:
        return OutputLine("?", None, raw.rstrip("\n"))
    return OutputLine(m["node"], int(m["rank"]) if m["rank"] else None, m["text"])


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


def stop(spec: dict, host: str, mode: str, key: str = "", value: str = "", marker: str = "") -> None:
    """Signal the run's processes on ``host`` (node_programs/stop.py), narrowed by ``key=value``."""
    extra = f" {key} {shlex.quote(value)}" if key else ""
    command = (
        f"python3 -c {shlex.quote(spec['stop_source'])} {marker or spec['run_key']} "
        f"{shlex.quote(spec['run_id'])} {mode} {spec['grace_s']}{extra}"
    )
    subprocess.run([*ssh(spec), host, command], stdin=subprocess.DEVNULL, capture_output=True, timeout=60)


def ssh(spec: dict) -> list[str]:
    """OpenSSH over the cluster's mesh: its client config (keys, known hosts, BatchMode) where the
    ssh_mesh role put it."""
    config = os.path.expanduser(spec.get("ssh_config") or "")
    return ["ssh", "-T", *(["-F", config] if config else [])]


def _wait_for(lines: queue.Queue, pattern: re.Pattern[str], node: str, sink) -> None:
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            text = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if text is None:
            raise RuntimeError(f"the rendezvous store on the head node {node} ended before it served")
        if pattern.match(text):
            return
        if not (LISTENING.match(text) or READY.match(text)):
            sink(OutputLine(node, None, text))
    raise RuntimeError(f"the rendezvous store on the head node {node} did not start within {STORE_TIMEOUT_S:.0f} s")


def run(spec: dict, sink) -> RunResult:
    """Start the store, then the agents, and supervise them (``spec``: what ``head.py`` wrote)."""
    run_id, nodes, grace = spec["run_id"], spec["nodes"], float(spec["grace_s"])
    started = time.monotonic()
    store = None
    procs: list[MeshProcess] = []

    def cleanup() -> None:
        if store is not None:
            stop(spec, spec["store"]["host"], "stop", marker=spec["store_key"])
        if procs and all(p.poll() == 0 for p in procs):
            return
        for n in nodes:
            stop(spec, n["host"], "stop")

    try:
        if spec["store"] is not None:
            s = spec["store"]
            store = MeshProcess(spec, s["host"], s["node"], s["command"])
            store_lines: queue.Queue = queue.Queue()

            def pump() -> None:
                for line in store.lines():
                    store_lines.put(line.rstrip("\n"))
                store_lines.put(None)

            threading.Thread(target=pump, daemon=True).start()
            _wait_for(store_lines, LISTENING, s["node"], sink)
        for n in nodes:
            procs.append(MeshProcess(spec, n["host"], n["node"], n["command"], n["secret"]))
        if store is not None:
            _wait_for(store_lines, READY, spec["store"]["node"], sink)
    except KeyboardInterrupt:
        cleanup()
        return RunResult(run_id, 130, time.monotonic() - started, interrupted=True)
    except Exception as exc:
        sink(OutputLine(nodes[0]["node"], None, f"ddpctl: {exc}"))
        cleanup()
        return RunResult(run_id, 1, time.monotonic() - started, failed_node=nodes[0]["node"])

    def relaunch(i: int) -> MeshProcess:
        n = nodes[i]
        stop(spec, n["host"], "kill", spec["node_key"], n["node"])
        return MeshProcess(spec, n["host"], n["node"], n["command"], n["secret"])

    elastic = None
    if spec["min_nodes"]:
        elastic = Elastic(
            spec["min_nodes"], relaunch=relaunch, store_alive=None if store is None else (lambda: store.poll() is None)
        )
    return supervise(run_id, procs, sink, cleanup=cleanup, grace_s=grace, elastic=elastic)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    folder = Path((sys.argv[1:] if argv is None else argv)[0])
    spec = json.loads((folder / "spec.json").read_text())
    (folder / "spec.json").unlink()
    signal.signal(signal.SIGINT, _interrupt)  # nohup left it ignored: `ddpctl stop` and Ctrl-C send it
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    (folder / "pid").write_text(f"{os.getpid()}\n")
    with open(folder / "output.log", "a", buffering=1) as log:

        def sink(line: OutputLine) -> None:
            log.write(log_line(line))

        try:
            result = run(spec, sink)
        except KeyboardInterrupt:
            result = RunResult(spec["run_id"], 130, 0.0, interrupted=True)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run is over: its record is written whatever comes
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    result.nodes = [r if isinstance(r, NodeResult) else NodeResult(**r) for r in result.nodes]
    doc = {"cluster": spec["cluster"], "plan": spec["plan"], "result": asdict(result)}
    tmp = folder / "run.json.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, folder / "run.json")
