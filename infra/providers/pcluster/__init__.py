"""The ParallelCluster provider: a Slurm cluster on AWS, made by the real ``pcluster`` CLI.

    config.py     the ParallelCluster 3 configuration from the cluster spec (pure)
    plan.py       the typed plan: the aws provider's network/key plan + the config and the cluster (pure)
    schema.py     the configuration checked by aws-parallelcluster's own schema, offline, in its venv
    cli.py        the pcluster CLI adapter: finding it, JSON in and out, errors as one line
    network.py    the VPC/subnet/key pair through the aws provider's boto3 adapter
    provider.py   the verbs: plan, up, down, status, dry_run

aws-parallelcluster is an optional dependency installed in a venv of its own (it pins older attrs
and packaging than ddpctl's); ``$DDPCTL_PCLUSTER`` or PATH finds it. Importing this package
imports neither boto3 nor pcluster.
"""

from __future__ import annotations

from .provider import PROVIDER, PclusterProvider

__all__ = ["PROVIDER", "PclusterProvider"]
