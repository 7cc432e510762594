"""Load a ParallelCluster configuration with aws-parallelcluster's own ``ClusterSchema``, offline.

Runs in the venv of the ``pcluster`` script (its imports are that venv's: PyYAML, marshmallow,
pcluster). argv: CLUSTER_NAME; stdin: the YAML. Prints one JSON document: ``{"ok": true,
"version", "scheduler", "queue", "instance_types"}``, or ``{"ok": false, "version", "errors"}``
(the schema's refusals) or ``{"ok": false, ["version",] "crash"}``. The schema needs a region
for its defaults: the configuration's, else us-east-1.
"""

from __future__ import annotations

import json
import os
import sys

import yaml


def main(argv: list[str] | None = None) -> None:
    cluster_name = (sys.argv[1:] if argv is None else argv)[0]
    doc = yaml.safe_load(sys.stdin.read())
    os.environ["AWS_DEFAULT_REGION"] = (doc or {}).get("Region") or "us-east-1"  # the schema's defaults need one
    try:
        from marshmallow import ValidationError
        from pcluster.schemas.cluster_schema import ClusterSchema
        from pcluster.utils import get_installed_version
    except ImportError as exc:
        print(json.dumps({"ok": False, "crash": f"cannot import aws-parallelcluster: {exc}"}))
        return
    try:
        config = ClusterSchema(cluster_name=cluster_name).load(doc)
    except ValidationError as exc:
        print(json.dumps({"ok": False, "version": get_installed_version(), "errors": exc.messages}, default=str))
    except Exception as exc:
        crash = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"ok": False, "version": get_installed_version(), "crash": crash}))
    else:
        queue = config.scheduling.queues[0]
        verdict = {
            "ok": True,
            "version": get_installed_version(),
            "scheduler": config.scheduling.scheduler,
            "queue": queue.name,
            "instance_types": [t for r in queue.compute_resources for t in r.instance_types],
        }
        print(json.dumps(verdict))


if __name__ == "__main__":
    main()
