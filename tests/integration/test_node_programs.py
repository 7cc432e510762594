"""The programs ddpctl runs on nodes, run for real here as the nodes' python3 runs them: their text in
the environment, ``env DDPCTL_NODE_PROGRAM=TEXT python -c LOADER NAME ARGS`` (``node_programs.argv``).

With this Python, or the one in ``DDPCTL_TEST_NODE_PYTHON`` (e.g. a Python 3.8, the oldest a node may have;
the schema probe's tests need PyYAML in it).

Its pure tests (no process beyond Python) are in tests/unit/test_node_programs.py.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddpctl.infra import node_programs
from ddpctl.infra.launch.reach_plan import REACH_LINE
from tests.support.processes import free_port

PYTHON = os.environ.get("DDPCTL_TEST_NODE_PYTHON") or sys.executable


def run(name: str, *args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The program as the callers send it (``node_programs.argv``)."""
    return subprocess.run(
        node_programs.argv(PYTHON, name, *args),
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=10,
    )


def test_a_node_program_reads_in_ps_and_its_tracebacks_name_it(tmp_path: Path) -> None:
    """Issue 40: `ps` on a node shows a node program's name and arguments, not kilobytes of its
    source; the program sees its own arguments, and not the variable that carried its text."""
    marker = f"test-{uuid.uuid4().hex[:12]}"
    sweeper = subprocess.Popen(
        node_programs.argv(PYTHON, "stop", "DDPCTL_TEST", marker, "orphan", "1", str(os.getpid()))
    )
    try:
        deadline = time.monotonic() + 30
        cmdline: list[str] = []
        while time.monotonic() < deadline:  # env replaced by the Python it started
            cmdline = Path(f"/proc/{sweeper.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            if cmdline and cmdline[0] != "env":  # empty while the kernel swaps the image in (exec)
                break
            time.sleep(0.05)
        assert cmdline == [
            PYTHON,
            "-c",
            node_programs.LOADER,
            "stop",
            "DDPCTL_TEST",
            marker,
            "orphan",
            "1",
            str(os.getpid()),
        ]
        assert len(" ".join(cmdline)) < 200 + len(PYTHON)
        assert sweeper.poll() is None  # running: waiting for its parent (this test) to go
    finally:
        sweeper.kill()
        sweeper.wait()
    shown = node_programs.shown(node_programs.argv("python3", "reach", "29500"))
    assert shown[1] == "DDPCTL_NODE_PROGRAM=<node program reach.py>" and shown[-2:] == ["reach", "29500"]
    code = "import os, sys; print(sys.argv[1:], 'DDPCTL_NODE_PROGRAM' in os.environ); raise SystemExit(1 / 0)"
    proc = subprocess.run(
        ["env", f"DDPCTL_NODE_PROGRAM={code}", PYTHON, "-c", node_programs.LOADER, "mine", "a b", "c"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.stdout == "['a b', 'c'] False\n"
    assert 'File "mine", line 1' in proc.stderr and "ZeroDivisionError" in proc.stderr


# --- stop ----------------------------------------------------------------------------------------


@pytest.fixture
def marker() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def sleeper(env: dict[str, str] | None = None, *, ignore_term: bool = False) -> subprocess.Popen:
    code = "import signal, sys, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('ready', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "ready\n"  # its handlers are in place
    return proc


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_stop_terminates_the_tagged_process_and_prints_the_count(procs, marker) -> None:
    procs.append(tagged := sleeper({"DDPCTL_RUN_ID": marker}))
    result = run("stop", "DDPCTL_RUN_ID", marker, "term", "3")
    assert (result.returncode, result.stdout) == (0, "1\n"), result.stderr
    assert tagged.wait(timeout=5) == -signal.SIGTERM


def test_stop_leaves_a_process_with_another_value_or_key_alone(procs, marker) -> None:
    procs.append(other_value := sleeper({"DDPCTL_RUN_ID": marker + "-tail"}))
    procs.append(other_key := sleeper({"DDPCTL_CLUSTER_ID": marker}))
    procs.append(untagged := sleeper())
    result = run("stop", "DDPCTL_RUN_ID", marker, "kill", "3")
    assert result.stdout == "0\n", result.stderr
    time.sleep(0.1)
    assert other_value.poll() is other_key.poll() is untagged.poll() is None


def test_stop_with_a_node_marker_stops_that_node_only(procs, marker) -> None:
    """Two nodes of one run on one host (a machine's namespaces): a lost node's relaunch stops its own."""
    procs.append(node1 := sleeper({"DDPCTL_RUN_ID": marker, "DDPCTL_NODE": "node1"}))
    procs.append(node2 := sleeper({"DDPCTL_RUN_ID": marker, "DDPCTL_NODE": "node2"}))
    result = run("stop", "DDPCTL_RUN_ID", marker, "kill", "3", "DDPCTL_NODE", "node2")
    assert result.stdout == "1\n", result.stderr
    assert node2.wait(timeout=5) == -signal.SIGKILL
    assert node1.poll() is None


def test_stop_look_names_each_rank_s_state_and_asks_for_the_stacks_only_of_ranks_that_handle_it(
    procs, marker, tmp_path: Path
) -> None:
    """A hung run's ranks looked at (launch/watch.py): rank 0 handles SIGUSR1 (faulthandler, as
    training/metrics.py's beat sets it) and prints its stack; rank 1 is stopped (T), left as it is;
    rank 2 does not handle SIGUSR1 and is not sent it (its default would kill it); the agent (no RANK)
    is not a rank."""
    code = (
        "import faulthandler, signal, sys, time\n"
        "if sys.argv[1] == 'beats':\n    faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    base = {**os.environ, "DDPCTL_RUN_ID": marker, "LOCAL_RANK": "0"}
    stacks = tmp_path / "stderr"
    with open(stacks, "w") as err:
        for rank, how in (("0", "beats"), ("1", "stops"), ("2", "plain")):
            proc = subprocess.Popen(
                [sys.executable, "-c", code, how],
                env={**base, "RANK": rank},
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout.readline() == "ready\n"
        procs.append(agent := sleeper({"DDPCTL_RUN_ID": marker}))
    rank0, rank1, rank2 = procs[:3]
    rank1.send_signal(signal.SIGSTOP)
    time.sleep(0.2)
    result = run("stop", "DDPCTL_RUN_ID", marker, "look", "0")
    lines = sorted(result.stdout.splitlines())
    assert [line.split(" pid=")[0] for line in lines] == ["rank=0", "rank=1", "rank=2"], result.stderr
    assert lines[1].endswith("state=T") and lines[0].endswith("state=S"), lines
    deadline = time.monotonic() + 10
    while "in <module>" not in stacks.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "most recent call first" in stacks.read_text() and "in <module>" in stacks.read_text()
    assert rank0.poll() is rank2.poll() is agent.poll() is None  # nothing killed
    rank1.send_signal(signal.SIGCONT)


def test_stop_kill_sends_sigkill(procs, marker) -> None:
    procs.append(tagged := sleeper({"DDPCTL_RUN_ID": marker}, ignore_term=True))
    assert run("stop", "DDPCTL_RUN_ID", marker, "kill", "3").stdout == "1\n"
    assert tagged.wait(timeout=5) == -signal.SIGKILL


def test_stop_term_does_not_wait_for_a_process_that_ignores_it(procs, marker) -> None:
    procs.append(tagged := sleeper({"DDPCTL_RUN_ID": marker}, ignore_term=True))
    start = time.monotonic()
    assert run("stop", "DDPCTL_RUN_ID", marker, "term", "300").stdout == "1\n"
    assert time.monotonic() - start < 150  # not the 300 s grace (a liveness bound: generous under load)
    assert tagged.poll() is None


def test_stop_kills_what_is_left_after_the_grace_period(procs, marker) -> None:
    procs.append(stubborn := sleeper({"DDPCTL_RUN_ID": marker}, ignore_term=True))
    procs.append(polite := sleeper({"DDPCTL_RUN_ID": marker}))
    start = time.monotonic()
    result = run("stop", "DDPCTL_RUN_ID", marker, "stop", "0.5")
    assert result.stdout == "2\n", result.stderr
    assert 0.4 < time.monotonic() - start < 60  # the grace, then the kill: not forever
    assert polite.wait(timeout=5) == -signal.SIGTERM
    assert stubborn.wait(timeout=5) == -signal.SIGKILL


def test_stop_returns_at_once_when_the_tagged_processes_are_gone(procs, marker) -> None:
    """A stopped child that nobody has waited for yet is a zombie: gone, not waited on until the grace ends."""
    procs.append(sleeper({"DDPCTL_RUN_ID": marker}))
    start = time.monotonic()
    assert run("stop", "DDPCTL_RUN_ID", marker, "stop", "300").stdout == "1\n"
    assert time.monotonic() - start < 150  # not the 300 s grace


def test_stop_orphan_waits_for_its_parent_to_die_then_stops_the_run(procs, marker) -> None:
    """A controller SIGKILLed mid-run: the sweeper it started stops what the run left (a process that
    ignores SIGTERM too, after the grace); while the controller lives it signals nothing."""
    procs.append(stubborn := sleeper({"DDPCTL_RUN_ID": marker}, ignore_term=True))
    controller_code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', sys.argv[1], 'DDPCTL_RUN_ID', sys.argv[2], 'orphan', '0.5', "
        "str(__import__('os').getpid())])\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    controller = subprocess.Popen(
        [PYTHON, "-c", controller_code, node_programs.source("stop"), marker], stdout=subprocess.PIPE, text=True
    )
    procs.append(controller)
    assert controller.stdout.readline() == "ready\n"
    time.sleep(1.5)
    assert stubborn.poll() is None  # the controller lives: nothing is stopped
    controller.kill()
    assert stubborn.wait(timeout=15) == -signal.SIGKILL


def test_stop_does_not_signal_itself(marker) -> None:
    result = run("stop", "DDPCTL_RUN_ID", marker, "kill", "3", env={**os.environ, "DDPCTL_RUN_ID": marker})
    assert (result.returncode, result.stdout) == (0, "0\n"), result.stderr


# --- reach ---------------------------------------------------------------------------------------


def reach(port: int, me: str, peers: list[str], expect: int, seconds: float, *strict: str) -> subprocess.Popen:
    argv = [str(port), me, ",".join(peers), str(expect), str(seconds), *strict]
    return subprocess.Popen([PYTHON, "-c", node_programs.source("reach"), *argv], stdout=subprocess.PIPE, text=True)


def test_reach_two_nodes_reach_each_other() -> None:
    port = free_port()
    a = reach(port, "127.0.0.1", ["127.0.0.2"], 1, 300)
    b = reach(port, "127.0.0.2", ["127.0.0.1"], 1, 300)
    start = time.monotonic()
    out_a, _ = a.communicate(timeout=400)
    out_b, _ = b.communicate(timeout=400)
    assert (a.returncode, b.returncode) == (0, 0)
    assert out_a == "REACH 127.0.0.1 127.0.0.2 ok\n" and out_b == "REACH 127.0.0.2 127.0.0.1 ok\n"
    assert time.monotonic() - start < 150  # each leaves once its peer has connected, not at the 300 s deadline


def test_reach_a_closed_port_is_an_error_line_after_the_time_given() -> None:
    port = free_port()
    start = time.monotonic()
    proc = reach(port, "127.0.0.1", ["127.0.0.2"], 0, 0.5)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0  # not strict: the verdict is in the line
    assert out == "REACH 127.0.0.1 127.0.0.2 error: Connection refused\n"
    assert REACH_LINE.match(out.strip()).groups() == ("127.0.0.1", "127.0.0.2", "error: Connection refused")
    assert 0.5 <= time.monotonic() - start < 60


def test_reach_strict_exits_1_when_a_peer_is_unreachable() -> None:
    proc = reach(free_port(), "127.0.0.1", ["127.0.0.2"], 0, 0.3, "strict")
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1 and "error: Connection refused" in out


def test_reach_a_port_in_use_is_reported_and_not_waited_for() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(8)
        port = taken.getsockname()[1]
        proc = reach(port, "127.0.0.1", [], 3, 5, "strict")
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 1
    assert out.startswith(f"REACH 127.0.0.1 127.0.0.1 error: cannot listen on port {port}: ")


def test_reach_a_node_nobody_connects_to_does_not_listen() -> None:
    """Before a run the other nodes only connect to the head's port (where the store listens): a
    node of theirs that holds the same port, or that shares the head's host, is no failure."""
    with socket.socket() as store:
        store.bind(("", 0))  # every address, as the rendezvous store listens
        store.listen(8)
        port = store.getsockname()[1]
        proc = reach(port, "127.0.0.2", ["127.0.0.1"], 0, 5, "strict")
        out, _ = proc.communicate(timeout=10)
    assert (proc.returncode, out) == (0, "REACH 127.0.0.2 127.0.0.1 ok\n")


def test_reach_the_head_waits_for_the_nodes_expected() -> None:
    port = free_port()
    head = reach(port, "127.0.0.1", [], 1, 5)
    time.sleep(0.3)
    assert head.poll() is None  # still listening: nobody connected yet
    node = reach(port, "127.0.0.2", ["127.0.0.1"], 0, 5)
    assert node.communicate(timeout=10)[0] == "REACH 127.0.0.2 127.0.0.1 ok\n"
    assert head.communicate(timeout=10) == ("", None) and head.returncode == 0


# --- rdzv_store: with this Python (the store needs torch, as the head node's Python has it) --------


class Store:
    """The store program as the executors start it, ``python -c TEXT HOST PORT``, its first line read."""

    def __init__(self, port: int, *, prelude: str = "", rdzv_id: str = "") -> None:
        self.port = port
        text = node_programs.source("rdzv_store")
        if prelude:  # run first, then the program as its own module (its __future__ import stays first)
            text = f"{prelude}exec(compile({text!r}, 'rdzv_store', 'exec'), {{'__name__': '__main__'}})\n"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", text, "127.0.0.1", str(port), *([rdzv_id] if rdzv_id else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.first = self.proc.stdout.readline()

    @classmethod
    def on_a_free_port(cls, **kwargs) -> Store:
        """Started on a port nothing listened on a moment ago: another process may take it before the
        store binds it (seen on a busy machine), so a port found taken is a new try, not a failure."""
        for _ in range(5):
            store = cls(free_port(), **kwargs)
            if not store.first.startswith("ERROR cannot listen on port "):
                return store
            store.proc.wait(timeout=20)
        raise AssertionError(f"5 free ports were taken before the store bound them: {store.first}")

    def finish(self, timeout: float = 20) -> tuple[int, str, str]:
        """Its exit status and the rest of its output. Read through the same buffered pipes as the first
        line (``communicate`` reads the raw pipes and would miss a line already buffered with it)."""
        self.proc.wait(timeout=timeout)
        return self.proc.returncode, self.proc.stdout.read(), self.proc.stderr.read()


@pytest.fixture
def stores() -> Iterator[list[Store]]:
    started: list[Store] = []
    yield started
    for store in started:
        store.proc.kill()
        store.proc.wait()


def client(port: int):
    """What a torchrun agent with is_host=0 does: join the store as a client."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", port, is_master=False, multi_tenant=True, timeout=timedelta(seconds=30))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_store_serves_clients_until_a_stop_signal_then_exits_0_quietly(stores, sig: signal.Signals) -> None:
    stores.append(store := Store.on_a_free_port())
    assert store.first == f"LISTENING 127.0.0.1:{store.port}\n"  # at once: before torch is imported
    assert store.proc.stdout.readline() == f"READY 127.0.0.1:{store.port}\n"
    agent = client(store.port)
    agent.set("k", "v")
    assert agent.get("k") == b"v"
    socket.create_connection(("127.0.0.1", store.port), timeout=1).close()  # the head-port precheck's probe
    time.sleep(0.5)
    assert store.proc.poll() is None  # clients' coming and going does not end it
    del agent
    store.proc.send_signal(sig)
    assert store.finish() == (0, "", "")  # no word, no traceback


def test_store_clients_that_come_while_it_imports_torch_wait_for_it(stores, capfd) -> None:
    """The port listens from the first line: an agent that connects before the store serves waits
    in its backlog, quietly (no "failed to connect/validate ... retrying" trace), and is served."""
    import torch.distributed  # noqa: F401  (here first: this client connects at once)

    stores.append(store := Store.on_a_free_port())
    assert store.first.startswith("LISTENING ")
    start = time.monotonic()
    agent = client(store.port)  # the store is still importing torch: seconds
    waited = time.monotonic() - start
    agent.set("a", "b")
    assert store.proc.stdout.readline().startswith("READY ")
    assert waited > 0.2 and "retrying" not in capfd.readouterr().err
    del agent
    store.proc.terminate()
    assert store.finish() == (0, "", "")


def test_store_names_every_agent_that_ever_joined_as_it_stops(stores) -> None:
    """Told the rendezvous id, it reads torch's own rendezvous state (written here through torch's
    c10d backend, as agents write it): an agent that joined and then removed itself (as one whose
    join timed out does) is still named when it stops."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState

    stores.append(store := Store.on_a_free_port(rdzv_id="run7"))
    assert store.proc.stdout.readline().startswith("READY ")
    backend = C10dRendezvousBackend(client(store.port), "run7")
    state = _RendezvousState()
    state.participants[_NodeDesc("10.0.0.5", 4242, 0)] = 0
    state.wait_list.add(_NodeDesc("10.0.0.6", 77, 0))
    token = backend.set_state(pickle.dumps(state))[1]
    time.sleep(2.5)  # it reads the state every second
    backend.set_state(pickle.dumps(_RendezvousState()), token)  # both gone again
    time.sleep(1.5)
    store.proc.terminate()
    assert store.finish() == (0, "JOINED 10.0.0.5:4242 10.0.0.6:77\n", "")


def test_store_told_a_rendezvous_nobody_joined_says_so(stores) -> None:
    stores.append(store := Store.on_a_free_port(rdzv_id="run8"))
    assert store.proc.stdout.readline().startswith("READY ")
    store.proc.terminate()
    assert store.finish() == (0, "JOINED\n", "")


def test_store_a_stop_signal_while_it_starts_is_not_lost(stores) -> None:
    """Sent before it is ready (here, before its first line): blocked, then taken by sigwait (exit 0)."""
    prelude = "import os, signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\nos.kill(os.getpid(), signal.SIGTERM)\n"
    stores.append(store := Store.on_a_free_port(prelude=prelude))
    assert store.first.startswith("LISTENING ")
    assert store.finish()[:2] == (0, f"READY 127.0.0.1:{store.port}\n")


def test_store_a_port_in_use_is_one_error_line_at_once(stores) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(8)
        port = taken.getsockname()[1]
        stores.append(store := Store(port))
        code, out, err = store.finish(timeout=5)  # before it imports torch
    assert (code, store.first + out) == (1, f"ERROR cannot listen on port {port}: Address already in use\n"), err


def test_store_without_torch_says_so(stores) -> None:
    stores.append(store := Store.on_a_free_port(prelude="import sys\nsys.modules['torch'] = None\n"))
    assert store.first.startswith("LISTENING ")
    code, out, _ = store.finish()
    assert code == 1 and out.startswith(f"ERROR {sys.executable} cannot import torch.distributed: ")


# --- slurm tail ----------------------------------------------------------------------------------


class Tail:
    def __init__(self, folder: Path, prefix: str) -> None:
        self.proc = subprocess.Popen(
            [PYTHON, "-u", "-c", node_programs.source("slurm_tail"), str(folder), prefix],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()

    def take(self, n: int) -> list[str]:
        return [self.lines.get(timeout=3) for _ in range(n)]

    def nothing_more(self) -> bool:
        time.sleep(0.5)  # more than two rounds of reading
        return self.lines.empty()


@pytest.fixture
def tail(tmp_path: Path) -> Iterator[Tail]:
    t = Tail(tmp_path, "ddpctl-42-")
    yield t
    t.proc.kill()
    t.proc.wait()


def append(path: Path, data: str) -> None:
    with path.open("a") as f:
        f.write(data)


def test_tail_prints_each_nodes_lines_as_they_are_appended(tmp_path: Path, tail: Tail) -> None:
    append(tmp_path / "ddpctl-42-node0.out", "[rank0]: one\n")
    assert tail.take(1) == ["node0\t[rank0]: one\n"]
    append(tmp_path / "ddpctl-42-node0.out", "[rank0]: two\n[rank0]: three\n")
    assert tail.take(2) == ["node0\t[rank0]: two\n", "node0\t[rank0]: three\n"]
    assert tail.nothing_more()  # nothing printed twice


def test_tail_prints_a_line_once_its_newline_is_written(tmp_path: Path, tail: Tail) -> None:
    append(tmp_path / "ddpctl-42-node1.out", "half")
    assert tail.nothing_more()
    append(tmp_path / "ddpctl-42-node1.out", " and half\n")
    assert tail.take(1) == ["node1\thalf and half\n"]


def test_tail_follows_files_that_appear_later_and_only_the_jobs(tmp_path: Path, tail: Tail) -> None:
    time.sleep(0.3)
    append(tmp_path / "ddpctl-41-node0.out", "another job\n")
    append(tmp_path / "ddpctl-42-node0.err", "not an output file\n")
    append(tmp_path / "ddpctl-42-node2.out", "late\n")
    assert tail.take(1) == ["node2\tlate\n"]
    assert tail.nothing_more()


def test_tail_replaces_bytes_that_are_not_utf8(tmp_path: Path, tail: Tail) -> None:
    (tmp_path / "ddpctl-42-node0.out").write_bytes(b"bad \xff byte\n")
    assert tail.take(1) == ["node0\tbad \ufffd byte\n"]


def test_tail_once_reads_every_file_node_by_node_and_exits(tmp_path: Path) -> None:
    append(tmp_path / "ddpctl-42-node1.out", "b1\nb2\n")
    append(tmp_path / "ddpctl-42-node0.out", "a1\npartial")
    got = subprocess.run(
        [PYTHON, "-c", node_programs.source("slurm_tail"), str(tmp_path), "ddpctl-42-", "once"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 0 and got.stdout == "node0\ta1\nnode1\tb1\nnode1\tb2\n"


def test_tail_ends_once_its_session_is_gone(tmp_path: Path) -> None:
    """A follower killed with no word (a SIGKILLed ddpctl): the SSH session, its parent, ends, and
    the tail must not poll on forever on the login node."""
    session = subprocess.Popen(
        [
            "bash",
            "-c",
            f'{PYTHON} -c "$0" {tmp_path} ddpctl-42- & echo $!; sleep 60',
            node_programs.source("slurm_tail"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert session.stdout is not None
    tail = int(session.stdout.readline())
    time.sleep(0.5)
    session.kill()
    session.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{tail}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = Path(f"/proc/{tail}").exists() and "Z" not in Path(f"/proc/{tail}/stat").read_text().rsplit(")", 1)[1][:3]
    assert not alive


# --- pcluster schema -----------------------------------------------------------------------------

#: Stand-ins for aws-parallelcluster and marshmallow: ClusterSchema refuses a config with
#: "Bad", crashes on "Crash", and otherwise loads it into the attributes the program reads.
STAND_INS = {
    "marshmallow/__init__.py": """
        class ValidationError(Exception):
            def __init__(self, messages):
                super().__init__(messages)
                self.messages = messages
    """,
    "pcluster/__init__.py": "",
    "pcluster/utils.py": """
        def get_installed_version():
            return "3.99.0"
    """,
    "pcluster/schemas/__init__.py": "",
    "pcluster/schemas/cluster_schema.py": """
        import os
        from types import SimpleNamespace as NS
        from marshmallow import ValidationError

        class ClusterSchema:
            def __init__(self, cluster_name):
                self.cluster_name = cluster_name

            def load(self, doc):
                if "Bad" in doc:
                    raise ValidationError({"Scheduling": {"SlurmQueues": {0: {"Name": [doc["Bad"]]}}}})
                if "Crash" in doc:
                    raise KeyError(doc["Crash"])
                queues = [
                    NS(name=q["Name"], compute_resources=[NS(instance_types=[r["InstanceType"]]) for r in q["ComputeResources"]])
                    for q in doc["Scheduling"]["SlurmQueues"]
                ]
                scheduler = doc["Scheduling"]["Scheduler"] + "@" + os.environ["AWS_DEFAULT_REGION"] + "/" + self.cluster_name
                return NS(scheduling=NS(scheduler=scheduler, queues=queues))
    """,
}

CONFIG = """
Region: eu-west-1
Scheduling:
  Scheduler: slurm
  SlurmQueues:
    - Name: q0
      ComputeResources:
        - {Name: a, InstanceType: g5.xlarge}
        - {Name: b, InstanceType: g5.2xlarge}
"""


@pytest.fixture
def stand_ins(tmp_path: Path) -> dict[str, str]:
    for name, text in STAND_INS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    return {**os.environ, "PYTHONPATH": str(tmp_path), "AWS_DEFAULT_REGION": "ap-south-1"}


def schema(stdin: str, env: dict[str, str]) -> dict:
    result = run("pcluster_schema", "mycluster", stdin=stdin, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1  # one JSON document, on one line
    return json.loads(lines[0])


def test_schema_a_loaded_config_is_its_queue_and_instance_types(stand_ins) -> None:
    assert schema(CONFIG, stand_ins) == {
        "ok": True,
        "version": "3.99.0",
        "scheduler": "slurm@eu-west-1/mycluster",  # the config's region, the cluster name given
        "queue": "q0",
        "instance_types": ["g5.xlarge", "g5.2xlarge"],
    }


def test_schema_a_config_without_a_region_is_loaded_in_us_east_1(stand_ins) -> None:
    verdict = schema(CONFIG.replace("Region: eu-west-1", ""), stand_ins)
    assert verdict["scheduler"] == "slurm@us-east-1/mycluster"


def test_schema_refusals_are_the_schemas_messages(stand_ins) -> None:
    verdict = schema("Bad: must be lower case", stand_ins)
    # json's keys are strings: the list index 0 comes back as "0"
    assert verdict == {
        "ok": False,
        "version": "3.99.0",
        "errors": {"Scheduling": {"SlurmQueues": {"0": {"Name": ["must be lower case"]}}}},
    }


def test_schema_a_crash_is_named_with_its_type(stand_ins) -> None:
    assert schema("Crash: boom", stand_ins) == {"ok": False, "version": "3.99.0", "crash": "KeyError: 'boom'"}


def test_schema_without_aws_parallelcluster_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # PyYAML, but no pcluster
    verdict = schema(CONFIG, env)
    assert verdict["ok"] is False and verdict["crash"].startswith("cannot import aws-parallelcluster: ")
    assert "version" not in verdict


# --- writable ------------------------------------------------------------------------------------


def test_writable_says_why_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert run("writable", str(tmp_path / "new" / "deeper")).returncode == 0  # creatable
    assert not (tmp_path / "new").exists()
    assert run("writable", str(tmp_path)).returncode == 0
    under_file = run("writable", str(tmp_path / "file" / "snapshots"))
    assert (under_file.returncode, under_file.stdout) == (1, f"{tmp_path / 'file'} is not a directory\n")
    too_long = run("writable", str(tmp_path / ("x" * 300) / "y"))
    assert (too_long.returncode, too_long.stdout) == (1, "File name too long\n")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anything but a read-only or immutable folder (tests/integration/test_onprem.py)
        denied = run("writable", str(locked / "snapshots"))
        assert denied.returncode == 1 and denied.stdout.startswith(f"{locked} is not writable by ")
