"""Running a play in-process (hosts/ansible.run_playbook) leaves no process and no signal handler behind.

A real ansible-playbook against localhost over the local connection: Ctrl-C (or SIGTERM) in the middle of a task
stops the play's every process (its workers run in sessions of their own), and a play that ends
leaves Python's SIGINT and SIGTERM handlers as they were (the Python API runs `up` and then `run`
in one process, where a later Ctrl-C must still interrupt).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from ddpctl.infra.hosts.ansible import run_playbook

PLAY = """\
- name: A task that takes a while
  hosts: all
  gather_facts: false
  tasks:
    - name: Sleep
      ansible.builtin.command: sleep {seconds}
      changed_when: false
"""


def write_play(tmp_path: Path, seconds: int) -> tuple[str, str]:
    (tmp_path / "play.yml").write_text(PLAY.format(seconds=seconds))
    (tmp_path / "inventory.ini").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return str(tmp_path / "play.yml"), str(tmp_path / "inventory.ini")


def sleepers(seconds: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if (proc.info["cmdline"] or [])[:2] == ["sleep", str(seconds)]:
            found.append(proc)
    return found


def test_a_play_that_ends_leaves_the_signal_handlers_as_they_were(tmp_path: Path) -> None:
    play, inventory = write_play(tmp_path, 0)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    report = run_playbook(play, inventory, lambda _line: None)  # an absolute path is taken as it is
    assert report.failures == []
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_in_the_middle_of_a_task_stops_every_process_of_the_play(tmp_path: Path, signum: int) -> None:
    seconds = 4711  # a number no other process sleeps for
    play, inventory = write_play(tmp_path, seconds)

    def interrupt(_signum: int, _frame: object) -> None:
        if sleepers(seconds):  # the task is under way: press Ctrl-C
            os.kill(os.getpid(), signum)
        else:
            signal.alarm(1)

    term = signal.getsignal(signal.SIGTERM)
    previous = signal.signal(signal.SIGALRM, interrupt), signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.alarm(2)  # (SIGINT as in a terminal, also where the tests run under nohup)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_playbook(play, inventory, lambda _line: None)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
    assert signal.getsignal(signal.SIGTERM) == term  # as it was
    deadline = time.monotonic() + 5  # stopped and reaped before run_playbook returned; a moment for init
    while sleepers(seconds) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sleepers(seconds) == []
