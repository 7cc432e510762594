"""The ``ddpctl`` command line: thin Click commands over ``ddpctl.infra``.

Start-up stays light: nothing here imports torch, boto3, ansible or fabric (providers that need
them are imported only when used).
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ddpctl import __version__
from ddpctl.infra.errors import DdpctlError

from .options import (
    FiniteFloatRange,
    RunId,
    dry_run_option,
    env_option,
    json_option,
    name_option,
    nproc_option,
    port_option,
    python_option,
    run_nodes_option,
    run_nproc_option,
)

# Commands import the library (ddpctl.infra, rich) when they run, not at start-up: `--help` stays fast.

EXIT_CODES = """\b
Exit codes:
  0    success
  1    an error ddpctl could not get past, or the job failed on a node
  2    bad input (a flag, a path, a port, the config file): nothing was created
  130  interrupted (Ctrl-C); every process of the run was stopped
"""


class DdpctlGroup(click.Group):
    """Prints every error as one line ("Error: ...") and exits with its code."""

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> NoReturn:
        extra.pop("standalone_mode", None)
        try:
            rv = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.ClickException as exc:
            hint = " (see --help)" if isinstance(exc, click.UsageError) else ""
            _fail(f"{exc.format_message()}{hint}", exc.exit_code)
        except DdpctlError as exc:
            _fail(str(exc), exc.exit_code)
        except (click.Abort, KeyboardInterrupt):
            _fail("interrupted", 130)
        sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    if "--json" in sys.argv[1:]:
        click.echo(json.dumps({"ok": False, "error": message, "exit_code": code}))
    sys.exit(code)


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    path = Path(value) if value else Path("ddpctl.toml")
    if value or path.is_file():
        from .config_file import load_default_map

        ctx.default_map = load_default_map(path)
    return value


@click.group(cls=DdpctlGroup, epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpctl")
@click.option(
    "--config",
    callback=_load_config,
    is_eager=True,
    expose_value=False,
    metavar="FILE",
    envvar="DDPCTL_CONFIG",
    help="Defaults for the options below, from a TOML file (or $DDPCTL_CONFIG). [default: ./ddpctl.toml if present]",
)
def cli() -> None:
    """Multi-node PyTorch DDP, from nothing to a finished run and back to nothing.

    \b
    Quick start (this machine, no cloud, no root):
      ddpctl run mnist --nodes 2            # brings 2 local nodes up, trains, takes them down
    A cluster that stays up between runs:
      ddpctl up --nodes 2
      ddpctl run message-passing --nodes 2
      ddpctl status
      ddpctl down

    State lives in ~/.ddpctl (set DDPCTL_HOME to move it).
    """


def _store():
    from ddpctl.infra.state import StateStore

    return StateStore()


_AWS_UP_OPTIONS = [
    click.option(
        "--region",
        default=None,
        metavar="REGION",
        help="aws: the region. [default: AWS_REGION, AWS_DEFAULT_REGION or your profile's; else us-east-1]",
    ),
    click.option(
        "--az",
        default=None,
        metavar="ZONE",
        help="aws: launch in this zone only. [default: the first zone with capacity]",
    ),
    click.option("--instance-type", default=None, metavar="TYPE", help="aws: EC2 instance type. [default: p3.2xlarge]"),
    click.option(
        "--volume-gb",
        type=click.IntRange(8, 16384),
        default=None,
        help="aws: root volume size (gp3, encrypted). [default: 200]",
    ),
    click.option(
        "--ami",
        default=None,
        metavar="AMI_ID",
        help="aws: the image. [default: the newest AWS Deep Learning AMI of the region]",
    ),
    click.option(
        "--spot",
        is_flag=True,
        help="aws: spot instances (cheaper; AWS may reclaim one with 2 minutes' notice: it is "
        "terminated, the run fails, and `down` + `up` start over from the last snapshot).",
    ),
    click.option(
        "--ssh-cidr",
        default=None,
        metavar="CIDR",
        help="aws: who may SSH to the nodes. [default: your public address/32, from checkip.amazonaws.com]",
    ),
    click.option("--vpc-id", default=None, metavar="VPC_ID", help="aws: an existing VPC (with --subnet-id)."),
    click.option(
        "--subnet-id",
        default=None,
        metavar="SUBNET_ID",
        help="aws: an existing subnet for the nodes. [default: a new VPC and subnet for the cluster]",
    ),
    click.option("--ssh-user", default=None, metavar="USER", help="aws: the AMI's login user. [default: ubuntu]"),
    click.option(
        "--private-ip",
        is_flag=True,
        help="aws: reach the nodes at their private addresses (run ddpctl inside the VPC).",
    ),
    click.option(
        "--iam-instance-profile",
        default=None,
        metavar="NAME",
        help="aws: an existing IAM instance profile for the nodes, e.g. one allowed s3:GetObject, "
        "s3:PutObject and s3:ListBucket on the bucket of `run --snapshot-dir s3://...`. The "
        "nodes get short-lived credentials from it; none are ever copied to them. [default: none]",
    ),
    click.option(
        "--configure/--no-configure",
        default=True,
        show_default=True,
        help="aws: configure the nodes with playbooks/site.yml; --no-configure only launches them "
        "(not ready for jobs; the tests against moto use it, whose instances are not real hosts).",
    ),
    click.option(
        "--down-on-failure/--no-down-on-failure",
        default=True,
        show_default=True,
        help="aws: if `up` fails, delete what it made. Ctrl-C never deletes: it stops and says how.",
    ),
]


def _aws_up_options(func):
    for option in reversed(_AWS_UP_OPTIONS):
        func = option(func)
    return func


@cli.command(epilog=EXIT_CODES)
@name_option
@click.option(
    "--provider",
    type=click.Choice(["local", "onprem", "aws", "pcluster"]),
    default="local",
    show_default=True,
    help="Where the nodes come from.",
)
@click.option(
    "--nodes",
    "-n",
    type=click.IntRange(min=1),
    default=None,
    help="Number of nodes. [default: local 1; onprem every host in the inventory]",
)
@click.option(
    "--inventory",
    "-i",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="onprem: an Ansible inventory (INI or YAML); the [ddp_nodes] group if present, else every host.",
)
@nproc_option
@port_option
@env_option
@click.option(
    "--playbook-var",
    "playbook_vars",
    multiple=True,
    metavar="KEY=VALUE",
    help="onprem, aws, pcluster: a variable for playbooks/site.yml (repeatable; wins over the inventory's), "
    "e.g. nvidia_cuda_version=12.8 or python_env_mode=existing.",
)
@python_option
@_aws_up_options
@dry_run_option
@json_option
def up(
    name, provider, nodes, inventory, nproc_per_node, port, env, playbook_vars, python, dry_run, as_json, **aws
) -> int:
    """Provision a cluster of NODES nodes and record it under the state home.

    \b
    local   N nodes on this machine (no root, no SSH, no cloud)
    onprem  your hosts from an Ansible inventory: checks SSH to every host,
            configures them with playbooks/site.yml, then records the cluster
    aws     EC2 instances (p3.2xlarge, Deep Learning AMI) in a new VPC, SSH only
            from your address, configured with playbooks/site.yml; every resource
            is tagged, so `ddpctl down` deletes it all, even after a crash
    pcluster  an AWS ParallelCluster (Slurm, p3.2xlarge compute nodes) made by the
            `pcluster` CLI (aws-parallelcluster, in its own venv: PATH or
            DDPCTL_PCLUSTER); the config is checked by its schema first; then
            playbooks/site.yml puts torch and the bundle in the head node's
            /home, which the compute nodes share; jobs go through sbatch there

    \b
    Examples:
      ddpctl up --nodes 2                          # two local nodes on this machine
      ddpctl up --provider onprem -i hosts.ini     # every host in hosts.ini
      ddpctl up --nodes 2 --dry-run --json         # the plan, as JSON; nothing is created
      ddpctl up --provider aws --nodes 2 --dry-run # plan, checks and cost per hour
      ddpctl up --provider aws --nodes 2 --region us-west-2 --spot
      ddpctl up --provider pcluster --nodes 2 --dry-run   # config, schema, create-cluster --dryrun
    """
    from ddpctl.infra import clusters, locks
    from ddpctl.infra.errors import UsageError
    from ddpctl.infra.spec import ClusterSpec, check_local_python, check_local_ranks, parse_env

    from .output import Output

    out = Output(as_json)
    kwargs = {"python": python} if python else {}
    if inventory and provider != "onprem":
        raise UsageError(f"--inventory is for --provider onprem, not {provider}")
    if nodes is None:
        if provider == "onprem" and inventory:
            from ddpctl.infra.inventory import load_inventory

            nodes = len(load_inventory(inventory))
        else:
            nodes = 1
    down_on_failure = aws.pop("down_on_failure")
    if provider != "aws" and not aws["configure"]:
        raise UsageError(f"--no-configure is for --provider aws, not {provider}")
    if provider not in ("aws", "pcluster") and not down_on_failure:
        raise UsageError(f"--no-down-on-failure is for --provider aws or pcluster, not {provider}")
    kwargs.update({k: v for k, v in aws.items() if v is not None})
    spec = ClusterSpec(
        name=name or "default",
        provider=provider,
        nodes=nodes,
        nproc_per_node=nproc_per_node or 1,
        port=port,
        env=parse_env(env),
        inventory=str(Path(inventory).resolve()) if inventory else "",
        playbook_vars=parse_env(playbook_vars, flag="--playbook-var"),
        **kwargs,
    )
    if provider == "local":  # every rank on this machine, with this machine's Python
        check_local_ranks(spec.nodes, spec.nproc_per_node)
        if python:
            check_local_python(python)
    store = _store()
    if not dry_run:  # one command at a time changes a cluster
        click.get_current_context().with_resource(locks.cluster(store, spec.name, "up"))
    provider_impl, state = clusters.plan_up(spec, store)
    if dry_run:
        cloud = provider in ("aws", "pcluster")
        report = provider_impl.dry_run(state, store, out.progress) if cloud else None
        if as_json:
            doc = {"ok": True, "dry_run": True, "cluster": state.to_dict()}
            if report is not None:
                doc[provider] = report.to_dict()
            out.document(doc)
        elif report is not None:
            for line in report.lines:
                click.echo(line)
        else:
            _print_cluster_plan(state)
        return 0
    if provider in ("aws", "pcluster"):
        from ddpctl.infra.providers.aws import lifecycle

        state = lifecycle.up(provider_impl, state, store, out.progress, down_on_failure=down_on_failure)
    else:
        state = clusters.up(provider_impl, state, store, out.progress)
    if as_json:
        out.document({"ok": True, "cluster": state.to_dict()})
    return 0


@cli.command(epilog=EXIT_CODES)
@name_option
@json_option
def status(name, as_json) -> int:
    """Show the clusters under the state home (or just --name)."""
    from rich.table import Table

    from .output import Output

    out = Output(as_json)
    store = _store()
    states = [store.load(name)] if name else [store.load(n) for n in store.names()]
    live = {}
    for s in states:
        if s.spec.provider in ("aws", "pcluster"):  # what EC2 / ParallelCluster says runs now, its cost per hour
            from ddpctl.infra.providers import get_provider

            live[s.name] = get_provider(s.spec.provider).status(s)
    if as_json:
        clusters_doc = [{**s.to_dict(), **({"live": live[s.name]} if s.name in live else {})} for s in states]
        out.document({"ok": True, "home": str(store.home), "clusters": clusters_doc})
        return 0
    if not states:
        out.progress(f"no clusters under {store.home}; start one with `ddpctl up`")
        return 0
    table = Table(title=f"clusters under {store.home}", title_justify="left")
    for col in ("name", "provider", "status", "nodes", "procs/node", "hosts", "cost/h"):
        table.add_column(col)
    for s in states:
        hosts = ", ".join(sorted({n.host for n in s.nodes}))
        label = s.status + (" (for one run)" if s.ephemeral else "")
        cost = ""
        if s.name in live:
            info = live[s.name]
            running = ", ".join(f"{n} {st}" for st, n in sorted(info.get("instances", {}).items())) or "none"
            label += f" ({info['error']})" if "error" in info else f" ({info.get('summary') or 'EC2: ' + running})"
            usd = info["cost_per_hour_usd"]
            cost = "unknown" if usd is None else f"${usd:,.2f}"
        table.add_row(s.name, s.spec.provider, label, str(len(s.nodes)), str(s.spec.nproc_per_node), hosts, cost)
    out.table(table)
    return 0


@cli.command(epilog=EXIT_CODES)
@name_option
@click.option("--all", "all_", is_flag=True, help="Take down every cluster under the state home.")
@click.option(
    "--region",
    default=None,
    metavar="REGION",
    help="With --name: delete the cluster's resources found by tag in REGION, even with no state file.",
)
@click.option(
    "--provider",
    "lost_provider",
    type=click.Choice(["aws", "pcluster"]),
    default=None,
    help="With --region: which provider made the cluster whose state file is lost: aws (the default), "
    "or pcluster (its ParallelCluster first, then the network).",
)
@json_option
def down(name, all_, region, lost_provider, as_json) -> int:
    """Take a cluster down: stop its processes and delete everything it created.

    Safe after a crash or Ctrl-C at any point of `up` or `run`: whatever the state records is
    cleaned up. For aws, resources are also found by their tags, and `down` waits until EC2
    reports the instances terminated; `ddpctl down --name NAME --region REGION` cleans up an
    aws cluster whose state file is lost (add `--provider pcluster` for a ParallelCluster one).
    Running `down` twice is fine.
    """
    from ddpctl.infra import clusters, locks
    from ddpctl.infra.errors import UsageError

    from .output import Output

    out = Output(as_json)
    store = _store()
    if lost_provider and region is None:
        raise UsageError("--provider is for a lost state file: give it with --name and --region")
    if region is not None:
        lost_provider = lost_provider or "aws"
        if not name or all_:
            raise UsageError("--region needs --name (the cluster to find by tag), and not --all")
        if not store.exists(name):
            from ddpctl.infra.providers import get_provider
            from ddpctl.infra.providers.aws.provider import with_defaults
            from ddpctl.infra.spec import ClusterSpec

            with_defaults(ClusterSpec(name=name, provider=lost_provider, region=region))  # the region as `up` checks it
            click.get_current_context().with_resource(locks.cluster(store, name, "down"))
            get_provider(lost_provider).down_lost(name, region, store, out.progress)
            if as_json:
                out.document({"ok": True, "down": [name]})
            return 0
    if all_:
        names = store.names()
    else:
        resolved = clusters.resolve_name(store, name)
        names = [resolved] if resolved else []
    if not names:
        out.progress(f"no cluster is up under {store.home}: nothing to take down")
    downed = [clusters.down(n, store, out.progress).name for n in names]
    if as_json:
        out.document({"ok": True, "down": downed})
    return 0


@cli.command(epilog=EXIT_CODES)
@click.argument("job", required=False)
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
@env_option
@python_option
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
    env,
    python,
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
      ddpctl run mingpt --nodes 2 --dry-run
      ddpctl run mnist --nodes 2:3 -- --epochs 5   # elastic: goes on if a node is lost
      ddpctl run mnist --nodes 2 --snapshot-dir s3://my-bucket/mnist   # nodes share no filesystem
      ddpctl run --resume ra35cebc6d8   # after ddpctl was killed mid-run (`ddpctl runs` lists ids)
    """
    from click.core import ParameterSource

    from ddpctl.infra import runs
    from ddpctl.infra.errors import UsageError

    from .output import Output

    out = Output(as_json)
    store = _store()
    if resume_id is not None:
        given = [
            p.opts[0]
            for p in ctx.command.params
            if isinstance(p, click.Option)
            and p.name not in ("resume_id", "dry_run", "as_json")
            and ctx.get_parameter_source(p.name) != ParameterSource.DEFAULT
        ]
        if job or job_args or given:
            what = " ".join(([job] if job else []) + given + (["-- ..."] if job_args else []))
            raise UsageError(f"--resume runs {resume_id} with its recorded job and options: leave out {what}")
        prep = runs.prepare_resume(resume_id, store)
    else:
        if not job:
            raise UsageError("missing JOB: give a bundled job (message-passing, mnist, mingpt) or a script path")
        min_nodes, nodes = nodes if isinstance(nodes, tuple) else (0, nodes)
        opts = runs.RunOptions(
            job=job,
            args=tuple(job_args),
            nodes=nodes,
            nproc_per_node=nproc_per_node,
            max_restarts=max_restarts,
            name=name,
            port=port,
            run_id=run_id,
            env=tuple(env),
            python=python,
            launcher=launcher,
            min_nodes=min_nodes,
            snapshot_dir=snapshot_dir,
        )
        prep = runs.prepare(opts, store)
    if dry_run:
        if as_json:
            doc = {"ok": True, "dry_run": True, "plan": prep.plan.to_dict()}
            if prep.ephemeral:
                doc["cluster"] = prep.cluster.to_dict()
            out.document(doc)
        else:
            if prep.ephemeral:
                _print_cluster_plan(prep.cluster, note=" (for this run; taken down after it)")
            _print_launch_plan(prep.plan)
        return 0
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        result = runs.execute(prep, store, out.line, out.progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
    out.run_summary(result)
    if as_json:
        from dataclasses import asdict

        out.document({"ok": result.ok, "plan": prep.plan.to_dict(), "result": asdict(result)})
    return result.exit_code


@cli.command(epilog=EXIT_CODES)
@json_option
def runs(as_json) -> int:
    """List the runs recorded under the state home, oldest first.

    A run that ddpctl did not see to its end (ddpctl was killed, the machine went down) shows as
    unfinished: `ddpctl run --resume RUN_ID` continues it from its snapshot. Each run's output is
    in RUNS_DIR/<run id>/output.log.
    """
    import time

    from rich.table import Table

    from ddpctl.infra.runs import list_runs

    from .output import Output

    out = Output(as_json)
    store = _store()
    records = list_runs(store)
    if as_json:
        out.document({"ok": True, "runs_dir": str(store.home / "runs"), "runs": [r.to_dict() for r in records]})
        return 0
    if not records:
        out.progress(f"no runs under {store.home / 'runs'}; start one with `ddpctl run`")
        return 0
    table = Table(title=f"runs under {store.home / 'runs'}", title_justify="left")
    for col in ("run id", "job", "nodes", "cluster", "started", "result"):
        table.add_column(col)
    for r in records:
        result = r.result + (f": `ddpctl run --resume {r.run_id}`" if r.result == "unfinished" else "")
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started))
        table.add_row(r.run_id, r.job, str(r.nodes), r.cluster, started, result)
    out.table(table)
    return 0


