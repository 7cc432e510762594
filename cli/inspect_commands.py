"""The commands that look at what is there: ``status`` (the clusters), ``runs`` (the recorded runs),
``metrics`` (a run's metric lines), ``check`` (the links between a cluster's nodes)."""

from __future__ import annotations

import click

from .options import EXIT_CODES, FiniteFloatRange, RunId, json_option, name_option, open_store, port_option


@click.command(epilog=EXIT_CODES)
@name_option
@json_option
def status(name, as_json) -> int:
    """Show the clusters under the state home (or just --name)."""
    from .api import cluster_statuses
    from .output import Output

    out = Output(as_json)
    store = open_store()
    found = cluster_statuses(store, name, out.progress)  # the API's `ddpctl.status()`: the same values
    if as_json:
        out.document({"ok": True, "home": str(store.home), "clusters": [c.to_dict() for c in found]})
        return 0
    damaged = [c for c in found if c.state is None and not c.took_itself_down]
    if not any(c.state is not None for c in found) and not damaged:
        if not any(c.took_itself_down for c in found):
            out.progress(f"no clusters under {store.home}; start one with `ddpctl up`")
        return 0
    out.table(_clusters_table(str(store.home), found))
    for c in found:
        if c.live is not None and c.live.price_note:
            out.progress(f"{c.name}: cost/h from {c.live.price_note}")
    for d in damaged:
        out.progress(f"{d.name}: {d.message}")
    return 0


def _clusters_table(home: str, found: list):
    """``status``' table: a row per cluster (the cost columns only where something is billed, the
    autodown column only where one has it), the damaged ones last."""
    import time

    from rich.table import Table

    from ddpctl.infra.model import autodown, costs
    from ddpctl.infra.runs.ranks import node_nprocs

    now = time.time()
    states = [c.state for c in found if c.state is not None]
    damaged = [c for c in found if c.state is None and not c.took_itself_down]
    live = {c.name: c.live for c in found}
    autodowns = {c.name: autodown.status_text(c.autodown, now) for c in found if c.autodown is not None}
    spent_by = {c.name: c.cost_so_far_usd for c in found}
    billed = any(info is not None for info in live.values())  # the cost columns only where something is billed
    table = Table(title=f"clusters under {home}", title_justify="left")
    table.add_column("name", overflow="fold")  # never cut: it is what the other commands take
    for col in (
        "provider",
        "status",
        "nodes",
        "procs/node",
        "hosts",
        "up for",
        *(("cost/h", "so far") if billed else ()),
        *(("autodown",) if autodowns else ()),
    ):
        table.add_column(col, overflow="fold" if col in ("status", "autodown") else "ellipsis")  # never cut
    width = 9 if billed else 7
    for s in states:
        hosts = ", ".join(sorted({n.host for n in s.nodes}))
        label = s.status + (" (for one run)" if s.ephemeral else "")
        cost = spent = ""
        info = live[s.name]
        if info is not None:
            label += f" ({info.summary})"
            cost = "unknown" if info.cost_per_hour_usd is None else f"${info.cost_per_hour_usd:,.2f}"
            spent = "unknown" if spent_by[s.name] is None else f"about ${spent_by[s.name]:,.2f}"
        procs = node_nprocs(s, s.spec.nodes, None)  # what a run with no --nproc-per-node gets
        procs_text = str(procs[0]) if len(set(procs)) == 1 else "+".join(map(str, procs))
        age = costs.age_text(now - s.created_at)
        row = (s.name, s.spec.provider, label, str(len(s.nodes)), procs_text, hosts, age, cost, spent)[:width]
        table.add_row(*row, *((autodowns.get(s.name, "off"),) if autodowns else ()))
    for d in damaged:
        table.add_row(*(d.name, d.provider, "damaged", "?", "?", "", "", "", "", "")[: width + bool(autodowns)])
    return table


