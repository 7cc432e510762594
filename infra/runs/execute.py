"""Executing a prepared run: bring up the cluster if the run owns it, record the run, run the
plan with the cluster's executor (or Slurm's), keep its outputs and metric lines (brought in as
the run goes, and whole at its end), take the cluster down again.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from ..launch.launcher import Handle, Supervision
from ..launch.plan import NodeLaunch, Renew
from ..launch.project import LARGE_BYTES
from ..launch.supervise import OutputLine, RunResult
from ..lifecycle import clusters
from ..model import locks
from ..model.errors import UsageError
from ..model.host import Host
from ..model.state import NodeInfo
from ..model.store import DownStore, StateStore, atomic_write
from ..providers.base import Progress
from . import health_in_runs, metrics, on_cluster
from .jobs import resolve_job
from .prepare import PreparedRun
from .records import OUTPUTS, QUEUED

#: how often a run queued behind a run on the cluster's side (its ddpctl gone) asks whether it has ended
POLL_S = 3.0


def execute(
    prep: PreparedRun,
    store: StateStore,
    sink: Callable[[OutputLine], None],
    progress: Progress,
    *,
    wait: bool = True,
    sigterm_is_interrupt: bool = False,
) -> RunResult:
    """Bring up the cluster if the run owns it, wait for the cluster's turn (``wait``; else a busy
    cluster is refused at once), run the plan, take the cluster down again. ``sigterm_is_interrupt``
    (the CLI, whose process this is): a SIGTERM (``ddpctl stop`` of a run where SIGINT is ignored)
    stops the run as Ctrl-C does."""
    if sigterm_is_interrupt:
        from ..tools.signals import terminate_as_interrupt

        with terminate_as_interrupt():
            return execute(prep, store, sink, progress, wait=wait)
    prep.provider.preflight(prep.cluster)
    name, run_id = prep.cluster.name, prep.run.run_id
    command = f"run {run_id} ({prep.run.job})"
    with locks.run(store, run_id, command):
        bring_up = prep.ephemeral and not store.exists(name)
        hold = locks.ClusterLock(store, name, command).take(shared=not bring_up)
        slot = locks.RunSlot(store, name, command)
        try:
            if bring_up:
                clusters.up(prep.provider, prep.cluster, store, progress)
                hold.share()  # up: other runs may use it, nothing may change it
            elif prep.ephemeral and store.load(name).cluster_id != prep.cluster.cluster_id:
                raise locks.Busy(f"cluster {name!r} was just brought up by another command: run again to use it")
            _take_turn(slot, store, prep, progress, wait)
            return _execute(prep, store, sink, progress, hold)
        finally:
            slot.release()
            hold.release()


def _take_turn(slot: locks.RunSlot, store: StateStore, prep: PreparedRun, progress: Progress, wait: bool) -> None:
    """The cluster's run slot, and the end of the cluster's runs that go on on its side with no
    ddpctl here (``on_cluster``; their ddpctl was killed): at once if nothing is ahead; else refused
    (``wait`` False) or waited for, the run recorded as queued meanwhile (``runs`` shows it;
    ``stop``, or Ctrl-C, takes it out of the queue)."""
    name, run_id = prep.cluster.name, prep.run.run_id
    queued = False
    if not slot.try_take():
        ahead = ", ".join(h.describe() for h in slot.holders()) or "another run"
        _queue(store, prep, progress, wait, ahead, slot.wait)
        queued = True
    going = on_cluster.runs_on_cluster(store, name, exclude=run_id)  # not a resumed run's own
    if going:
        ahead = ", ".join(f"run {r} (on the cluster, its ddpctl gone)" for r in going)
        _queue(store, prep, progress, wait, ahead, lambda: _wait_on_cluster(store, name, run_id))
        queued = True
    if queued:
        progress(f"run {run_id}: its turn on {name!r}")


def _queue(
    store: StateStore, prep: PreparedRun, progress: Progress, wait: bool, ahead: str, wait_for: Callable[[], None]
) -> None:
    """Wait behind ``ahead`` (``wait_for`` returns once it is done), recorded as queued; or refused
    at once (``wait`` False)."""
    name, run_id = prep.cluster.name, prep.run.run_id
    if not wait:
        raise locks.Busy(
            f"cluster {name!r} is busy with {ahead}: --no-wait, so this run did not start; try again later"
        )
    progress(
        f"cluster {name!r} is busy with {ahead}: run {run_id} waits its turn (Ctrl-C or `ddpctl stop {run_id}` ends the wait)"
    )
    store.make_run_dir(run_id)
    queued = store.run_dir(run_id) / QUEUED
    nodes = prep.run.nodes if not prep.run.elastic else f"{prep.run.min_nodes}:{prep.run.nodes}"
    marker = {"ahead": ahead, "job": prep.run.job, "nodes": nodes, "cluster": name}
    atomic_write(queued, json.dumps(marker) + "\n")
    try:
        wait_for()
    except BaseException:  # taken out of the queue: it never started, nothing of it is kept
        queued.unlink(missing_ok=True)
        _remove_if_empty(store.run_dir(run_id))
        raise
    queued.unlink(missing_ok=True)


def _wait_on_cluster(store: StateStore, name: str, run_id: str) -> None:
    """Until no run of cluster ``name`` goes on on its side (asked there every ``POLL_S``)."""
    while on_cluster.runs_on_cluster(store, name, exclude=run_id):
        time.sleep(POLL_S)


def run_cost_basis(prep: PreparedRun) -> dict:
    """What a run's record keeps of its cluster: its id (``down`` tells its runs from an earlier
    cluster's of the same name), the nodes the run uses and one node's price per hour (None: not
    known), for the run's cost in ``ddpctl runs``."""
    spec = prep.cluster.spec
    total = prep.provider.hourly_cost(spec) if prep.provider.billed else None
    per_node = round(total / spec.nodes, 6) if total is not None and spec.nodes else None
    return {"cluster_id": prep.cluster.cluster_id, "nodes_used": prep.run.nodes, "node_usd_per_hour": per_node}


