"""On the head node: a lost node of its cluster replaced there, with the head's own AWS access.

    python -m ddpctl.infra.runs.head_replace HOME CLUSTER NODE

The run's supervisor on the head runs it (``launch/head_agent.py``'s ``replace_lost``), as this
machine's ``execute`` asks the provider for a lost node: ``HOME`` is the state home the provider
sent there (aws: ``providers/aws/head_home.py``, the cluster alone, as the head sees it); the node is
replaced if its machine was taken back, or, still there, is unhealthy (the health query, asked of it
over the cluster's SSH: ``health_in_runs.lost_node_health``). The AWS calls are signed with whatever
botocore finds on the head: its instance profile's role (``up --head-instance-profile``; what it may do
is docs/aws-head-iam-policy.json), never a credential copied there. Progress goes to stdout line by
line (``ddpctl: ...``); the last line is JSON: the node's new instance and private address
(``"replaced": true``), ``"replaced": false`` where it was not replaced (it is started again where it
was), or, exit status 1, the ``"error"`` in one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..model.errors import DdpctlError
from ..model.store import StateStore
from ..providers.registry import get_provider
from .health_in_runs import lost_node_health


def replace_node(home: Path, cluster: str, node: str, progress) -> dict:
    """Replace ``node`` if its machine was taken back or is unhealthy; what became of it."""
    store = StateStore(home)
    state = store.load(cluster)
    provider = get_provider(state.spec.provider)
    done = provider.replace_lost_nodes(state, store, [node], progress, lost_node_health(store, cluster, progress))
    if done is None:
        return {"node": node, "replaced": False}
    new = next(n for n in done.nodes if n.name == node)
    return {"node": node, "replaced": True, "instance": provider.machine_of(done, node), "host": new.host}


def main(argv: list[str] | None = None) -> int:
    home, cluster, node = (sys.argv[1:] if argv is None else argv)[:3]

    def progress(text: str) -> None:
        print(f"ddpctl: {text}", flush=True)

    try:
        doc = replace_node(Path(home), cluster, node, progress)
    except DdpctlError as exc:
        progress(f"{node} not replaced: {exc}")
        print(json.dumps({"node": node, "error": str(exc)}), flush=True)
        return 1
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
