"""The pcluster provider's options: the aws provider's (``aws/options.py``), the same declarations,
less ``--iam-instance-profile`` and ``--head-instance-profile``, which it does not pass to ParallelCluster.
Pure: no boto3."""

from __future__ import annotations

from ..aws.options import OPTIONS as AWS_OPTIONS
from ..options import Option

#: the aws provider's options that ParallelCluster's own configuration has instead
NOT_TAKEN = ("iam_instance_profile", "head_instance_profile")
OPTIONS: tuple[Option, ...] = tuple(o for o in AWS_OPTIONS if o.name not in NOT_TAKEN)