def _remove_if_empty(run_dir: Path) -> None:
    """A queued run's folder, unless it holds something (a detached run's controller.log)."""
    try:
        run_dir.rmdir()
    except OSError:
        pass


def _renew(prep: PreparedRun, store: StateStore, progress: Progress) -> Renew | None:
    """An elastic run's lost node, before it is started again: replaced on a new machine where the
    provider took its machine back (``Provider.replace_lost_nodes``: aws, a spot instance) or where the
    machine, still there, is unhealthy (``health_in_runs.node_reasons``), its new host and its launch there;
    None: not replaced (started again where it was). A run the head's supervisor keeps: by the head itself
    where it may (``Provider.head_replacer``; a lost node replaced there is recorded here as the run ends,
    ``_adopt``)."""
    replan = prep.replan
    if replan is None or not prep.replaces_nodes:
        return None
    if prep.plan.supervision == Supervision.HEAD:
        on_head = prep.provider.head_replacer(store.load(prep.cluster.name), store)
        return None if on_head is None else Renew(on_head=on_head)

    unhealthy = health_in_runs.lost_node_health(store, prep.cluster.name, progress)
    one_at_a_time = threading.Lock()  # lost nodes come back in threads of their own; the cluster's state is one

    def renew(node: str) -> tuple[Host, NodeLaunch] | None:
        with one_at_a_time:
            state = prep.provider.replace_lost_nodes(store.load(prep.cluster.name), store, [node], progress, unhealthy)
        if state is None:
            return None
        new = next(n for n in state.nodes if n.name == node)
        launch = next(launch for launch in replan(state).nodes if launch.node == node)
        assert new.ssh is not None  # a remote provider's node
        return new.ssh, launch

    return Renew(here=renew)


def _adopt(prep: PreparedRun, store: StateStore, result: RunResult, progress: Progress) -> RunResult:
    """The nodes the head's supervisor replaced (``RunResult.replaced``) recorded in the cluster's state
    here (``Provider.adopt_replacements``), then dropped from the result; a failure is said, and the
    nodes are found by their tags all the same (``down``)."""
    if not result.replaced:
        return result
    on_cluster.adopt_replaced(store, prep.cluster.name, result.replaced, progress)
    return replace(result, replaced={})


