"""Running the playbooks from ddpctl, through ansible-runner's event stream.

``up`` shows one line per task with each host's outcome, failures as they happen, not a wall of
text. The playbooks themselves know nothing of ddpctl: ``ansible-playbook -i INVENTORY
playbooks/site.yml`` does the same work.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.errors import DdpctlError
from ..model.progress import activity
from ..tools import procs
from ..tools.signals import terminate_as_interrupt

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
ANSIBLE_CFG = Path(__file__).resolve().parents[2] / "ansible.cfg"
#: the environment key that marks one play's processes (see run_playbook)
PLAY_KEY = "DDPCTL_PLAY"
STATUS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass(frozen=True)
class Play:
    """How much of a playbook runs, and how: only the roles in ``tags`` (``--tags``); in check
    mode, changing nothing (``--check``); reporting what each task changes or would (``--diff``)."""

    tags: str | None = None
    check: bool = False
    diff: bool = False

    def cmdline(self) -> str | None:
        flags = [flag for flag, on in (("--check", self.check), ("--diff", self.diff)) if on]
        return " ".join(flags) or None


#: All of a playbook, as it is.
WHOLE_PLAY = Play()


@dataclass(frozen=True)
class TaskDiff:
    """What one task changed (or would change) on one host, as a unified diff or Ansible's own text."""

    host: str
    task: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"host": self.host, "task": self.task, "diff": self.text}


@dataclass
class PlayReport:
    """What a playbook run told us: per-host facts that tasks published, the recap, and the
    changes' diffs (with ``Play.diff``)."""

    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    diffs: list[TaskDiff] = field(default_factory=list)


class TaskLines:
    """Turns runner events into one progress line per task: ``task: node0 ok, node1 changed``."""

    def __init__(self, progress: Callable[[str], None], report: PlayReport) -> None:
        self.progress = progress
        self.report = report
        self.task: str | None = None
        self.hosts: dict[str, str] = {}
        self.all_hosts: set[str] = set()  # every host the play has reported on so far

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind in ("playbook_on_task_start", "playbook_on_stats"):
            self.flush()
            self.task = data.get("task") if kind == "playbook_on_task_start" else None
            self.show_activity()
        if kind in STATUS:
            self.all_hosts.add(data.get("host", "?"))
            host, res = data.get("host", "?"), data.get("res") or {}
            status = STATUS[kind]
            if status == "ok" and res.get("changed"):
                status = "changed"
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                status = "failed (ignored)"
            self.hosts[host] = status
            text = diff_text(res.get("diff"))
            if text and res.get("changed"):
                self.report.diffs.append(TaskDiff(host, str(data.get("task") or "?"), text))
            for key, value in (res.get("ansible_facts") or {}).items():
                if key.startswith("ddpctl_"):
                    self.report.facts.setdefault(host, {})[key] = value
            if kind in ("runner_on_failed", "runner_on_unreachable") and not data.get("ignore_errors"):
                msg = str(res.get("msg") or res.get("stderr") or res.get("stdout") or "failed").strip().splitlines()
                self.report.failures.append(f"{host}: {data.get('task')}: {msg[0] if msg else 'failed'}")
            self.show_activity()
        if kind == "playbook_on_stats":
            for key in ("ok", "changed", "failures", "dark", "skipped"):
                for host, n in (data.get(key) or {}).items():
                    self.report.stats.setdefault(host, {})[key] = n
        return False  # do not keep events on disk beyond what runner needs

    def show_activity(self) -> None:
        """The task running now, and how many hosts are done with it (a line appears only at its end)."""
        if self.task is None:
            activity(self.progress, None)
            return
        total = len(self.all_hosts | set(self.hosts))
        done = f" ({len(self.hosts)} of {total} hosts done)" if total else ""
        activity(self.progress, f"{self.task}{done}")

    def flush(self) -> None:
        if self.task and self.hosts:
            summary = ", ".join(f"{h} {s}" for h, s in sorted(self.hosts.items()))
            self.progress(f"{self.task}: {summary}")
        self.hosts = {}


