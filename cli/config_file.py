"""``ddpctl.toml``: defaults for the command-line options, fed to Click's ``default_map``.

    [cluster]            # ddpctl up (and run, when it brings a local cluster up)
    name = "default"
    provider = "local"
    nodes = 2
    nproc_per_node = 1
    port = 29500
    python = "/opt/venv/bin/python"
    inventory = "hosts.ini"   # --provider onprem
    region = "us-west-2"      # --provider aws (also: az, instance_type, volume_gb, ami, spot,
                              # ssh_cidr, vpc_id, subnet_id, ssh_user, private_ip, iam_instance_profile)

    [cluster.env]        # extra environment for every rank
    NCCL_DEBUG = "INFO"

    [cluster.playbook_vars]   # variables for playbooks/site.yml (onprem, aws, pcluster)
    nvidia_cuda_version = "12.8"

    [run]                # ddpctl run
    nodes = 2
    max_restarts = 1
    snapshot_dir = "s3://my-bucket/snapshots"

Flags given on the command line win. Unknown sections or keys are refused.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ddpctl.infra.errors import UsageError

CLUSTER_KEYS = {"name", "provider", "nodes", "nproc_per_node", "port", "python", "env", "inventory",
                # aws
                "region", "az", "instance_type", "volume_gb", "ami", "spot", "ssh_cidr", "vpc_id", "subnet_id",
                "ssh_user", "private_ip", "iam_instance_profile", "configure", "down_on_failure",
                "playbook_vars"}  # fmt: skip
RUN_KEYS = {"name", "nodes", "nproc_per_node", "max_restarts", "port", "python", "env", "snapshot_dir"}


def load_default_map(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - {"cluster", "run"}
    if unknown:
        raise UsageError(f"unknown section(s) {sorted(unknown)} in {path}: use [cluster] and [run]")
    cluster = _section(data.get("cluster", {}), CLUSTER_KEYS, "cluster", path)
    run = _section(data.get("run", {}), RUN_KEYS, "run", path)
    # A run that brings its own cluster up takes the cluster's defaults too.
    run_defaults = {k: v for k, v in cluster.items() if k in RUN_KEYS} | run
    down = _only(cluster, {"name", "region"})
    return {"up": cluster, "run": run_defaults, "down": down, "status": _only(cluster, {"name"}), "check": _only(cluster, {"name"})}


def _section(section: dict[str, Any], allowed: set[str], title: str, path: Path) -> dict[str, Any]:
    unknown = set(section) - allowed
    if unknown:
        raise UsageError(f"unknown key(s) {sorted(unknown)} in [{title}] of {path}: allowed are {sorted(allowed)}")
    out = dict(section)
    for key in ("env", "playbook_vars"):  # a table -> the repeated --env / --playbook-var KEY=VALUE option
        if key in out:
            out[key] = [f"{k}={v}" for k, v in out[key].items()]
    return out


def _only(section: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k in keys}
