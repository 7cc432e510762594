"""AWS API calls and controller-side time of `ddpctl up` and `ddpctl down` (aws provider), against
a moto server on a loopback port, for several cluster sizes.

    python -m bench.aws_calls [--nodes 2 16] [--repeat 3]     (from the repository's root)

Starts its own moto server (moto[server], from the test extra; tests/support/moto.py, seeded with
the images the tests use) unless AWS_ENDPOINT_URL is set.
Calls are counted with a botocore ``before-call`` hook on every client ddpctl makes
(``ec2.CLIENT_HOOKS``): one count per API call, waiter polls and paginator pages included, HTTP
retries not. up runs with --no-configure (moto's instances are not hosts), so the times are
ddpctl's own work plus moto's answers: no boot, no SSH, no playbook. Goal: the number of calls
does not grow with the number of nodes (one RunInstances with MinCount = MaxCount, one
TerminateInstances, one DescribeInstances per poll).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.moto import running_moto
from tests.support.specs import cluster_spec


@dataclass
class Measurement:
    nodes: int
    up_calls: int
    down_calls: int
    up_s: float
    down_s: float
    by_op: Counter = field(default_factory=Counter)


def measure(nodes: int, home: Path) -> Measurement:
    """One `up` (no configure) and one `down` through ddpctl's library, in this process."""
    from ddpctl.infra.lifecycle import clusters
    from ddpctl.infra.model.store import StateStore
    from ddpctl.infra.providers.aws import ec2

    counts: dict[str, Counter] = {"up": Counter(), "down": Counter()}
    phase = ["up"]

    def hook(client) -> None:
        def count(model, **_kw) -> None:
            counts[phase[0]][model.name] += 1

        client.meta.events.register("before-call", count)

    def quiet(_message: str) -> None:
        pass

    ec2.CLIENT_HOOKS.append(hook)
    try:
        store = StateStore(home)
        spec = cluster_spec(
            name=f"bench{nodes}",
            provider="aws",
            nodes=nodes,
            options={"region": "us-east-1", "ssh_cidr": "203.0.113.7/32", "configure": False},
        )
        start = time.perf_counter()
        provider, state = clusters.plan_up(spec, store)
        clusters.up(provider, state, store, quiet)
        up_s = time.perf_counter() - start
        phase[0] = "down"
        start = time.perf_counter()
        clusters.down(spec.name, store, quiet)
        down_s = time.perf_counter() - start
    finally:
        ec2.CLIENT_HOOKS.remove(hook)
    return Measurement(
        nodes=nodes,
        up_calls=sum(n for op, n in counts["up"].items() if op not in PER_NODE),
        down_calls=sum(counts["down"].values()),
        up_s=up_s,
        down_s=down_s,
        by_op=counts["up"] + counts["down"],
    )


#: Calls EC2 has no batched form of: one per instance, by necessity (the host keys in each console).
PER_NODE = ("GetConsoleOutput",)


def moto_url(tmp: Path, stack: contextlib.ExitStack) -> str:
    """AWS_ENDPOINT_URL if set, else a moto server of our own (stopped with ``stack``)."""
    if url := os.environ.get("AWS_ENDPOINT_URL", ""):
        return url
    if not Path(sys.executable).with_name("moto_server").exists():
        sys.exit("moto_server not found next to this Python: pip install 'moto[server]' (the test extra)")
    return stack.enter_context(running_moto(tmp)).url


def reset(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url + "/moto-api/reset", data=b"", method="POST"), timeout=10).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; times are medians")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddpctl-bench-aws-") as tmp_dir, contextlib.ExitStack() as stack:
        tmp = Path(tmp_dir)
        url = moto_url(tmp, stack)
        os.environ.update(
            AWS_ENDPOINT_URL=url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=str(tmp / "none"),
            AWS_SHARED_CREDENTIALS_FILE=str(tmp / "none"),
        )
        os.environ.pop("DDPCTL_FAULT", None)
        rows = []
        for n in args.nodes:
            runs = []
            for i in range(args.repeat):
                reset(url)
                runs.append(measure(n, tmp / f"home-{n}-{i}"))
            rows.append(runs)
    print(f"{'nodes':>5} | {'up calls':>8} | {'down calls':>10} | {'up s':>6} | {'down s':>6}")
    print("-" * 48)
    for runs in rows:
        m = runs[0]
        up_s = statistics.median(r.up_s for r in runs)
        down_s = statistics.median(r.down_s for r in runs)
        print(f"{m.nodes:>5} | {m.up_calls:>8} | {m.down_calls:>10} | {up_s:>6.2f} | {down_s:>6.2f}")
    print()
    last = rows[-1][0]
    print(f"calls by operation, {last.nodes} nodes (up + down):")
    for op, n in sorted(last.by_op.items()):
        print(f"  {op:<34} {n}")
    grows = len({(r[0].up_calls, r[0].down_calls) for r in rows}) > 1
    print(f"\n{', '.join(PER_NODE)}: one per node (EC2 has no batched form), not counted above")
    print("calls per node: " + ("GROW with the number of nodes" if grows else "constant (batched)"))
    sys.exit(1 if grows else 0)


if __name__ == "__main__":
    main()