def diff_text(diff: Any) -> str:
    """A task result's ``diff`` (one dict, or a list of them) as text: a unified diff of ``before``
    and ``after`` where it has them, else what the module prepared (``prepared``)."""
    import difflib

    parts = []
    for item in diff if isinstance(diff, list) else [diff] if isinstance(diff, dict) else []:
        if isinstance(item.get("prepared"), str):
            parts.append(item["prepared"].rstrip("\n"))
        before, after = item.get("before"), item.get("after")
        if isinstance(before, str) and isinstance(after, str) and before != after:
            lines = difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=str(item.get("before_header") or "before"),
                tofile=str(item.get("after_header") or "after"),
            )
            parts.append("".join(lines).rstrip("\n"))
        elif isinstance(before, dict) and isinstance(after, dict) and before != after:  # e.g. a file's mode
            parts += [
                f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in sorted(after) if before.get(k) != after.get(k)
            ]
    return "\n".join(p for p in parts if p)


def settings_without_cfg(tmp: Path) -> dict[str, str]:
    """ansible.cfg's settings as environment variables, for an install that has no ansible.cfg (a wheel).

    Temp files and SSH control sockets go under ``tmp``, out of the real home, as with the file.
    """
    return {
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_INTERPRETER_PYTHON": "auto_silent",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORKS": "16",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "local-tmp"),
        "ANSIBLE_NOCOWS": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp"),
    }


def run_playbook(
    playbook: str,
    inventory: str,
    progress: Callable[[str], None],
    *,
    extravars: dict[str, Any] | None = None,
    limit: str | None = None,
    play: Play = WHOLE_PLAY,
) -> PlayReport:
    """Run ``playbook`` against ``inventory``; raise with the first failures if it fails."""
    import ansible_runner  # heavy: only when a playbook actually runs

    report = PlayReport()
    venv_bin = os.path.dirname(sys.executable)
    with tempfile.TemporaryDirectory(prefix="ddpctl-ansible-") as tmp:
        envvars = {
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_HOME": os.environ.get("ANSIBLE_HOME", str(Path(tmp) / "ansible-home")),
            "ANSIBLE_NOCOLOR": "1",
        }
        if ANSIBLE_CFG.is_file():  # the repository's ansible.cfg (a source checkout)
            envvars["ANSIBLE_CONFIG"] = str(ANSIBLE_CFG)
        else:  # installed from a wheel: the same settings, without the file
            envvars.update(settings_without_cfg(Path(tmp)))
        # every process of this play (ansible-playbook, the workers it starts in their own sessions, their ssh
        # and its ControlPersist master) carries this marker, so that a Ctrl-C or a crash stops them all
        marker = secrets.token_hex(8)
        envvars[PLAY_KEY] = marker
        try:
            with terminate_as_interrupt():
                result = ansible_runner.run(
                    private_data_dir=tmp,
                    playbook=str(PLAYBOOKS / playbook),
                    inventory=os.path.abspath(inventory),
                    extravars=extravars or {},
                    limit=limit,
                    tags=play.tags,
                    cmdline=play.cmdline(),
                    envvars=envvars,
                    suppress_env_files=True,
                    quiet=True,
                    event_handler=TaskLines(progress, report),
                    # never cancel from here: ansible-runner would otherwise install SIGINT and SIGTERM handlers of
                    # its own and leave them in place (a later Ctrl-C, in a notebook too, would do nothing); Ctrl-C
                    # raises KeyboardInterrupt here as anywhere, and the play is stopped below
                    cancel_callback=lambda: False,
                )
        except BaseException:
            procs.stop_tagged(PLAY_KEY, marker, grace=2.0)
            raise
        finally:
            activity(progress, None)
        if result.status != "successful":  # what it left (an orphaned worker, a connection master) goes too
            procs.stop_tagged(PLAY_KEY, marker, grace=2.0)
            detail = "; ".join(report.failures[:3]) or _last_line(result)
            raise DdpctlError(f"{playbook} failed ({result.status}, rc {result.rc}): {detail}")
    return report


def _last_line(result: Any) -> str:
    try:
        lines = [line for line in result.stdout.read().splitlines() if line.strip()]
    except Exception:
        return "see the output above"
    return lines[-1] if lines else "no output"
