"""Getting onto nodes, into runs' output, and stopping a run from anywhere: ``ssh``, ``logs``, ``stop``,
``download``."""

from __future__ import annotations

import click

from .options import EXIT_CODES, RunId, json_option, name_option, open_store


class _CommandAfterDashes(click.Command):
    """``ssh [NODE] [-- COMMAND]``: what follows ``--`` is the command, whether or not NODE is given
    (Click alone would take ``ddpctl ssh -- true``'s ``true`` for NODE)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            args, ctx.meta["ssh_command"] = args[:i], args[i + 1 :]
        return super().parse_args(ctx, args)


class _NodeName(click.ParamType):
    """``ssh``'s NODE: a word that starts with '-' is an option ddpctl does not know (``ssh --json``),
    not a node (the command's unknown options are let through for COMMAND, after NODE)."""

    name = "NODE"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.startswith("-"):
            raise click.NoSuchOption(value, ctx=ctx)
        return value


@click.command(cls=_CommandAfterDashes, epilog=EXIT_CODES, context_settings={"ignore_unknown_options": True})
@name_option
@click.option("--print", "print_only", is_flag=True, help="Print the ssh command line instead of running it.")
@click.argument("node", required=False, type=_NodeName())
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(name, print_only, node, command) -> int:
    """Open a shell on NODE (default: the head node), or run COMMAND there.

    OpenSSH connects with what ddpctl's own connections use: the node's user, port, key and ssh
    config (its ProxyJump, its known_hosts), with host keys checked strictly. Nodes are named as
    `ddpctl status --json` lists them; on a ParallelCluster, the compute nodes as `ddpctl check`
    names them (ip-10-0-1-23), reached through the head node.

    \b
    Examples:
      ddpctl ssh                          # a shell on the head node
      ddpctl ssh node1 -- nvidia-smi      # one command on node1
      ddpctl ssh -- df -h /               # one command on the head node
      ddpctl ssh --print node1            # the ssh command line, for scripts or scp
    """
    import shlex

    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.lifecycle.faces import ssh_argv
    from ddpctl.infra.model.errors import DdpctlError, UsageError

    command = tuple(click.get_current_context().meta.get("ssh_command", command))
    state = clusters.load(open_store(), name)
    names = [n.name for n in state.nodes]
    if not state.nodes:
        raise UsageError(f"cluster {state.name!r} has no nodes yet: `ddpctl status` says what it is doing")
    target = next((n for n in state.nodes if n.name == (node or names[0])), None)
    if target is None:  # the nodes jobs run on, if not recorded (pcluster: its compute nodes, through the head)
        from .output import Output

        workers, _ = clusters.job_nodes(state, Output(False).progress)
        names += [n.name for n in workers.nodes if n.name not in names]
        target = next((n for n in workers.nodes if n.name == node), None)
    if target is None:
        raise UsageError(f"no node {node!r} in cluster {state.name!r}: its nodes are {', '.join(names)}")
    if target.ssh is None:
        raise UsageError(
            f"{target.name} of cluster {state.name!r} is this machine (no SSH): its work directory is {target.workdir}"
        )
    argv = ssh_argv(target.ssh, tuple(command))
    if print_only:
        click.echo(shlex.join(argv))
        return 0
    # a child, not exec: ddpctl names the node when ssh could not reach it (its exit status 255);
    # Ctrl-C is the remote command's (ssh passes it on in a shell) while ssh runs
    import signal
    import subprocess

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = subprocess.call(argv, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except FileNotFoundError:
        raise UsageError("ssh not found: install OpenSSH's client (openssh-client)") from None
    finally:
        signal.signal(signal.SIGINT, previous)
    if code == 255:
        from ddpctl.infra.lifecycle.faces import SSH_CONNECT_TIMEOUT_S

        where = f"{target.ssh.user + '@' if target.ssh.user else ''}{target.ssh.address}:{target.ssh.port}"
        raise DdpctlError(
            f"ssh to {target.name} ({where}) failed: the node did not answer within {SSH_CONNECT_TIMEOUT_S} s, "
            "refused the connection or the login (ssh's own message is above)"
        )
    return code


@click.command(epilog=EXIT_CODES)
@click.argument("run_id", type=RunId("RUN_ID"), required=False)
@click.option("--node", default=None, metavar="NODE", help="Only this node's lines (e.g. node1).")
@click.option("--rank", type=click.IntRange(min=0), default=None, help="Only this global rank's lines.")
@click.option(
    "--tail", type=click.IntRange(min=0, max=10_000_000), default=None, metavar="K", help="Only the last K lines."
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines while the run is alive.")
@json_option
def logs(run_id, node, rank, tail, follow, as_json) -> int:
    """Print a run's output from its record (default: the last run started).

    Lines are `[NODE rRANK]` as `ddpctl run` printed them; `--follow` prints a live run's new lines
    until it ends (another terminal's run, or one that outlived a closed terminal); a run that goes
    on on the cluster (its head node's supervisor, or Slurm) after its ddpctl was killed is followed there (Ctrl-C stops following only).

    \b
    Examples:
      ddpctl logs                         # the last run's output
      ddpctl logs r3f2a9c1d0e --rank 0    # one rank of one run
      ddpctl logs --follow --tail 20      # the last 20 lines, then new ones as they come
    """
    from ddpctl.infra.runs import logs as run_logs

    from .output import Output

    out = Output(as_json)
    got = []
    sink = got.append if as_json else lambda line: out.log_line(line.node, line.rank, line.text)
    run_id, path = run_logs.show(
        open_store(), run_id, sink, node=node, rank=rank, tail=tail, follow=follow, progress=out.progress
    )
    if as_json:
        out.document({"ok": True, "run_id": run_id, "log": str(path), "lines": [line.to_dict() for line in got]})
    return 0


@click.command(epilog=EXIT_CODES)
@click.argument("run_id", type=RunId("RUN_ID"))
@json_option
def stop(run_id, as_json) -> int:
    """Stop run RUN_ID as Ctrl-C would, from any terminal: every process of the run on every node,
    and the cluster if the run brought it up. For a `run --detach`, or a run in another terminal.

    \b
    Examples:
      ddpctl stop r3f2a9c1d0e
    """
    from ddpctl.infra.runs.detach import stop_run

    from .output import Output

    out = Output(as_json)
    ended = stop_run(open_store(), run_id, out.progress)
    stopped = ended == "stopped"
    out.progress(f"run {run_id} stopped" if stopped else f"run {run_id} had already ended by itself: {ended}")
    if as_json:
        out.document({"ok": True, "run_id": run_id, "stopped": stopped, "result": ended})
    return 0


@click.command(epilog=EXIT_CODES)
@click.argument("run_id", type=RunId("RUN_ID"))
@click.option(
    "--to",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Copy them into DIR/RUN_ID. [default: the run's record, RUNS_DIR/RUN_ID/outputs]",
)
@json_option
def download(run_id, to, as_json) -> int:
    """Copy run RUN_ID's outputs (its snapshot folder: snapshots, metrics.jsonl) from its cluster,
    while that is up, over the same SSH connections as everything else.

    Without --to they go into the run's record, where `ddpctl down` would keep them and where
    `run --resume-from RUN_ID` finds them. Once the cluster is down, the outputs it kept are
    copied instead. Runs with an s3:// --snapshot-dir have nothing on the cluster.

    
    Examples:
      ddpctl download r3f2a9c1d0e                 # into the run's record
      ddpctl download r3f2a9c1d0e --to ./results  # into ./results/r3f2a9c1d0e
    """
    from pathlib import Path

    from ddpctl.infra.runs.download import download as fetch_outputs
    from ddpctl.infra.runs.outputs import size_text

    from .output import Output

    out = Output(as_json)
    got = fetch_outputs(open_store(), run_id, Path(to) if to else None, out.progress)
    out.progress(f"run {run_id}'s outputs ({size_text(got.size_bytes)}, {got.files} file(s)) are in {got.dest}")
    if as_json:
        out.document({"ok": True, **got.to_dict()})
    return 0


@click.command(epilog=EXIT_CODES)
@json_option
def playbooks(as_json) -> int:
    """Print where the playbooks are (in this checkout, or in the installed package).

    They work without ddpctl too, on your own hosts (Ansible finds the roles beside site.yml):

    \b
      ansible-playbook -i hosts.ini "$(ddpctl playbooks)/site.yml"
      ansible-playbook -i hosts.ini "$(ddpctl playbooks)/site.yml" --tags nccl_env -e nccl_env_debug=INFO
    """
    from ddpctl.infra.lifecycle.faces import ANSIBLE_CFG, PLAYBOOKS

    from .output import Output

    if as_json:
        config = str(ANSIBLE_CFG) if ANSIBLE_CFG.is_file() else None
        Output(True).document(
            {"ok": True, "playbooks": str(PLAYBOOKS), "site": str(PLAYBOOKS / "site.yml"), "ansible_cfg": config}
        )
    else:
        click.echo(str(PLAYBOOKS))
    return 0
