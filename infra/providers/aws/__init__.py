"""The AWS provider (EC2), one package: pure planning apart from the boto3 adapter.

    plan.py       the typed plan: resources, names, tags, the exact EC2 requests (pure)
    pricing.py    built-in prices, vCPUs/GPUs, vCPU quota codes (pure)
    keys.py       the cluster's ed25519 key, made locally
    ec2.py        the boto3 adapter (imported lazily) and AWS errors as one line
    provider.py   the verbs: plan, up, down, status, dry_run
    configure.py  inventory + playbooks/site.yml, as for on-prem hosts
    faults.py     DDPCTL_FAULT: test-only fault injection

Importing this package does not import boto3.
"""

from __future__ import annotations

from .provider import PROVIDER, AwsProvider

__all__ = ["PROVIDER", "AwsProvider"]