@click.command(epilog=EXIT_CODES)
@json_option
def runs(as_json) -> int:
    """List the runs recorded under the state home, oldest first.

    A run that ddpctl did not see to its end (ddpctl was killed, the machine went down) shows as
    unfinished: `ddpctl run --resume RUN_ID` continues it from its snapshot. Each run's output is
    in RUNS_DIR/<run id>/output.log; a run on a cluster brought up for it keeps its snapshot folder
    in RUNS_DIR/<run id>/outputs ("kept"), which `ddpctl run JOB --resume-from RUN_ID` starts from.
    Duration is how long the job ran; cost, on a billed cluster, is its nodes' list price for that
    long (the nodes it used x one node's $/h x duration); loss and accuracy are the last in its
    metrics (`ddpctl metrics`). `ddpctl down` keeps the outputs of a cluster's runs the same way, and
    `ddpctl download RUN_ID` copies them at any time.
    """
    import time

    from rich.table import Table

    from ddpctl.infra.runs.on_cluster import listed

    from .output import Output

    out = Output(as_json)
    store = open_store()
    records = listed(store)  # a run whose ddpctl here was killed: its record from the cluster
    if as_json:
        from .output_json import iso

        docs = [{**r.to_dict(), "started": iso(r.started)} for r in records]
        out.document({"ok": True, "runs_dir": str(store.home / "runs"), "runs": docs})
        return 0
    if not records:
        out.progress(f"no runs under {store.home / 'runs'}; start one with `ddpctl run`")
        return 0
    table = Table(title=f"runs under {store.home / 'runs'}", title_justify="left")
    # duration, cost, loss and accuracy only where a run has one: the table stays narrow without them
    shown_if = ("duration_s", "cost_usd", "loss", "accuracy")
    extra = [c for c in shown_if if any(getattr(r, c) is not None for r in records)]
    # the run id is what every follow-up command needs: never cut; the other columns give way first
    # and the result's first word (unfinished:, succeeded) is folded, never cut, either
    results = [r.result + (f": `ddpctl run --resume {r.run_id}`" if r.state == "unfinished" else "") for r in records]
    widest = {"run id": max(len(r.run_id) for r in records), "result": max(len(t.split()[0]) for t in results)}
    for col in ("run id", "job", "nodes", "cluster", "started", *extra, "result", "kept"):
        table.add_column(
            col.removesuffix("_s").removesuffix("_usd"),
            min_width=widest.get(col),
            no_wrap=col == "run id",
            overflow="fold" if col == "result" else "ellipsis",
        )
    for r, result in zip(records, results):
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started))
        shown = {
            "duration_s": "" if r.duration_s is None else _duration(r.duration_s),
            "cost_usd": "" if r.cost_usd is None else f"${r.cost_usd:,.2f}",
            "loss": "" if r.loss is None else f"{r.loss:.4g}",
            "accuracy": "" if r.accuracy is None else f"{r.accuracy:.2f}%",
        }
        kept = "outputs/" if r.outputs else ""
        table.add_row(r.run_id, r.job, str(r.nodes), r.cluster, started, *(shown[c] for c in extra), result, kept)
    out.table(table)
    return 0


def _duration(seconds: float) -> str:
    """12 s, 3m05s, 2h07m"""
    s = round(seconds)
    return f"{s} s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


