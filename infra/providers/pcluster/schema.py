"""The configuration checked by aws-parallelcluster's own schema, offline, before anything exists.

The package lives in its own venv, so its ``ClusterSchema`` runs there, in a subprocess of the
``pcluster`` script's interpreter: the YAML goes in on stdin, one JSON verdict comes out. The
subprocess gets no AWS credentials and no endpoint: ``ClusterSchema.load`` is offline (it needs
only a region, for defaults). A refused configuration is one line of ``Path.To.Field: message``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass

from ...model.errors import DdpctlError, UsageError
from ...node_programs import argv as program_argv
from .cli import INSTALL_HINT, Install, one_line
from .config import flatten_errors

TIMEOUT_S = 120.0


@dataclass(frozen=True)
class SchemaVerdict:
    version: str  # aws-parallelcluster's version
    queue: str
    instance_types: tuple[str, ...]


def validate(config_yaml: str, cluster_name: str, install: Install) -> SchemaVerdict:
    """Load the configuration with ``ClusterSchema``; raise one line naming each refused field."""
    try:
        with tempfile.TemporaryDirectory(prefix="ddpctl-pcluster-schema-") as tmp:
            # Importing pcluster opens its log file: keep it (and any ~) out of the user's home.
            env = {
                "PATH": "/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "HOME": tmp,
                "AWS_EC2_METADATA_DISABLED": "true",
                "PCLUSTER_LOG_FILE": f"{tmp}/pcluster-cli.log",
            }
            proc = subprocess.run(
                program_argv(install.python, "pcluster_schema", cluster_name),
                input=config_yaml,
                capture_output=True,
                text=True,
                env=env,
                timeout=TIMEOUT_S,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DdpctlError(
            f"cannot run aws-parallelcluster's schema with {install.python} ({exc}): {INSTALL_HINT}"
        ) from None
    try:
        verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        detail = one_line(lines[-1]) if lines else f"exit status {proc.returncode}"
        raise DdpctlError(f"aws-parallelcluster's schema check failed to run ({detail}): {INSTALL_HINT}") from None
    if verdict.get("ok"):
        return SchemaVerdict(
            version=str(verdict.get("version", "")),
            queue=str(verdict.get("queue", "")),
            instance_types=tuple(verdict.get("instance_types", ())),
        )
    version = f" {verdict['version']}" if verdict.get("version") else ""
    if "crash" in verdict:
        raise DdpctlError(
            f"aws-parallelcluster{version} could not check the configuration: {one_line(verdict['crash'], 300)}"
        )
    problems = flatten_errors(verdict.get("errors", {}))
    raise UsageError(
        f"the ParallelCluster configuration is invalid (aws-parallelcluster{version} schema): "
        + one_line("; ".join(problems), 600)
    )
