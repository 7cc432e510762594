"""The Slurm executor: submit the planned sbatch script on the login node, stream every node's
output as it is written, follow the job's state, and ``scancel`` it on Ctrl-C or failure.

Runs over SSH on the cluster's login (head) node. Job states map to ddpctl's through one table,
as in TorchX's Slurm scheduler.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..hosts.connections import connect, remote_stop
from ..model.errors import DdpctlError
from ..model.host import Host
from ..node_programs import argv as program_argv
from ..node_programs import command
from ..tools.procs import RUN_KEY
from .deps import outcome
from .launcher import Described, Handle, Phase
from .nodes import NodeStatus, log_line, read_log_line
from .project import pack
from .sbatch import SbatchPlan, secrets_path
from .ssh_executor import check_writable, run_step, ship_project
from .supervise import NodeResult, OutputLine, RunResult, parse_line
from .watch import is_beat

if TYPE_CHECKING:  # pragma: no cover
    import fabric

    from .plan import Renew

#: Slurm job state -> ddpctl's (pending, running, succeeded, failed, cancelled).
SLURM_STATES = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "RESV_DEL_HOLD": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "PREEMPTED": "failed",
    "CANCELLED": "cancelled",
    "REVOKED": "cancelled",
}


#: a job Slurm does not know for this long (neither ``scontrol`` nor ``sacct``) has gone
GONE_AFTER_S = 30.0

#: a job's last state (ddpctl's words above) -> how its part of the run ended
JOB_END = {"succeeded": NodeStatus.OK, "failed": NodeStatus.FAILED, "cancelled": NodeStatus.STOPPED}


def parse_job_info(text: str) -> tuple[str, int | None]:
    """``scontrol show job -o`` -> (state, exit code of the batch script)."""
    state = re.search(r"\bJobState=(\S+)", text)
    code = re.search(r"\bExitCode=(\d+):(\d+)", text)
    exit_code = None
    if code:
        exit_code = int(code.group(1)) or (128 + int(code.group(2)) if int(code.group(2)) else 0)
    return (state.group(1) if state else "UNKNOWN"), exit_code


class SlurmExecutor:
    def __init__(
        self, login: Host, sink: Callable[[OutputLine], None], poll_s: float = 1.0, pending_timeout_s: float = 60.0
    ) -> None:
        self.login = login
        self.sink = sink
        self.poll_s = poll_s
        self.pending_timeout_s = pending_timeout_s

    def run(
        self,
        plan: SbatchPlan,
        renew: Renew | None = None,
        progress: Callable[[str], None] | None = None,
        submitted: Callable[[Handle], None] | None = None,
    ) -> RunResult:
        """Submit, hand the job's handle to ``submitted``, follow the job to its end (``renew`` is
        left unused: an sbatch job is not elastic)."""
        conn = connect(self.login)
        try:
            launcher = SlurmLauncher(conn, self.poll_s, self.pending_timeout_s)
            handle = launcher.submit(plan, progress)
            if submitted is not None:
                submitted(handle)
            return launcher.attach(handle, self.sink, seen=[])
        finally:
            conn.close()


def install(conn: fabric.Connection, plan: SbatchPlan) -> list[str]:
    """A user's project, then the run's packages, on the login node, into the shared work
    directory, before sbatch (a failed install: one line, and no job is submitted)."""
    if plan.project is not None:  # once per content: a copy of the same files is reused
        ship_project(conn, plan.project_dir, pack(plan.project))
    return outcome(plan.deps, [run_step(conn, deps) for deps in plan.deps])


def sbatch(conn: fabric.Connection, plan: SbatchPlan) -> str:
    """The batch script (and its secrets, 0600) on the login node, given to sbatch: the job's id; a
    refusal is one line, with no secret left behind."""
    nodes = len(set(_run(conn, "sinfo -h -N -o %N", check=False).split()))
    if nodes and plan.nodes > nodes:
        raise DdpctlError(
            f"--nodes {plan.nodes} but Slurm on {conn.host} has {nodes} node(s): use --nodes {nodes} or fewer"
        )
    if plan.writable:  # as the compute nodes see it too, on a cluster's shared file systems
        check_writable(plan.writable, {str(conn.host): conn})
    _run(conn, f"mkdir -p {shlex.quote(plan.output_dir)}")
    conn.put(io.StringIO(plan.script), remote=plan.script_path)
    if plan.secrets:
        write_private(conn, plan.secrets_file, plan.secret_input())
    out = _run(conn, f"sbatch --parsable {shlex.quote(plan.script_path)}", check=False, both=True)
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        if plan.secrets:  # no job will read them
            _run(conn, f"rm -f {shlex.quote(plan.secrets_file)}", check=False)
        reason = out.strip().splitlines()[-1] if out.strip() else "no answer"
        raise DdpctlError(f"sbatch refused the job: {reason.removeprefix('sbatch: error: ')}")
    return job_id


def write_private(conn: fabric.Connection, path: str, data: bytes) -> None:
    """``data`` into a new file at ``path`` on the login node that only its user can read (0600 from
    its first byte: made empty under umask 077, never through a link left there, then filled)."""
    q = shlex.quote(path)
    _run(conn, f"umask 077 && rm -f {q} && (set -C; : > {q})")
    conn.put(io.BytesIO(data), remote=path)


def _run(conn: fabric.Connection, cmd: str, *, check: bool = True, both: bool = False) -> str:
    result = conn.run(cmd, hide=True, warn=True, in_stream=False)
    if check and not result.ok:
        raise DdpctlError(f"`{cmd.split()[0]}` failed on {conn.host}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout + (result.stderr if both else "")


def job_result(
    run_id: str, job_id: str, state: str, exit_code: int | None, wall_s: float, interrupted: bool
) -> RunResult:
    """The run's result from its job's last state (ddpctl's word) and exit code."""
    code = 130 if interrupted else (0 if state == "succeeded" else 1)
    return RunResult(
        run_id=run_id,
        exit_code=code,
        wall_s=round(wall_s, 3),
        nodes=[NodeResult(f"slurm job {job_id}", exit_code, JOB_END.get(state, NodeStatus.FAILED))],
        failed_node=None if code in (0, 130) else f"slurm job {job_id} ({state})",
        interrupted=interrupted,
    )


def seconds(slurm_time: str) -> float:
    """Slurm's ``[D-]HH:MM:SS`` (or ``MM:SS``) in seconds; 0.0 where it is not one."""
    days, _, clock = slurm_time.rpartition("-")
    try:
        parts = [int(p) for p in clock.split(":")]
        return float(sum(p * 60**i for i, p in enumerate(reversed(parts))) + int(days or 0) * 86400)
    except ValueError:
        return 0.0


def per_node(seen: list[str]) -> dict[str, int]:
    """How many of each node's lines ``seen`` holds (``[NODE rRANK] text`` lines)."""
    counts: dict[str, int] = {}
    for raw in seen:
        node = read_log_line(raw).node
        counts[node] = counts.get(node, 0) + 1
    return counts


class SlurmLauncher:
    """The launcher verbs (``launcher.py``) for a Slurm job, on a connection to the login node: its
    state from ``scontrol`` (``sacct`` once Slurm forgot it), its output from the nodes' files in
    the job's output folder (``node_programs/slurm_tail.py``), ``scancel`` to cancel it."""

    def __init__(self, conn: fabric.Connection, poll_s: float = 1.0, pending_timeout_s: float = 60.0) -> None:
        self.conn, self.poll_s, self.pending_timeout_s = conn, poll_s, pending_timeout_s

    @classmethod
    def open(cls, host: Host) -> SlurmLauncher:
        return cls(connect(host))

    def close(self) -> None:
        self.conn.close()

    def submit(self, plan: SbatchPlan, progress: Callable[[str], None] | None = None) -> Handle:
        """The job submitted (``install``, then ``sbatch``): its handle; the install's lines to ``progress``."""
        for line in install(self.conn, plan):
            if progress is not None:
                progress(line)
        return Handle("slurm", sbatch(self.conn, plan), plan.output_dir, plan.run_id)

    def state(self, job_id: str) -> tuple[str, int | None]:
        """The job's state (ddpctl's word, or "gone") and its batch script's exit code."""
        state, exit_code, _ = self._ask(job_id)
        return state, exit_code

    def _ask(self, job_id: str) -> tuple[str, int | None, float]:
        """``state``, and the seconds the job ran (``RunTime``, or ``Elapsed`` in ``sacct``)."""
        text = _run(self.conn, f"scontrol show job -o {shlex.quote(job_id)}", check=False)
        raw, exit_code = parse_job_info(text)
        ran = re.search(r"\bRunTime=(\S+)", text)
        if raw == "UNKNOWN":  # Slurm forgot it (MinJobAge): its accounting may still know
            got = _run(
                self.conn, f"sacct -n -X -P -j {shlex.quote(job_id)} -o State,ExitCode,Elapsed", check=False
            ).strip()
            fields = got.splitlines()[0].split("|") if got else []
            if len(fields) != 3:
                return "gone", None, 0.0
            raw, exit_code = parse_job_info(f"JobState={fields[0].split()[0]} ExitCode={fields[1]}")
            ran = re.match(r"(\S+)", fields[2])
        return SLURM_STATES.get(raw.split("+")[0], "failed"), exit_code, seconds(ran.group(1) if ran else "")

    def describe(self, handle: Handle) -> Described:
        state, exit_code, ran_s = self._ask(handle.ref)
        if state == "gone":
            return Described(Phase.GONE)
        if state not in ("succeeded", "failed", "cancelled"):
            return Described(Phase.RUNNING)
        # cancelled with no ddpctl following it: by `ddpctl stop` (or scancel), as a Ctrl-C
        result = job_result(handle.run_id, handle.ref, state, exit_code, ran_s, state == "cancelled")
        return Described(Phase.ENDED, {"result": result.to_dict()})

    def logs(self, handle: Handle, sink: Callable[[str], None], *, seen: list[str], follow: bool) -> None:
        def raw(line: OutputLine) -> None:
            sink(log_line(line).rstrip("\n"))

        if not follow or self.describe(handle).phase is not Phase.RUNNING:
            skip = per_node(seen)
            prefix = shlex.quote(f"ddpctl-{handle.ref}-")
            got = _run(
                self.conn,
                f"{command('python3', 'slurm_tail', handle.folder)} {prefix} once",
                check=False,
            )
            for text in got.splitlines():
                node, _, rest = text.partition("\t")
                line = parse_line(node, rest)
                if is_beat(line.rank, line.text):
                    continue  # the ranks' heartbeats: not shown, not in output.log (no watcher follows a job)
                if skip.get(node, 0) > 0:
                    skip[node] -= 1
                    continue
                raw(line)
            return
        self._follow(handle, raw, seen, cancel_on_interrupt=False)

    def attach(
        self,
        handle: Handle,
        sink: Callable[[OutputLine], None],
        *,
        seen: list[str],
        progress: Callable[[str], None] | None = None,
    ) -> RunResult:
        return self._follow(handle, sink, seen, cancel_on_interrupt=True)

    def cancel(self, handle: Handle) -> None:
        _run(self.conn, f"scancel {shlex.quote(handle.ref)}", check=False)
        deadline = time.monotonic() + 60
        while self.state(handle.ref)[0] in ("pending", "running") and time.monotonic() < deadline:
            time.sleep(self.poll_s)
        self._drop_secrets(handle)

    def _drop_secrets(self, handle: Handle) -> None:
        """The run's secrets file removed, once its job has ended: a job cancelled before it started
        never read it (the batch script removes it as it starts; no file: nothing to do)."""
        _run(self.conn, f"rm -f {shlex.quote(secrets_path(handle.folder, handle.run_id))}", check=False)

    def _follow(
        self, handle: Handle, sink: Callable[[OutputLine], None], seen: list[str], *, cancel_on_interrupt: bool
    ) -> RunResult:
        """The job's lines (after ``seen``) to ``sink`` while it runs, its state polled; Ctrl-C:
        ``scancel`` (``cancel_on_interrupt``), else up."""
        job_id, start = handle.ref, time.monotonic()
        marker = f"{handle.run_id}-tail-{os.getpid()}-{threading.get_ident()}"
        tail = self._start_tail(handle, marker, sink, per_node(seen))
        state, exit_code, interrupted = "pending", None, False
        pending_since, gone_since = time.monotonic(), 0.0
        try:
            while True:
                now, exit_code = self.state(job_id)
                if now == "gone":  # not known for a moment (slurmctld busy): the last state stands, a while
                    gone_since = gone_since or time.monotonic()
                    if time.monotonic() - gone_since < GONE_AFTER_S:
                        time.sleep(self.poll_s)
                        continue
                gone_since, state = 0.0, now
                if state in ("succeeded", "failed", "cancelled", "gone"):
                    break
                if state == "pending" and time.monotonic() - pending_since > self.pending_timeout_s:
                    reason = (
                        _run(self.conn, f"squeue -h -j {shlex.quote(job_id)} -o %r", check=False).strip() or "unknown"
                    )
                    _run(self.conn, f"scancel {shlex.quote(job_id)}", check=False)
                    self._drop_secrets(handle)
                    raise DdpctlError(
                        f"Slurm job {job_id} stayed pending for {self.pending_timeout_s:.0f} s ({reason}) and was "
                        "cancelled: ask for fewer nodes or check `sinfo`"
                    )
                if state != "pending":
                    pending_since = time.monotonic()
                time.sleep(self.poll_s)
        except KeyboardInterrupt:
            if not cancel_on_interrupt:
                raise
            interrupted = True
            _run(self.conn, f"scancel {shlex.quote(job_id)}", check=False)
            state = "cancelled"
        finally:
            time.sleep(0.5)  # let the tail catch the last lines
            remote_stop(self.conn, RUN_KEY, marker, "kill")
            tail.join(timeout=5)
        self._drop_secrets(handle)  # ended or cancelled: gone, whether or not it started
        return job_result(handle.run_id, job_id, state, exit_code, time.monotonic() - start, interrupted)

    def _start_tail(
        self, handle: Handle, marker: str, sink: Callable[[OutputLine], None], skip: dict[str, int]
    ) -> threading.Thread:
        chan = self.conn.client.get_transport().open_session()
        chan.exec_command(
            shlex.join(
                ["exec", "env", f"{RUN_KEY}={marker}", "PYTHONUNBUFFERED=1"]
                + list(program_argv("python3", "slurm_tail", handle.folder, f"ddpctl-{handle.ref}-")[1:])
            )
        )

        def pump() -> None:
            pending = b""
            while True:
                data = chan.recv(65536)
                if not data:
                    return
                *lines, pending = (pending + data).split(b"\n")
                for raw in lines:
                    node, _, text = raw.decode(errors="replace").partition("\t")
                    line = parse_line(node, text)
                    if is_beat(line.rank, line.text):
                        continue  # a rank's heartbeat: not shown
                    if skip.get(node, 0) > 0:  # this machine has it
                        skip[node] -= 1
                        continue
                    sink(line)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        return thread