@cli.command(epilog=EXIT_CODES)
@name_option
@click.option(
    "--playbook-var",
    "playbook_vars",
    multiple=True,
    metavar="KEY=VALUE",
    help="A variable for playbooks/site.yml (repeatable); recorded with the cluster, so later runs keep it.",
)
@click.option(
    "--tags",
    default=None,
    metavar="ROLE[,ROLE]",
    help="Only these roles: common, ssh_mesh, nvidia, python_env, nccl_env, bundle.",
)
@json_option
def configure(name, playbook_vars, tags, as_json) -> int:
    """Run playbooks/site.yml again on a cluster's nodes (onprem, aws, pcluster).

    Ansible converges: what is already right is left alone, and the recap says what changed. Use
    it after changing a playbook variable, after upgrading ddpctl (the training bundle on the
    nodes), or after a configure step that failed under `up --no-down-on-failure`.

    \b
    Examples:
      ddpctl configure                                  # converge; "node0 ok, node1 ok" when nothing changed
      ddpctl configure --playbook-var nccl_env_debug=INFO --tags nccl_env
      ddpctl configure --tags bundle                    # the training code only
    """
    from ddpctl.infra import clusters
    from ddpctl.infra.configure import changed_summary
    from ddpctl.infra.spec import parse_env

    from .output import Output

    out = Output(as_json)
    state, report = clusters.configure(
        _store(), name, out.progress, parse_env(playbook_vars, flag="--playbook-var"), tags
    )
    summary = changed_summary(report)
    out.progress(f"cluster {state.name!r} configured: {summary}")
    if as_json:
        changed = {host: stats.get("changed", 0) for host, stats in sorted(report.stats.items())}
        out.document({"ok": True, "cluster": state.to_dict(), "changed": changed})
    return 0


