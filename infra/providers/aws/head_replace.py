"""On the head node: a lost node of its cluster replaced there, with the head's own AWS access.

    python -m ddpctl.infra.providers.aws.head_replace HOME CLUSTER NODE

``HOME`` is the state home ``head_home.py`` sent (the cluster alone, as the head sees it); the AWS
calls are ``spot.replace_lost``'s, signed with whatever botocore finds on the head: its instance
profile's role (``up --head-instance-profile``; what it may do is docs/aws-head-iam-policy.json), never
a credential copied there. Progress goes to stderr line by line; stdout's last line is JSON: the
node's new instance and private address (``"replaced": true``), ``"replaced": false`` where its
instance is still there (it is started again where it was), or, exit status 1, the ``"error"`` in one
line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ...model.errors import DdpctlError
from ...model.store import StateStore
from . import head_home, spot
from .details import InstancesDetail
from .errors import HEAD_POLICY_DOC, aws_errors
from .provider import PROVIDER
from .steps import only


def replace_node(home: Path, cluster: str, node: str, progress) -> dict:
    """Replace ``node`` if EC2 took its instance back; what became of it. A call the head's role may
    not make names the head's policy."""
    store = StateStore(home)
    state = head_home.settle(store, cluster)
    plan = PROVIDER.aws_plan(state, store)
    with aws_errors(plan.region, HEAD_POLICY_DOC):
        done = spot.replace_lost(state, store, plan, [node], progress) if plan.spot else None
    if done is None:
        return {"node": node, "replaced": False}
    new = next(n for n in done.nodes if n.name == node)
    instance = InstancesDetail.of(only(done, "instances")).nodes[node]
    return {"node": node, "replaced": True, "instance": instance, "host": new.host}


def main(argv: list[str] | None = None) -> int:
    home, cluster, node = (sys.argv[1:] if argv is None else argv)[:3]

    def progress(text: str) -> None:
        print(f"ddpctl: {text}", file=sys.stderr, flush=True)

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
