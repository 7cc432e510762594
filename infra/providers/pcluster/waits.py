"""How the ParallelCluster provider waits on ParallelCluster: for create-cluster to complete, for
the static compute nodes to run, and for delete-cluster to finish (describe-cluster polled until
it no longer finds the cluster). A base class of ``PclusterProvider``: its attributes and the
``DDPCTL_PCLUSTER_POLL_S`` / ``DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S`` settings of its environment
set the waits (30 s between polls, 30 min for the compute nodes).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ...model.errors import DdpctlError, UsageError
from ...model.progress import Progress, activity
from ...model.state import ClusterState
from ..aws.plan import TAG_CLUSTER, TAG_CLUSTER_ID, TAG_HOME
from . import compute
from .cli import ClusterInfo, ClusterInstance, PclusterCli
from .plan import PclusterPlan

ENV_POLL_S = "DDPCTL_PCLUSTER_POLL_S"
ENV_COMPUTE_TIMEOUT_S = "DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S"


class Waits:
    """The waits of ``up`` and ``down``, each a poll of the pcluster CLI with a progress line when
    what it reports changes."""

    env: Mapping[str, str]  # the settings' environment (the provider's)
    poll_s = 30.0
    create_timeout_s = 3600.0
    compute_timeout_s = 1800.0
    delete_timeout_s = 3600.0
    report_s = 300.0  # a progress line at least this often while a wait shows no change

    def poll(self) -> float:
        """Seconds between two describe calls: ``DDPCTL_PCLUSTER_POLL_S``, else ``poll_s``."""
        return _seconds(self.env, ENV_POLL_S, self.poll_s)

    def compute_timeout(self) -> float:
        """How long ``up`` waits for the compute nodes: ``DDPCTL_PCLUSTER_COMPUTE_TIMEOUT_S``, else ``compute_timeout_s``."""
        return _seconds(self.env, ENV_COMPUTE_TIMEOUT_S, self.compute_timeout_s)

    def wait_created(self, cli: PclusterCli, plan: PclusterPlan, progress: Progress) -> ClusterInfo:
        """describe-cluster until CREATE_COMPLETE; a failed or vanished stack is one line on where to look.
        The wait, with its status, is the activity going on (``infra/model/progress.py``)."""
        try:
            return self._wait_created(cli, plan, progress)
        finally:
            activity(progress, None)

    def _wait_created(self, cli: PclusterCli, plan: PclusterPlan, progress: Progress) -> ClusterInfo:
        start = time.monotonic()
        last, last_report = "", start
        while True:
            info = cli.describe(plan.pcluster_name)
            if info is None:
                raise DdpctlError(
                    f"{plan.pcluster_name} disappeared while being created: see the CloudFormation console"
                )
            if info.status == "CREATE_COMPLETE":
                return info
            if info.failed:
                why = "; ".join(info.failures) or info.stack_status
                raise DdpctlError(
                    f"ParallelCluster could not create {plan.pcluster_name} ({info.status}: {why}): "
                    f"`pcluster get-cluster-stack-events -n {plan.pcluster_name} -r {plan.region}` tells more"
                )
            now = time.monotonic()
            activity(progress, f"waiting for ParallelCluster to create {plan.pcluster_name} ({info.status})")
            if info.status != last or now - last_report > 300:
                progress(
                    f"{plan.pcluster_name}: {info.status} ({(now - start) / 60:.0f} min; ParallelCluster takes 10-20)"
                )
                last, last_report = info.status, now
            if now - start > self.create_timeout_s:
                raise DdpctlError(
                    f"{plan.pcluster_name} still {info.status} after {self.create_timeout_s / 60:.0f} min"
                )
            time.sleep(self.poll())

    def wait_compute(self, cli: PclusterCli, plan: PclusterPlan, progress: Progress) -> list[ClusterInstance]:
        """Static compute nodes start after CREATE_COMPLETE (clustermgtd launches them); a job
        submitted before would only pend. Polls describe-cluster-instances (and describe-cluster, for
        a fleet ParallelCluster gave up on) until ``--nodes`` of them run, with a progress line
        whenever the fleet changes and every few minutes while it does not; the wait is the activity going on."""
        try:
            return self._wait_compute(cli, plan, progress)
        finally:
            activity(progress, None)

    def _wait_compute(self, cli: PclusterCli, plan: PclusterPlan, progress: Progress) -> list[ClusterInstance]:
        want, poll, timeout = plan.aws.count, self.poll(), self.compute_timeout()
        start = time.monotonic()
        last, last_report = "", start
        while True:
            instances = cli.compute_instances(plan.pcluster_name)
            summary = compute.fleet_summary(instances, want)
            up = compute.running(instances)
            if len(up) >= want:
                progress(f"{plan.pcluster_name}: compute nodes {summary}")
                return up
            info = cli.describe(plan.pcluster_name)
            if info is None or info.failed:
                why = "it is gone" if info is None else "; ".join(info.failures) or info.status
                raise DdpctlError(
                    f"{plan.pcluster_name} failed while its compute nodes started ({why}): "
                    f"`ddpctl down --name {plan.cluster}` deletes what is left"
                )
            if info.fleet_status == "PROTECTED":
                raise DdpctlError(compute.protected(plan, summary))
            now = time.monotonic()
            activity(progress, f"waiting for the compute nodes of {plan.pcluster_name} ({summary})")
            if summary != last or now - last_report >= self.report_s:
                progress(
                    f"{plan.pcluster_name}: compute nodes {summary} ({compute.duration(now - start)}; "
                    f"waiting up to {compute.duration(timeout)})"
                )
                last, last_report = summary, now
            if now - start >= timeout:
                raise DdpctlError(compute.not_started(plan, summary, timeout))
            time.sleep(poll)

    def _delete_cluster(self, cli: PclusterCli, plan: PclusterPlan, state: ClusterState, progress: Progress) -> bool:
        """delete-cluster if the cluster is this state's, then describe-cluster until it is not found;
        whether it was deleted here."""
        info = cli.describe(plan.pcluster_name)
        if info is None:
            return False  # never made, or long gone
        # With a state file, the cluster id must match; without one (down_lost), the cluster name.
        tag, mine = (TAG_CLUSTER_ID, state.cluster_id) if state.cluster_id else (TAG_CLUSTER, state.name)
        if info.tags.get(tag) != mine:
            progress(
                f"warning: {plan.pcluster_name} in {plan.region} is not this cluster's (its {tag} tag is "
                f"{info.tags.get(tag)!r}): left alone"
            )
            return False
        other = info.tags.get(TAG_HOME, "")  # none: made by an older ddpctl
        if other and other != plan.aws.home_id:  # found by name (down_lost): another state home's
            progress(
                f"{plan.pcluster_name} in {plan.region} belongs to another state home (home id {other}): left alone"
            )
            return False
        if info.status != "DELETE_IN_PROGRESS":
            progress(f"deleting {plan.pcluster_name} ({info.status})")
            cli.delete(plan.pcluster_name)
        try:
            return self._wait_deleted(cli, plan, state, progress)
        finally:
            activity(progress, None)

    def _wait_deleted(self, cli: PclusterCli, plan: PclusterPlan, state: ClusterState, progress: Progress) -> bool:
        start, last = time.monotonic(), ""
        while True:
            info = cli.describe(plan.pcluster_name)
            if info is None:
                return True
            activity(progress, f"waiting for ParallelCluster to delete {plan.pcluster_name} ({info.status})")
            if info.status == "DELETE_FAILED":
                why = "; ".join(info.failures) or info.stack_status
                raise DdpctlError(
                    f"ParallelCluster could not delete {plan.pcluster_name} ({why}): fix it in the CloudFormation "
                    f"console, then run `ddpctl down --name {state.name}` again"
                )
            if info.status != last:
                progress(f"{plan.pcluster_name}: {info.status} ({(time.monotonic() - start) / 60:.0f} min)")
                last = info.status
            if time.monotonic() - start > self.delete_timeout_s:
                raise DdpctlError(
                    f"{plan.pcluster_name} still {info.status} after {self.delete_timeout_s / 60:.0f} min: "
                    f"run `ddpctl down --name {state.name}` again"
                )
            time.sleep(self.poll())


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise UsageError(f"{name}={raw} is not a number of seconds: give one >= 0, or unset it for {default:g}")
    return value
