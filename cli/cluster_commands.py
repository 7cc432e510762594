"""The commands that make, change and remove clusters: ``up``, ``configure``, ``down``."""

from __future__ import annotations

import click
from click.core import ParameterSource

from ddpctl.infra.lifecycle.faces import PROVIDER_NAMES

from .options import (
    EXIT_CODES,
    autodown_option,
    confirm,
    down_on_failure_option,
    dry_run_option,
    env_option,
    given_options,
    json_option,
    name_option,
    nproc_option,
    open_store,
    port_option,
    provider_options,
    python_option,
    yes_option,
)
from .plans import print_cluster_plan


@click.command(epilog=EXIT_CODES)
@name_option
@click.option(
    "--provider",
    type=click.Choice(PROVIDER_NAMES),
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
@provider_options
@down_on_failure_option
@autodown_option
@dry_run_option
@yes_option
@json_option
def up(
    name,
    provider,
    nodes,
    inventory,
    nproc_per_node,
    port,
    env,
    playbook_vars,
    python,
    autodown,
    dry_run,
    yes,
    as_json,
    **opts,
) -> int:
    """Provision a cluster of NODES nodes and record it under the state home.

    \b
    local   N nodes on this machine (no root, no SSH, no cloud)
    onprem  your hosts from an Ansible inventory: checks SSH to every host,
            configures them with playbooks/site.yml, then records the cluster
    aws     EC2 instances (p3.2xlarge by default) in a new VPC, SSH only from
            your address, configured with playbooks/site.yml; the image follows
            the GPU: Canonical's Ubuntu 22.04 and NVIDIA's driver from site.yml
            for p3 (V100), the Deep Learning AMI for g4dn, g5, p4d, p5; every
            resource is tagged, so `ddpctl down` deletes it all, even after a crash
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
      ddpctl up --provider aws --nodes 2 --autodown 30m   # down by itself after 30 min idle
      ddpctl up --provider pcluster --nodes 2 --dry-run   # config, schema, create-cluster --dryrun
    """
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model import locks
    from ddpctl.infra.model.env_vars import parse_env

    from .output import Output

    out = Output(as_json)
    down_on_failure = opts.pop("down_on_failure")
    spec = clusters.new_spec(
        name=name,
        provider=provider,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        port=port,
        env=parse_env(env),
        inventory=inventory,
        playbook_vars=parse_env(playbook_vars, flag="--playbook-var"),
        options=given_options(opts),  # the providers' options
        autodown_s=autodown,
        python=python,
        down_on_failure=down_on_failure,
    )
    store = open_store()
    if not dry_run:  # one command at a time changes a cluster
        click.get_current_context().with_resource(locks.cluster(store, spec.name, "up"))
    # the checks that cost nothing, before asking (and a cluster of the name that took itself down cleaned up)
    provider_impl, state = clusters.plan_up(spec, store, clean=not dry_run, progress=out.progress)
    question = None if dry_run else clusters.cost_question(provider_impl, state)
    if question:  # what costs money is asked for, not assumed
        confirm(question, yes)
    if dry_run:
        report = provider_impl.dry_run(state, store, out.progress)
        if as_json:
            doc = {"ok": True, "dry_run": True, "cluster": state.to_dict()}
            if report is not None:
                doc[provider] = report.to_dict()
            out.document(doc)
        elif report is not None:
            for line in report.lines:
                click.echo(line)
        else:
            print_cluster_plan(state)
        return 0
    state = clusters.up(provider_impl, state, store, out.progress, down_on_failure=down_on_failure)
    if as_json:
        out.document({"ok": True, "cluster": state.to_dict()})
    return 0


@click.command(epilog=EXIT_CODES)
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
    type=click.Choice(PROVIDER_NAMES),
    default=None,
    help="Which provider made a cluster whose state file is lost (with --region: aws, the default, or pcluster) "
    "or damaged (where the file no longer says).",
)
@click.option(
    "--home-id",
    default=None,
    metavar="ID",
    help="With --name and --region: the resources of the state home with this id (as a refusal names it), "
    "where that home itself is lost. [default: this home's own]",
)
@click.option(
    "--keep-outputs/--no-keep-outputs",
    default=True,
    show_default=True,
    help="First copy the runs' outputs that exist only on the cluster (snapshots, metrics) into their "
    "records under the state home (runs/<id>/outputs); their size is shown first.",
)
@yes_option
@json_option
def down(name, all_, region, lost_provider, home_id, keep_outputs, yes, as_json) -> int:
    """Take a cluster down: stop its processes and delete everything it created.

    Safe after a crash or Ctrl-C at any point of `up` or `run`: whatever the state records is
    cleaned up. For aws, resources are also found by their tags, and `down` waits until EC2
    reports the instances terminated; `ddpctl down --name NAME --region REGION` cleans up an
    aws cluster whose state file is lost (add `--provider pcluster` for a ParallelCluster one).
    A damaged state file is cleaned up from what can still be read of it (processes by their
    marker, cloud resources by tag). Running `down` twice is fine.

    Runs' outputs (their snapshot folders) that exist only on the cluster are copied into their
    records first (`ddpctl runs` shows them as kept); outputs in s3:// stay where they are. On aws
    and pcluster, `down` asks first, naming those outputs and their size (--yes answers).
    """
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.runs import outputs

    from .output import Output

    out = Output(as_json)
    store = open_store()
    if all_ and name and click.get_current_context().get_parameter_source("name") == ParameterSource.COMMANDLINE:
        raise UsageError(f"--all and --name {name} contradict: --all takes every cluster down; give one of them")
    if (region is not None or lost_provider) and (not name or all_):
        raise UsageError("--region and --provider are for one cluster whose state is lost or damaged: give --name")
    if home_id is not None:
        check_home_id(home_id, store, lost=region is not None and not store.exists(name or ""))
        store = StateStore(store.home, acting_for=home_id)
    if not store.exists(name or ""):
        if region is not None:
            clusters.down_lost(store, name, region, lost_provider, out.progress)
            if as_json:
                out.document({"ok": True, "down": [name]})
            return 0
        if lost_provider:
            raise UsageError("--provider is for a lost state file: add --region REGION (aws, pcluster)")
    if all_:
        names = store.names()
        if names:
            confirm(f"take down every cluster under {store.home}: {', '.join(names)}", yes)
    else:
        resolved = clusters.resolve_name(store, name)
        names = [resolved] if resolved else []
    if not names:
        out.progress(f"no cluster is up under {store.home}: nothing to take down")
    ask = None if all_ else (lambda question: confirm(question, yes))  # --all asked once, above
    before = outputs.before_down(out.progress, ask=ask, keep=keep_outputs)
    downed = [
        clusters.down(n, store, out.progress, provider=lost_provider, region=region, before=before) for n in names
    ]
    if as_json:
        out.document({"ok": True, "down": downed})
    return 0