def _execute(
    prep: PreparedRun,
    store: StateStore,
    sink: Callable[[OutputLine], None],
    progress: Progress,
    hold: locks.ClusterLock,
) -> RunResult:
    """The run recorded, carried out (or attached to again) with its output teed into its
    ``output.log``, its metrics followed; then what it leaves brought here (``_after``)."""
    run_dir = store.run_dir(prep.run.run_id)
    reattached = None
    if prep.resumed:  # its output copied here before it is opened
        reattached = on_cluster.Reattached.find(store, prep.run.run_id)
        if reattached is None and not prep.restartable:
            raise UsageError(
                f"run {prep.run.run_id} no longer runs on the cluster: --resume attaches again to an sbatch job "
                f"while it runs; `ddpctl run {prep.run.job} --resume-from {prep.run.run_id}` submits a new job "
                "that starts from its snapshot"
            )
    try:
        submitted = _record_start(prep, store, reattached, progress)
        log_fd = os.open(run_dir / "output.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        live = _live_look(prep, progress)
        with open(log_fd, "a", buffering=1) as log, _stopped(live):

            def tee(line: OutputLine) -> None:
                rank = "" if line.rank is None else f" r{line.rank}"
                log.write(f"[{line.node}{rank}] {line.text}\n")
                sink(line)
                live.line(line)

            with metrics.Follower(prep.cluster, prep.run, run_dir / metrics.FILE):  # as the run goes
                if reattached is not None:
                    said = (
                        f"run {prep.run.run_id} still goes on on cluster {prep.cluster.name!r}: attached to it "
                        f"again (Ctrl-C stops it); output also in {run_dir / 'output.log'}"
                    )
                    result = reattached.attach(said, progress, sink, tee)
                else:
                    renew = _renew(prep, store, progress)
                    executor = prep.executor(tee)
                    result = executor.run(prep.plan, renew=renew, progress=progress, submitted=submitted)
        live.wait()
        result = _adopt(prep, store, result, progress)
        result = _health_after(prep, result, progress, live.found)
    finally:
        _after(prep, store, hold, progress)
    doc = {"cluster": prep.cluster.name, "plan": prep.plan.to_dict(), "result": result.to_dict()}
    atomic_write(run_dir / "run.json", json.dumps(doc, indent=2) + "\n")
    return result


def _live_look(prep: PreparedRun, progress: Progress) -> health_in_runs.LiveLook:
    """The run's nodes' health, looked at while the run goes (``health_in_runs.LiveLook``): on its timer
    (``run --health-every``), and a slow node's."""

    def ask(nodes: list[NodeInfo]) -> list[str]:
        targets, executor_for = clusters.job_nodes(prep.cluster, _quiet)
        return health_in_runs.look(targets, nodes, executor_for, _quiet)

    run_nodes = replace(prep.cluster, nodes=prep.cluster.nodes[: prep.run.nodes])
    return health_in_runs.LiveLook(run_nodes, ask, progress, every_s=prep.run.health_every_s)


@contextlib.contextmanager
def _stopped(live: health_in_runs.LiveLook) -> Iterator[None]:
    """The live look's timer stopped however the run ends (an error, Ctrl-C), not only at its end."""
    try:
        yield
    finally:
        live.done.set()


def _quiet(_: str) -> None:
    pass


def _health_after(prep: PreparedRun, result: RunResult, progress: Progress, found: dict[str, str]) -> RunResult:
    """The health of the nodes with GPUs that the run named (failed, hung, lost, slow), looked at while they
    are still up (``health_in_runs.after_run``), and of those found unhealthy while it went (``found``: node ->
    its line, ``LiveLook``; what the look at its end says of a node that answers it comes first:
    ``health_in_runs.with_found``); a look that fails, or Ctrl-C during it, leaves what was found."""
    probes = result.probes  # the head's supervisor asked them as the run ended: judged here, not kept
    found = {**health_in_runs.found_in_looks(prep.cluster, result.looks), **found}  # and on its timer
    result = replace(result, health=[line for _, line in sorted(found.items())], probes={}, looks={})
    if not health_in_runs.suspects(result, prep.cluster):
        return result
    try:
        if probes:
            answered = health_in_runs.answers(prep.cluster, probes)
        else:
            targets, executor_for = clusters.job_nodes(prep.cluster, progress)
            answered = health_in_runs.after_run(result, targets, executor_for, progress)
    except Exception as exc:  # the run's own result still counts
        progress(f"warning: could not look at the health of the nodes the run named: {exc}")
        return result
    except KeyboardInterrupt:  # the run has ended: Ctrl-C ends only the look
        progress("health: the look at the nodes the run named was interrupted")
        return result
    return replace(result, health=health_in_runs.with_found(answered, found))


def _record_start(
    prep: PreparedRun, store: StateStore, reattached: on_cluster.Reattached | None, progress: Progress
) -> Callable[[Handle], None]:
    """The run's folder and ``options.json`` (what ``runs``, ``down`` and ``--resume`` read), said
    where its output goes; returns what records the run's handle once it runs on the cluster's side."""
    run_dir = store.run_dir(prep.run.run_id)
    store.make_run_dir(prep.run.run_id)  # private: only this user reads a run's output
    job = prep.options.job
    job = job if resolve_job(job).bundled else str(resolve_job(job).script)  # a resume may start elsewhere
    recorded = replace(prep.options, job=job, run_id=prep.run.run_id)
    options = {"options": recorded.to_dict(), "cluster": prep.cluster.name, "ephemeral": prep.ephemeral}
    options |= run_cost_basis(prep)  # which cluster, and what its nodes cost: `ddpctl runs`, `down`

    def submitted(handle: Handle) -> None:  # a run this ddpctl may not see end: `runs`, `logs` ask its launcher
        options.update(handle=handle.to_dict(), plan=prep.plan.to_dict())
        atomic_write(run_dir / "options.json", json.dumps(options, indent=2) + "\n")

    if reattached is not None:
        submitted(reattached.handle)
        return submitted
    atomic_write(run_dir / "options.json", json.dumps(options, indent=2) + "\n")
    # a resumed run's earlier result is not this attempt's: were this ddpctl killed, `runs`
    # would show the old end, and not ask the cluster about the attempt going on there
    (run_dir / "run.json").unlink(missing_ok=True)
    project = prep.plan.project
    if project is not None and project.size > LARGE_BYTES:
        progress(project.size_warning())
    progress(
        f"run {prep.run.run_id}: {prep.run.job} on {prep.summary}, {prep.plan.where}; output also in "
        f"{run_dir / 'output.log'}"
    )
    return submitted


def _after(prep: PreparedRun, store: StateStore, hold: locks.ClusterLock, progress: Progress) -> None:
    """However the run ended: its metrics brought here; a cluster brought up for it keeps its
    snapshot folder in the run's record and goes, unless another run uses it now."""
    run_dir = store.run_dir(prep.run.run_id)
    try:  # before a cluster brought up for this run goes
        metrics.fetch(prep.cluster, prep.run, run_dir / metrics.FILE)
    except Exception as exc:  # an unreachable head node: the run's result still counts
        progress(f"warning: could not bring the run's {metrics.FILE} into {run_dir}: {exc}")
    if not prep.ephemeral:
        return
    try:
        if prep.provider.keep_outputs(prep.cluster, prep.run, run_dir / OUTPUTS):
            progress(f"run {prep.run.run_id}: its snapshot folder is kept in {run_dir / OUTPUTS}")
    except OSError as exc:  # a full disk: the cluster still goes
        progress(f"warning: could not keep the run's snapshot folder in {run_dir / OUTPUTS}: {exc}")
    if hold.try_exclusive():
        prep.provider.down(store.load(prep.cluster.name), DownStore(store.home, progress), progress)
    else:
        users = ", ".join(h.describe() for h in hold.others()) or "another run"
        progress(
            f"not taking {prep.cluster.name!r} down: {users} uses it; `ddpctl down --name "
            f"{prep.cluster.name}` after that"
        )
