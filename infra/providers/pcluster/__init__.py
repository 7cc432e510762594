"""The ParallelCluster provider: a Slurm cluster on AWS, made by the real ``pcluster`` CLI.

    options.py    its options: the aws provider's, less --iam-instance-profile (pure)
    config.py     the ParallelCluster 3 configuration from the cluster spec (pure)
    plan.py       the typed plan: the aws provider's network/key plan + the config and the cluster (pure)
    schema.py     the configuration checked by aws-parallelcluster's own schema, offline, in its venv
    cli.py        the pcluster CLI adapter: finding it, JSON in and out, errors as one line
    compute.py    the compute fleet as describe-cluster-instances reports it; check's targets
    waits.py      the waits on ParallelCluster: create, the compute fleet, delete
    dry_run.py    up --dry-run: the schema check, then create-cluster --dryrun
    up.py         the creation sequence (the network and key pair through aws/network.py), the head node
    provider.py   the verbs: plan, up, down, status, dry_run, configure, check_targets

It uses the aws provider's shared modules (plan, network, steps, ec2, errors, defaults, keys,
configure, pricing), never its provider. aws-parallelcluster is an optional dependency installed in
a venv of its own (it pins older attrs and packaging than ddpctl's); ``$DDPCTL_PCLUSTER`` or PATH
finds it. Importing this package imports neither boto3 nor pcluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .provider import PROVIDER, PclusterProvider

__all__ = ["PROVIDER", "PclusterProvider"]


def __getattr__(name: str) -> Any:
    """The provider, imported on first use: its ``options`` module is read without it (``--help``)."""
    if name in __all__:
        from . import provider

        return getattr(provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