def check_home_id(home_id: str, store, *, lost: bool) -> None:
    """``down --home-id``: a state home's id, for a cluster no state file here records."""
    import re

    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.model.store import HOME_ID_PATTERN

    if not lost:
        raise UsageError(
            "--home-id is for a cluster whose state file is lost: give --name and --region of a cluster "
            f"no state file under {store.home} records"
        )
    if not re.fullmatch(HOME_ID_PATTERN, home_id):
        raise UsageError(f"--home-id {home_id!r} is not a state home's id: 16 hex digits, as a refusal names it")


@click.command(epilog=EXIT_CODES)
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
@click.option("--check", is_flag=True, help="Change nothing: report what the play would change (Ansible's check mode).")
@click.option("--diff", is_flag=True, help="Show what each task changes (or would, with --check) as a diff.")
@json_option
def configure(name, playbook_vars, tags, check, diff, as_json) -> int:
    """Run playbooks/site.yml again on a cluster's nodes (onprem, aws, pcluster).

    Ansible converges: what is already right is left alone, and the recap says what changed. Use
    it after changing a playbook variable, after upgrading ddpctl (the training bundle on the
    nodes), or after a configure step that failed under `up --no-down-on-failure`.

    \b
    Examples:
      ddpctl configure                                  # converge; "node0 ok, node1 ok" when nothing changed
      ddpctl configure --playbook-var nccl_env_debug=INFO --tags nccl_env
      ddpctl configure --tags bundle                    # the training code only
      ddpctl configure --check --diff                   # what would change, as diffs; nothing changed
    """
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.env_vars import parse_env

    from .output import Output

    out = Output(as_json)
    state, report = clusters.configure(
        open_store(),
        name,
        out.progress,
        parse_env(playbook_vars, flag="--playbook-var"),
        tags=tags,
        check=check,
        diff=diff,
    )
    summary = clusters.changed_summary(report)
    if check:
        out.progress(f"cluster {state.name!r} checked, nothing was changed; a real run would give: {summary}")
    else:
        out.progress(f"cluster {state.name!r} configured: {summary}")
    if as_json:
        changed = {host: stats.get("changed", 0) for host, stats in sorted(report.stats.items())}
        doc = {"ok": True, "check": check, "cluster": state.to_dict(), "changed": changed}
        if diff:
            doc["diff"] = [d.to_dict() for d in report.diffs]
        out.document(doc)
    elif diff:
        for d in report.diffs:
            click.echo(f"--- {d.host}: {d.task}\n{d.text}")
    return 0


@click.command(epilog=EXIT_CODES)
@click.argument("args", nargs=-1, metavar="DURATION|off")
@name_option
@json_option
def autodown(args, name, as_json) -> int:
    """Take a cluster down by itself once no run has been active on it for DURATION (30m, 2h, 1h30m; 5m at least), or off.

    \b
    A program on the head node watches for runs (ddpctl's, any torchrun agent, Slurm jobs); after
    DURATION idle it shuts every node down over the cluster's SSH mesh, then its own: EC2 terminates
    the others and stops the head node, whose disk keeps the runs' outputs (spot nodes all
    terminate); nothing needs to run on this machine meanwhile. `ddpctl status` then shows it
    stopped, and `ddpctl down` copies the outputs here and deletes everything. Setting it again
    starts the idle time anew. `ddpctl status` shows it and when it would fire.

    \b
    Examples:
      ddpctl autodown 30m              # the only cluster
      ddpctl autodown --name big 2h
      ddpctl autodown --name big off
    """
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.autodown import parse
    from ddpctl.infra.model.errors import UsageError

    from .output import Output

    if len(args) not in (1, 2):
        raise UsageError("give DURATION: e.g. `ddpctl autodown 30m` or `ddpctl autodown --name NAME off`")
    if len(args) == 2:  # `autodown NAME DURATION`, as earlier versions took it
        from ddpctl.infra.model.spec import check_cluster_name

        check_cluster_name(args[0])
        if name is not None and name != args[0]:
            raise UsageError(f"--name {name} and NAME {args[0]} contradict: give the cluster once, with --name")
        name = args[0]
    idle_s = parse(args[-1], "DURATION")
    out = Output(as_json)
    state = clusters.set_autodown(open_store(), name, idle_s, out.progress)
    if as_json:
        out.document({"ok": True, "name": state.name, "autodown_s": idle_s})
    return 0
