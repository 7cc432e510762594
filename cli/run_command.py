"""The command that runs a job: ``run`` (in the foreground, detached, or again with ``--resume``)."""

from __future__ import annotations

import sys

import click

from .options import (
    EXIT_CODES,
    RunId,
    complete_job,
    dry_run_option,
    env_option,
    json_option,
    name_option,
    open_store,
    port_option,
    python_option,
    run_nodes_option,
    run_nproc_option,
)
from .plans import print_cluster_plan, print_launch_plan


@click.command(epilog=EXIT_CODES)
@click.argument("job", required=False, shell_complete=complete_job)
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
@run_nodes_option
@run_nproc_option
@click.option(
    "--max-restarts",
    type=click.IntRange(min=0),
    default=None,
    help="Times torchrun restarts the workers after a failure; the jobs resume from their "
    "snapshot. [default: 0, elastic runs 3]",
)
@name_option
@port_option
@click.option(
    "--run-id",
    type=RunId("--run-id", new=True),
    default=None,
    metavar="ID",
    help="Run id (torchrun's --rdzv-id). [default: a new one]",
)
@click.option(
    "--launcher",
    type=click.Choice(["torchrun", "sbatch"]),
    default=None,
    help="torchrun on every node over SSH, or an sbatch job. [default: sbatch where the cluster runs Slurm]",
)
@click.option(
    "--snapshot-dir",
    default="",
    metavar="DIR|s3://BUCKET/PREFIX",
    help="Where the jobs keep their snapshot (DDPCTL_SNAPSHOT_DIR): an absolute directory every node "
    "reads, or an S3 prefix where the nodes share no filesystem (rank 0 reads and writes it "
    "with boto3). On AWS the nodes reach S3 through an instance profile (`up "
    "--iam-instance-profile`), never through copied credentials. [default: the cluster's "
    "shared directory]",
)
@click.option(
    "--resume",
    "resume_id",
    type=RunId("--resume"),
    default=None,
    metavar="RUN_ID",
    help="Run RUN_ID again with its recorded job and options (after ddpctl itself was stopped or "
    "crashed): a run still going on its cluster's head node is attached to again (its output from where "
    "this machine's log ends; Ctrl-C stops it); else what is left of it is stopped, and the job resumes "
    "from its snapshot.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    metavar="DIR",
    help="Your script's project (default: the script's directory): remote nodes get a copy of the files git "
    "would track there (.gitignore honoured), copied again only when they change, and the script starts there.",
)
@click.option(
    "--requirements",
    default=None,
    metavar="FILE|none",
    help="Your project's own packages, installed on every node before the run in an environment of the "
    "cluster's layered on the node's torch, once per content hash [default: the project's requirements.txt, "
    "if any; none: no packages]. Wheels beside it or in wheels/ install offline; the nodes' pip config applies.",
)
@click.option(
    "--resume-from",
    type=RunId("--resume-from"),
    default=None,
    metavar="RUN_ID",
    help="Start from run RUN_ID's snapshot (its kept outputs, its --snapshot-dir, or its folder on this "
    "cluster), e.g. to train an earlier run's model for more epochs. A new run: its own id and snapshot.",
)
@env_option
@click.option(
    "--env-file",
    "env_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help='Secrets for every rank from FILE (a .env as python-dotenv reads it: KEY=VALUE, export KEY="v", '
    "quotes, # comments; repeatable): recorded by name only, "
    "read again by --resume.",
)
@python_option
@click.option(
    "--hang-timeout",
    type=click.IntRange(min=0),
    default=None,
    metavar="SECONDS",
    help="No output and no heartbeat from any rank for this long is a hang: ddpctl names each rank's state and "
    "Python stack, then stops the run (0: off). Ranks that beat (the bundled jobs, training/metrics.py's beat) "
    "are judged by their own pace instead: 20 steps, at least 2 min (or SECONDS, if shorter). [default: 600]",
)
@click.option(
    "--health-every",
    type=click.IntRange(min=0),
    default=None,
    metavar="SECONDS",
    help="While the run goes, ask its nodes with GPUs the health query (nvidia-smi: GPUs missing, ECC and XID "
    "errors, throttling; seconds, no burn) this often; an unhealthy node is named then, and in the run's "
    "summary and `ddpctl runs` (0: off). [default: 600]",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Run in the background: the command returns once the run has started (on remote nodes, once the head "
    "node has it: this machine may then sleep or shut down), and the run goes on after the terminal closes "
    "(`ddpctl logs --follow RUN_ID`, `ddpctl stop RUN_ID`, `ddpctl runs`).",
)
@click.option(
    "--all-lines",
    is_flag=True,
    envvar="DDPCTL_ALL_LINES",
    help="Print every line (or $DDPCTL_ALL_LINES=1). By default the start-up lines that the nodes' agents "
    "repeat word for word are printed once, from the first node, and a failure shows the first failing rank's "
    "traceback, not the other ranks' and torchrun's (both counted); output.log and `ddpctl logs` always have "
    "every line.",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="On a cluster busy with another run, refuse at once instead of waiting its turn "
    "(runs on one cluster take turns; `ddpctl runs` shows the queued ones).",
)
@click.option(
    "--healthy-only",
    is_flag=True,
    help="Check each node's health first (as `ddpctl check` does: its GPUs, their errors, a burn) and run on the "
    "healthy ones: --nodes N needs N of them; elastic --nodes MIN:MAX starts on as many as are healthy, at least "
    "MIN. Too few: one line naming the unhealthy nodes, and nothing started.",
)
@dry_run_option
@json_option
@click.pass_context
def run(
    ctx,
    job,
    job_args,
    nodes,
    nproc_per_node,
    max_restarts,
    name,
    port,
    run_id,
    launcher,
    snapshot_dir,
    resume_id,
    workdir,
    requirements,
    resume_from,
    env,
    env_files,
    python,
    hang_timeout,
    health_every,
    detach,
    all_lines,
    no_wait,
    healthy_only,
    dry_run,
    as_json,
) -> int:
    """Run JOB with torchrun on NODES nodes and stream every rank's output.

    JOB is a bundled job (message-passing, mnist, mingpt) or the path to your own script.
    Arguments after `--` go to the job. With no cluster up, a local one is brought up for the
    run and taken down after it. If any node fails, the others are stopped at once; Ctrl-C stops
    every process of the run.

    \b
    Examples:
      ddpctl run mnist   # every node of the cluster that is up, one process per GPU
      ddpctl run mnist --nodes 2
      ddpctl run mnist --nodes 2 -- --epochs 1
      ddpctl run ./train.py --nodes 2 --nproc-per-node 2 -e NCCL_DEBUG=INFO
      ddpctl run ./train.py --nodes 2 -e WANDB_API_KEY   # a secret from your environment
      ddpctl run mingpt --nodes 2 --dry-run
      ddpctl run mnist --nodes 2:3 -- --epochs 5   # elastic: goes on if a node is lost
      ddpctl run mnist --nodes 2:3 --healthy-only   # on the healthy nodes, at least 2
      ddpctl run mnist --nodes 2 --snapshot-dir s3://my-bucket/mnist   # nodes share no filesystem
      ddpctl run --resume ra35cebc6d8   # after ddpctl was killed mid-run (`ddpctl runs` lists ids)
      ddpctl run mnist --nodes 2 --resume-from ra35cebc6d8 -- --epochs 4   # train that model further
      ddpctl run mnist --nodes 2 --detach -- --epochs 20   # in the background: logs --follow, stop
    Long because it is the command's flags read into one call: resume, dry run, detach and the run each a few lines.
    """
    from click.core import ParameterSource

    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs.execute import execute
    from ddpctl.infra.runs.options import RunOptions
    from ddpctl.infra.runs.prepare import prepare_resume

    from .output import Output

    out = Output(as_json)
    store = open_store()
    if resume_id is not None:
        given = [
            p.opts[0]
            for p in ctx.command.params
            if isinstance(p, click.Option)
            and p.name not in ("resume_id", "dry_run", "as_json", "all_lines")
            and ctx.get_parameter_source(p.name) != ParameterSource.DEFAULT
        ]
        if job or job_args or given:
            what = " ".join(([job] if job else []) + given + (["-- ..."] if job_args else []))
            raise UsageError(f"--resume runs {resume_id} with its recorded job and options: leave out {what}")
        prep = prepare_resume(resume_id, store)
    else:
        if not job:
            raise UsageError("missing JOB: give a bundled job (message-passing, mnist, mingpt) or a script path")
        opts = RunOptions.of_flags(job, job_args, env, ctx.params)
        from ddpctl.infra.runs.check import prepare_run

        prep = prepare_run(opts, store, out.progress, healthy_only=healthy_only, dry_run=dry_run)
        _refuse_a_configured_provider(ctx, prep)
    if dry_run:
        if as_json:
            doc = {"ok": True, "dry_run": True, "summary": prep.summary, "plan": prep.plan.to_dict()}
            if prep.ephemeral:
                doc["cluster"] = prep.cluster.to_dict()
            out.document(doc)
        else:
            if prep.ephemeral:
                print_cluster_plan(prep.cluster, note=" (for this run; taken down after it)")
            click.echo(f"On {prep.summary}:")
            print_launch_plan(prep.plan)
        return 0
    if detach:  # checked and planned here (bad input is this command's one line); run by a ddpctl of its own
        from ddpctl.infra.runs.detach import controller_log, start_detached

        chosen = None if resume_id or run_id else prep.run.run_id  # the background ddpctl must use this id
        run_id = prep.run.run_id
        argv = _detached_argv(sys.argv[1:], chosen)
        on_cluster = prep.outlives_this_machine
        pid, where = start_detached(argv, store, run_id, on_cluster=on_cluster, progress=out.progress)
        out.progress(
            f"run {run_id} {_detached_where(where)} (pid {pid}; its own messages in {controller_log(store, run_id)})"
        )
        out.progress(f"`ddpctl logs --follow {run_id}` follows it, `ddpctl stop {run_id}` stops it")
        if as_json:
            out.document({"ok": True, "run_id": run_id, "pid": pid, "detached": True, "where": str(where)})
        return 0
    if not all_lines:
        out.hide_repeats(prep.run.run_id)
    try:
        result = execute(prep, store, out.line, out.progress, wait=not no_wait, sigterm_is_interrupt=True)
    finally:
        out.end_lines()
    out.run_summary(result)
    if as_json:
        out.document({"ok": result.ok, "plan": prep.plan.to_dict(), "result": result.to_dict()})
    return result.exit_code


def _detached_where(where) -> str:
    """Where a detached run stands (``detach.Handover``), and whether this machine must stay on for it."""
    return {
        "here": "goes on in the background on this machine: it stops if this machine shuts down",
        "on-cluster": "goes on on the cluster's side: this machine may sleep or shut down",
        "queued": "waits its turn in the background on this machine: it starts only while this machine is on",
        "ended": "has ended already: `ddpctl runs` says how",
        "starting": "is still on its way to the cluster from the background: keep this machine on until "
        "`ddpctl runs` says it is running",
    }[str(where)]


def _detached_argv(argv: list[str], new_run_id: str | None) -> list[str]:
    """This command's arguments for the background ddpctl: without --detach (the job's own
    arguments after `--` are left alone), with the run id already chosen."""
    end = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:end] if a != "--detach"]
    if new_run_id is not None:
        at = head.index("run") + 1
        head[at:at] = ["--run-id", new_run_id]
    return head + argv[end:]


def _refuse_a_configured_provider(ctx: click.Context, prep) -> None:
    """A run that brings a cluster up for itself brings up a local one: where ddpctl.toml's
    ``[cluster]`` names another provider, that is said in one line, not run locally without a word."""
    configured = ((ctx.find_root().default_map or {}).get("up") or {}).get("provider")
    if prep.ephemeral and configured and configured != prep.cluster.spec.provider:
        from ddpctl.infra.model.errors import UsageError

        raise UsageError(
            f"ddpctl.toml's [cluster] says provider = {configured!r}, and no cluster {prep.cluster.name!r} is up: "
            f"`run` brings up only {prep.cluster.spec.provider} clusters for itself; `ddpctl up` first (it reads "
            "that file), then `ddpctl run`"
        )
