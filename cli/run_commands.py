"""The commands that run jobs and look at them: ``run``, ``runs``, ``check``."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click

from .options import (
    EXIT_CODES,
    FiniteFloatRange,
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
    type=RunId("--run-id", allow_empty=True),
    default="",
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
    "crashed): what is left of it is stopped, and the job resumes from its snapshot.",
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
    help="Secrets for every rank from FILE (KEY=VALUE lines, # comments; repeatable): recorded by name only, "
    "read again by --resume.",
)
@python_option
@click.option(
    "--detach",
    is_flag=True,
    help="Run in the background: the command returns once the run has started, and the run goes on after "
    "the terminal closes (`ddpctl logs --follow RUN_ID`, `ddpctl stop RUN_ID`, `ddpctl runs`).",
)
@click.option(
    "--all-lines",
    is_flag=True,
    envvar="DDPCTL_ALL_LINES",
    help="Print every agent line (or $DDPCTL_ALL_LINES=1). By default the start-up lines that the nodes' agents "
    "repeat word for word are printed once, from the first node, and counted; output.log and `ddpctl logs` "
    "always have every line.",
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
    resume_from,
    env,
    env_files,
    python,
    detach,
    all_lines,
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
      ddpctl run mnist --nodes 2
      ddpctl run mnist --nodes 2 -- --epochs 1
      ddpctl run ./train.py --nodes 2 --nproc-per-node 2 -e NCCL_DEBUG=INFO
      ddpctl run ./train.py --nodes 2 -e WANDB_API_KEY   # a secret from your environment
      ddpctl run mingpt --nodes 2 --dry-run
      ddpctl run mnist --nodes 2:3 -- --epochs 5   # elastic: goes on if a node is lost
      ddpctl run mnist --nodes 2 --snapshot-dir s3://my-bucket/mnist   # nodes share no filesystem
      ddpctl run --resume ra35cebc6d8   # after ddpctl was killed mid-run (`ddpctl runs` lists ids)
      ddpctl run mnist --nodes 2 --resume-from ra35cebc6d8 -- --epochs 4   # train that model further
      ddpctl run mnist --nodes 2 --detach -- --epochs 20   # in the background: logs --follow, stop
    """
    from click.core import ParameterSource

    from ddpctl.infra.errors import UsageError
    from ddpctl.infra.run_execute import execute
    from ddpctl.infra.run_prepare import prepare, prepare_resume
    from ddpctl.infra.run_records import RunOptions

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
        min_nodes, nodes = nodes if isinstance(nodes, tuple) else (0, nodes)
        opts = RunOptions(
            job=job,
            args=tuple(job_args),
            nodes=nodes,
            nproc_per_node=nproc_per_node,
            max_restarts=max_restarts,
            name=name,
            port=port,
            run_id=run_id,
            env=tuple(env),
            env_files=tuple(str(Path(f).resolve()) for f in env_files),
            python=python,
            launcher=launcher,
            min_nodes=min_nodes,
            snapshot_dir=snapshot_dir,
            resume_from=resume_from or "",
            workdir=str(Path(workdir).resolve()) if workdir else "",
        )
        prep = prepare(opts, store)
    if dry_run:
        if as_json:
            doc = {"ok": True, "dry_run": True, "plan": prep.plan.to_dict()}
            if prep.ephemeral:
                doc["cluster"] = prep.cluster.to_dict()
            out.document(doc)
        else:
            if prep.ephemeral:
                print_cluster_plan(prep.cluster, note=" (for this run; taken down after it)")
            print_launch_plan(prep.plan)
        return 0
    if detach:  # checked and planned here (bad input is this command's one line); run by a ddpctl of its own
        from ddpctl.infra.detach import controller_log, start_detached

        chosen = None if resume_id or run_id else prep.run.run_id  # the background ddpctl must use this id
        run_id = prep.run.run_id
        pid = start_detached(_detached_argv(sys.argv[1:], chosen), store, run_id)
        out.progress(
            f"run {run_id} goes on in the background (pid {pid}; its own messages in {controller_log(store, run_id)}): "
            f"`ddpctl logs --follow {run_id}` follows it, `ddpctl stop {run_id}` stops it"
        )
        if as_json:
            out.document({"ok": True, "run_id": run_id, "pid": pid, "detached": True})
        return 0
    if not all_lines:
        out.hide_repeats(prep.run.run_id)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        result = execute(prep, store, out.line, out.progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
        out.end_lines()
    out.run_summary(result)
    if as_json:
        from dataclasses import asdict

        out.document({"ok": result.ok, "plan": prep.plan.to_dict(), "result": asdict(result)})
    return result.exit_code


@click.command(epilog=EXIT_CODES)
@json_option
def runs(as_json) -> int:
    """List the runs recorded under the state home, oldest first.

    A run that ddpctl did not see to its end (ddpctl was killed, the machine went down) shows as
    unfinished: `ddpctl run --resume RUN_ID` continues it from its snapshot. Each run's output is
    in RUNS_DIR/<run id>/output.log; a run on a cluster brought up for it keeps its snapshot folder
    in RUNS_DIR/<run id>/outputs ("kept"), which `ddpctl run JOB --resume-from RUN_ID` starts from.
    """
    import time

    from rich.table import Table

    from ddpctl.infra.run_records import list_runs

    from .output import Output

    out = Output(as_json)
    store = open_store()
    records = list_runs(store)
    if as_json:
        from .output_json import iso

        docs = [{**r.to_dict(), "started": iso(r.started)} for r in records]
        out.document({"ok": True, "runs_dir": str(store.home / "runs"), "runs": docs})
        return 0
    if not records:
        out.progress(f"no runs under {store.home / 'runs'}; start one with `ddpctl run`")
        return 0
    table = Table(title=f"runs under {store.home / 'runs'}", title_justify="left")
    for col in ("run id", "job", "nodes", "cluster", "started", "result", "kept"):
        table.add_column(col)
    for r in records:
        result = r.result + (f": `ddpctl run --resume {r.run_id}`" if r.result == "unfinished" else "")
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started))
        table.add_row(r.run_id, r.job, str(r.nodes), r.cluster, started, result, "outputs/" if r.outputs else "")
    out.table(table)
    return 0