@cli.command(epilog=EXIT_CODES)
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
    state = clusters.load(_store(), name)
    provider = get_provider(state.spec.provider)
    port = provider.rdzv_port(state, port)
    report = run_check(
        state,
        lambda sink: provider.executor(state, sink),
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


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _print_cluster_plan(state, note: str = "") -> None:
    click.echo(f"Would create {state.spec.provider} cluster {state.name!r}{note}:")
    for res in state.resources:
        click.echo(f"  {res.kind:<10} {res.id}")
    for node in state.nodes:
        where = f" (workdir {node.workdir})" if node.workdir else ""
        click.echo(f"  node       {node.name} at {node.host}{where}")


def _print_launch_plan(plan) -> None:
    if hasattr(plan, "script"):  # an sbatch plan
        click.echo(f"Would submit run {plan.run_id} with sbatch as {plan.script_path}:")
        click.echo(plan.script, nl=False)
        return
    click.echo(
        f"Would run {plan.job} as run {plan.run_id}: world size {plan.world_size}, rendezvous {plan.rdzv_endpoint}"
    )
    for node in plan.nodes:
        click.echo(f"  {node.node} ({node.host}):")
        click.echo(f"    cwd:  {node.cwd}")
        for key, value in node.env.items():
            click.echo(f"    env:  {key}={value}")
        click.echo(f"    argv: {shlex.join(node.argv)}")