@click.command(epilog=EXIT_CODES)
@click.argument("run_ids", metavar="[RUN_ID]...", nargs=-1, type=RunId("RUN_ID"))
@click.option(
    "--tail",
    "--last",
    "last",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    metavar="N",
    help="The table's last N step lines (0: all), as `logs --tail` (--last: its earlier name); every epoch "
    "line is shown.",
)
@click.option(
    "--png",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    metavar="FILE",
    help="Also draw the curves into FILE (.png, .svg, .pdf...; needs matplotlib): loss, accuracy and "
    "throughput against the step, one panel each; each log step a line, each epoch's mean a marker at "
    "the step it ended; several runs overlaid, one colour each.",
)
@click.option(
    "--csv",
    "csv_file",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True),
    default=None,
    metavar="FILE",
    help="Also write every line as CSV into FILE (- : stdout, instead of the table), for a spreadsheet, "
    "pandas or your own plots: one row a line, a run_id column, then every key any line has.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing new lines, one a line, while the run is alive (one run; --png, --csv, --json: when it ends).",
)
@json_option
def metrics(run_ids, last, png, csv_file, follow, as_json) -> int:
    """Show a run's metric lines (default: the last run started), or several runs' one after the
    other: loss, held-out accuracy, samples/s, tokens/s, MFU and GPU memory per log step and epoch,
    as the bundled jobs write them (a script of your own: training/metrics.py's log_metrics). They
    come into RUNS_DIR/<run id>/metrics.jsonl as the run goes (every few seconds) and whole when it
    ends.

    \b
    Examples:
      ddpctl metrics                       # the last run's
      ddpctl metrics --follow              # the last run's, then new lines until it ends
      ddpctl metrics r3f2a9c1d0e --png curves.png
      ddpctl metrics r3f2a9c1d0e r7b1c2d3e4f --png compare.png   # two runs overlaid
      ddpctl metrics r3f2a9c1d0e --csv metrics.csv
      ddpctl metrics r3f2a9c1d0e --csv - | column -s, -t
      ddpctl metrics --json | jq '.lines[-1].loss'
    """
    from rich.table import Table

    from ddpctl.infra.model import locks
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.runs import curves
    from ddpctl.infra.runs import metrics as run_metrics

    from .output import Output

    out = Output(as_json)
    if csv_file == "-" and as_json:
        raise UsageError("--csv - and --json both write to stdout: give --csv a FILE, or leave out --json")
    if follow and len(run_ids) > 1:
        raise UsageError(f"--follow follows one run, not {len(run_ids)}: give one RUN_ID (or none: the last run)")
    targets = curves.check_targets(png, csv_file)  # before anything is read or written
    store = open_store()
    runs = curves.load(store, run_ids)  # an unknown run among several: one line, nothing written
    if follow:
        run_id, path = runs[0].run_id, runs[0].file
        batches = run_metrics.follow(store.run_dir(run_id), lambda: locks.run_alive(store, run_id))
        if not as_json and targets == curves.Targets():  # as they come: every epoch line and the last --tail first
            said = 0
            for i, batch in enumerate(batches):
                for doc in run_metrics.shown(batch, last) if i == 0 else batch:
                    out.jobs.print(run_metrics.line_text(doc), highlight=False, markup=False)
                said += len(batch)
            if not said:
                out.progress(f"run {run_id} wrote no metrics ({path})")
            return 0
        for _ in batches:  # to the run's end
            pass
        runs = curves.load(store, [run_id])
    for phrase in curves.export(runs, targets):
        out.progress(f"{curves.named(runs)}: {phrase}")
    if as_json:
        docs = [_metrics_doc(store, r) for r in runs]
        out.document({"ok": True, **docs[0]} if len(docs) == 1 else {"ok": True, "runs": docs})
        return 0
    if targets.csv_stdout:
        return 0
    for run in runs:
        _say_slow(out, store, run.run_id)
        if not run.lines:
            out.progress(
                f"run {run.run_id} has no metrics ({run.file}): the bundled jobs write them, a script of yours "
                "through training/metrics.py's log_metrics"
            )
            continue
        rows = run_metrics.shown(run.lines, last)
        columns = [k for k in run_metrics.COLUMNS if any(k in doc for doc in rows)]
        table = Table(title=f"run {run.run_id}: {run.file}", title_justify="left")
        for key in columns:
            table.add_column(run_metrics.COLUMNS[key], justify="left" if key == "kind" else "right")
        for doc in rows:
            table.add_row(*(run_metrics.cell(key, doc.get(key)) for key in columns))
        out.table(table)
    return 0


def _metrics_doc(store, run) -> dict:
    """A run's ``metrics --json`` document: its lines, their summary, the nodes found slow while it ran."""
    from ddpctl.infra.runs import metrics as run_metrics
    from ddpctl.infra.runs.records import slow_nodes

    summary = run_metrics.summary(run.lines)
    slow = slow_nodes(store.run_dir(run.run_id))
    return {"run_id": run.run_id, "file": str(run.file), "summary": summary, "slow": slow, "lines": run.lines}


