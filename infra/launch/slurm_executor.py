"""The Slurm executor: submit the planned sbatch script on the login node, stream every node's
output as it is written, follow the job's state, and ``scancel`` it on Ctrl-C or failure.

Runs over SSH on the cluster's login (head) node. Job states map to ddpctl's through one table,
as in TorchX's Slurm scheduler.
"""

from __future__ import annotations

import io
import re
import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..hosts.connections import connect, remote_stop
from ..model.errors import DdpctlError
from ..model.host import Host
from ..node_programs import source
from ..tools.procs import RUN_KEY
from .nodes import NodeStatus
from .sbatch import SbatchPlan
from .ssh_executor import check_writable
from .supervise import NodeResult, OutputLine, RunResult, parse_line

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

    def on_head(self, renew: Renew | None = None) -> bool:
        return False  # Slurm keeps the job; this process follows it

    def run(
        self, plan: SbatchPlan, renew: Renew | None = None, progress: Callable[[str], None] | None = None
    ) -> RunResult:
        """``renew`` is left unused: an sbatch job is not elastic."""
        conn = connect(self.login)
        start = time.monotonic()
        try:
            job_id = self.submit(conn, plan)
            tail = self._start_tail(conn, plan, job_id)
            state, exit_code, interrupted = "pending", None, False
            pending_since = time.monotonic()
            try:
                while True:
                    raw, exit_code = parse_job_info(self._run(conn, f"scontrol show job -o {job_id}", check=False))
                    state = SLURM_STATES.get(raw.split("+")[0], "failed" if raw != "UNKNOWN" else state)
                    if state in ("succeeded", "failed", "cancelled"):
                        break
                    if state == "pending" and time.monotonic() - pending_since > self.pending_timeout_s:
                        reason = self._run(conn, f"squeue -h -j {job_id} -o %r", check=False).strip() or "unknown"
                        self._run(conn, f"scancel {job_id}", check=False)
                        raise DdpctlError(
                            f"Slurm job {job_id} stayed pending for {self.pending_timeout_s:.0f} s ({reason}) and was "
                            "cancelled: ask for fewer nodes or check `sinfo`"
                        )
                    if state != "pending":
                        pending_since = time.monotonic()
                    time.sleep(self.poll_s)
            except KeyboardInterrupt:
                interrupted = True
                self._run(conn, f"scancel {job_id}", check=False)
                state = "cancelled"
            finally:
                time.sleep(0.5)  # let the tail catch the last lines
                remote_stop(conn, RUN_KEY, f"{plan.run_id}-tail", "kill")
                tail.join(timeout=5)
            code = 130 if interrupted else (0 if state == "succeeded" else 1)
            return RunResult(
                run_id=plan.run_id,
                exit_code=code,
                wall_s=round(time.monotonic() - start, 3),
                nodes=[NodeResult(f"slurm job {job_id}", exit_code, JOB_END.get(state, NodeStatus.FAILED))],
                failed_node=None if code in (0, 130) else f"slurm job {job_id} ({state})",
                interrupted=interrupted,
            )
        finally:
            conn.close()

    def submit(self, conn: fabric.Connection, plan: SbatchPlan) -> str:
        nodes = len(set(self._run(conn, "sinfo -h -N -o %N", check=False).split()))
        if nodes and plan.nodes > nodes:
            raise DdpctlError(
                f"--nodes {plan.nodes} but Slurm on {conn.host} has {nodes} node(s): use --nodes {nodes} or fewer"
            )
        if plan.writable:  # as the compute nodes see it too, on a cluster's shared file systems
            check_writable(plan.writable, {str(conn.host): conn})
        self._run(conn, f"mkdir -p {shlex.quote(plan.output_dir)}")
        conn.put(io.StringIO(plan.script), remote=plan.script_path)
        out = self._run(conn, f"sbatch --parsable {shlex.quote(plan.script_path)}", check=False, both=True)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            reason = out.strip().splitlines()[-1] if out.strip() else "no answer"
            raise DdpctlError(f"sbatch refused the job: {reason.removeprefix('sbatch: error: ')}")
        return job_id

    def _start_tail(self, conn: fabric.Connection, plan: SbatchPlan, job_id: str) -> threading.Thread:
        chan = conn.client.get_transport().open_session()
        chan.exec_command(
            f"exec env {RUN_KEY}={plan.run_id}-tail python3 -u -c {shlex.quote(source('slurm_tail'))} "
            f"{shlex.quote(plan.output_dir)} ddpctl-{job_id}-"
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
                    self.sink(parse_line(node, text))

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        return thread

    @staticmethod
    def _run(conn: fabric.Connection, cmd: str, *, check: bool = True, both: bool = False) -> str:
        result = conn.run(cmd, hide=True, warn=True, in_stream=False)
        if check and not result.ok:
            raise DdpctlError(
                f"`{cmd.split()[0]}` failed on {conn.host}: {result.stderr.strip() or result.stdout.strip()}"
            )
        return result.stdout + (result.stderr if both else "")
