"""The AWS provider (EC2), one package; its network, key and AWS plumbing serve the pcluster
provider too.

    options.py     its options (flags, ddpctl.toml keys, format checks), declared once (pure)
    plan.py        the typed plan: resources, names, tags, the exact EC2 requests (pure)
    images.py      which AMI for which GPU, and the NVIDIA driver plan (pure)
    pricing.py     built-in prices, vCPUs/GPUs, vCPU quota codes (pure)
    defaults.py    the spec's AWS defaults (region checked) and this machine's public address
    boto.py        boto3 and botocore, imported here only, on first use
    errors.py      AWS errors as one line to act on
    ec2.py         ``Aws``: one region's clients and read-only look-ups
    steps.py       record the step in the state, then create: the one pattern of both providers' up
    network.py     VPC, internet gateway, route, subnet, key pair: their check, creation and teardown
    instances.py   security group, placement group, RunInstances, waits, termination
    keys.py        the cluster's ed25519 key, made locally
    preflight.py   what up checks against AWS before anything is made
    dry_run.py     up --dry-run: the checks, then each create call with DryRun=True
    up.py          the creation sequence, step by step
    provider.py    the verbs: plan, up, down, status, dry_run, configure
    configure.py   inventory + playbooks/site.yml, as for on-prem hosts
    faults.py      DDPCTL_FAULT: test-only fault injection

Importing this package imports neither boto3 nor the provider (``PROVIDER`` is loaded when first used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .provider import PROVIDER, AwsProvider

__all__ = ["PROVIDER", "AwsProvider"]


def __getattr__(name: str) -> Any:
    """The provider, imported on first use: its ``options`` module is read without it (``--help``)."""
    if name in __all__:
        from . import provider

        return getattr(provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