def _say_slow(out, store, run_id: str) -> None:
    """The nodes named slow while the run went (launch/watch.py), in one line, if any."""
    from ddpctl.infra.runs.records import slow_nodes

    slow = slow_nodes(store.run_dir(run_id))
    if slow:
        out.progress(f"run {run_id}: slow while it ran: {', '.join(slow)} (compute time over the others' median)")


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
@click.option("--no-health", is_flag=True, help="Leave out each node's health (its GPUs, their errors, a burn).")
@click.option(
    "--burn-seconds",
    type=FiniteFloatRange(0, 600),
    default=3,
    show_default=True,
    help="How long each node's GPUs multiply matrices in the health part (0: no burn).",
)
@json_option
def check(name, port, size_mb, no_bandwidth, no_health, burn_seconds, as_json) -> int:
    """Check a cluster's nodes' health and the links between them.

    Each node's health first: the GPUs nvidia-smi lists against those configure counted, their
    uncorrected ECC errors, the kernel log's Xid errors, the reasons their clocks are held down (a
    hardware or thermal slowdown), and a few seconds of matmul on every GPU at once, each compared
    with the cluster's others; a node without GPUs is "no GPU" and passes. Each unhealthy node is
    named with its reasons on one line.

    For every pair of nodes: TCP reachability on the rendezvous port (both ways), then a short
    all-reduce between the two, reported as bus bandwidth; the slowest link is named, and the
    transport each node's all-reduce used (efa, socket, ib; gloo on CPU nodes), as NCCL_DEBUG=INFO
    reports it. Inside each node with 2 or more GPUs, an all-reduce among its GPUs (one rank each;
    failing, a reason of the node's). What it did not measure is said (one node: no links between
    nodes). Exits 1 if any node cannot reach another, or is unhealthy.
    """
    from rich.table import Table

    from ddpctl.infra.runs.check import check_cluster

    from .output import Output

    out = Output(as_json)
    state, port, report = check_cluster(
        open_store(),
        name,
        port,
        out.progress,
        bandwidth=not no_bandwidth,
        size_mb=size_mb,
        health=not no_health,
        burn_s=burn_seconds,
    )
    if as_json:
        out.document({"cluster": state.name, "port": port, **report.to_dict()})
    else:
        pairs = sorted({tuple(sorted(k)) for k in [*report.reach, *report.bandwidth_gbps]})
        if pairs:
            table = Table(title=f"links of {state.name!r} (port {port})", title_justify="left")
            for col in ("link", "reachable", "all-reduce busbw"):
                table.add_column(col)
            for a, b in pairs:
                reach = [report.reach.get((a, b)), report.reach.get((b, a))]
                shown = "n/a (same host)" if reach == [None, None] else ("yes" if reach == ["ok", "ok"] else f"{reach}")
                bw = report.bandwidth_gbps.get((a, b)) or report.bandwidth_gbps.get((b, a))
                table.add_row(f"{a} <-> {b}", shown, "" if bw is None else f"{bw:.3f} GB/s")
            out.table(table)
        if report.in_node_gbps:
            table = Table(title=f"inside the nodes of {state.name!r}", title_justify="left")
            for col in ("node", "GPUs (ranks)", "all-reduce busbw", "backend"):
                table.add_column(col)
            for node, gbps in sorted(report.in_node_gbps.items()):
                backend = report.in_node_backend.get(node, "")
                shown = f"{backend} (no GPU used: CPU)" if backend == "gloo" else backend
                table.add_row(node, str(report.in_node_ranks.get(node, "")), f"{gbps:.3f} GB/s", shown)
            out.table(table)
        for note in report.notes:
            out.progress(note)
        slowest = report.slowest
        if slowest:
            out.progress(f"slowest link: {slowest[0][0]} <-> {slowest[0][1]} at {slowest[1]:.3f} GB/s")
        if report.transport:
            out.progress("transport: " + ", ".join(f"{n} {t}" for n, t in report.transport.items()))
        for verdict in report.health.values():  # one line a node: healthy, or why not
            out.progress(verdict.line())
            for note in verdict.notes:
                out.progress(f"  {verdict.node}: {note}")
    if report.unreachable:
        out.progress("unreachable: " + "; ".join(report.unreachable))
    if report.unhealthy:
        out.progress(f"unhealthy: {', '.join(report.unhealthy)}")
    return 0 if report.ok else 1