@click.command(epilog=EXIT_CODES)
@name_option
@port_option
@click.option(
    "--size-mb",
    type=FiniteFloatRange(0.001, 8192),
    default=32,
    show_default=True,
    help="All-reduce message size for the bandwidth test, in MB; at most 8192 (each rank of the pair "
    "holds it, in GPU memory on GPU nodes).",
)
@click.option("--no-bandwidth", is_flag=True, help="Only check that every node reaches every other.")
@json_option
def check(name, port, size_mb, no_bandwidth, as_json) -> int:
    """Check the links between a cluster's nodes.

    For every pair of nodes: TCP reachability on the rendezvous port (both ways), then a short
    all-reduce between the two, reported as bus bandwidth; the slowest link is named. Exits 1 if
    any node cannot reach another.
    """
    from rich.table import Table

    from ddpctl.infra import clusters
    from ddpctl.infra.check import run_check
    from ddpctl.infra.providers import get_provider

    from .output import Output

    out = Output(as_json)
    state = clusters.load(open_store(), name)
    provider = get_provider(state.spec.provider)
    port = provider.rdzv_port(state, port)
    targets, executor_for = provider.check_targets(state, out.progress)  # pcluster: its compute nodes
    report = run_check(
        targets,
        executor_for,
        port,
        out.progress,
        bandwidth=not no_bandwidth,
        size_mb=size_mb,
    )
    if as_json:
        out.document({"ok": not report.unreachable, "cluster": state.name, "port": port, **report.to_dict()})
    else:
        table = Table(title=f"links of {state.name!r} (port {port})", title_justify="left")
        for col in ("link", "reachable", "all-reduce busbw"):
            table.add_column(col)
        pairs = sorted({tuple(sorted(k)) for k in [*report.reach, *report.bandwidth_gbps]})
        for a, b in pairs:
            reach = [report.reach.get((a, b)), report.reach.get((b, a))]
            shown = "n/a (same host)" if reach == [None, None] else ("yes" if reach == ["ok", "ok"] else f"{reach}")
            bw = report.bandwidth_gbps.get((a, b)) or report.bandwidth_gbps.get((b, a))
            table.add_row(f"{a} <-> {b}", shown, "" if bw is None else f"{bw:.3f} GB/s")
        out.table(table)
        slowest = report.slowest
        if slowest:
            out.progress(f"slowest link: {slowest[0][0]} <-> {slowest[0][1]} at {slowest[1]:.3f} GB/s")
    if report.unreachable:
        out.progress("unreachable: " + "; ".join(report.unreachable))
        return 1
    return 0


def _detached_argv(argv: list[str], new_run_id: str | None) -> list[str]:
    """This command's arguments for the background ddpctl: without --detach (the job's own
    arguments after `--` are left alone), with the run id already chosen."""
    end = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:end] if a != "--detach"]
    if new_run_id is not None:
        at = head.index("run") + 1
        head[at:at] = ["--run-id", new_run_id]
    return head + argv[end:]


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt
