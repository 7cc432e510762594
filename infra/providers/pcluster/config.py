"""The ParallelCluster 3 cluster configuration, as a pure function of typed values.

``cluster_config(spec, resolved, settings, tags)`` is the whole YAML document ``pcluster
create-cluster`` gets: no network, no AWS, no pcluster import. It is unit-tested field by field,
and validated by the aws-parallelcluster package's own schema (``schema.py``) before anything is
created.

Security settings are not optional: SSH to the head node only from ``resolved.ssh_cidr`` (a /32),
IMDSv2 only on every node and IMDS secured on the head node (only root reaches the instance
profile's credentials), every root volume (and the shared volume) encrypted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model.errors import UsageError

OS = "ubuntu2204"
DEFAULT_USER = "ubuntu"  # ParallelCluster's login user on its Ubuntu images
DEFAULT_HEAD_INSTANCE_TYPE = "t3.large"
QUEUE = "gpu"
SHARED_MOUNT = "/shared"
#: A syntactically valid subnet id for the offline schema check while the real subnet does not exist yet.
PLACEHOLDER_SUBNET = "subnet-00000000000000000"
NAME_MAX = 25  # ParallelCluster's limit for queue and compute resource names

#: Settings ParallelCluster needs that the cluster spec has no flag for (environment variables).
ENV_HEAD_INSTANCE_TYPE = "DDPCTL_PCLUSTER_HEAD_INSTANCE_TYPE"
ENV_SHARED_GB = "DDPCTL_PCLUSTER_SHARED_GB"
ENV_S3_BUCKET = "DDPCTL_PCLUSTER_S3_BUCKET"
ENV_SUPPRESS = "DDPCTL_PCLUSTER_SUPPRESS_VALIDATORS"


@dataclass(frozen=True)
class Settings:
    """ParallelCluster-only settings (from the environment: see ``settings_from_env``)."""

    head_instance_type: str = DEFAULT_HEAD_INSTANCE_TYPE
    #: > 0: an encrypted gp3 EBS volume of this size, NFS-shared by the head node at /shared
    shared_gb: int = 0
    #: "" = ParallelCluster's own bucket (parallelcluster-<hash>-v1-do-not-delete, kept after delete)
    custom_s3_bucket: str = ""
    #: validators create-cluster skips (`ALL` or `type:NAME`); empty in real use
    suppress_validators: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "head_instance_type": self.head_instance_type,
            "shared_gb": self.shared_gb,
            "custom_s3_bucket": self.custom_s3_bucket,
            "suppress_validators": list(self.suppress_validators),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        return cls(
            head_instance_type=data.get("head_instance_type", DEFAULT_HEAD_INSTANCE_TYPE),
            shared_gb=int(data.get("shared_gb", 0)),
            custom_s3_bucket=data.get("custom_s3_bucket", ""),
            suppress_validators=tuple(data.get("suppress_validators", ())),
        )


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """The DDPCTL_PCLUSTER_* variables, checked (a bad value is one line naming the variable)."""
    head = env.get(ENV_HEAD_INSTANCE_TYPE, "") or DEFAULT_HEAD_INSTANCE_TYPE
    if not re.match(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$", head):
        raise UsageError(f"invalid {ENV_HEAD_INSTANCE_TYPE}={head!r}: an EC2 instance type, e.g. t3.large")
    raw_gb = env.get(ENV_SHARED_GB, "") or "0"
    try:
        shared_gb = int(raw_gb)
    except ValueError:
        shared_gb = -1
    if shared_gb != 0 and not 1 <= shared_gb <= 16384:
        raise UsageError(
            f"invalid {ENV_SHARED_GB}={raw_gb!r}: a size in GB from 1 to 16384 (0 or unset: no shared volume)"
        )
    bucket = env.get(ENV_S3_BUCKET, "")
    if bucket and not re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", bucket):
        raise UsageError(f"invalid {ENV_S3_BUCKET}={bucket!r}: an S3 bucket name (versioning enabled)")
    suppress = tuple(env.get(ENV_SUPPRESS, "").split())
    for item in suppress:
        if not re.match(r"^(ALL|type:[A-Za-z0-9]+)$", item):
            raise UsageError(f"invalid {ENV_SUPPRESS} item {item!r}: ALL or type:VALIDATOR, separated by spaces")
    return Settings(head_instance_type=head, shared_gb=shared_gb, custom_s3_bucket=bucket, suppress_validators=suppress)


@dataclass(frozen=True)
class Resolved:
    """What is known only once the network and key exist (or placeholders for the offline check)."""

    subnet_id: str
    key_name: str
    ssh_cidr: str


@dataclass(frozen=True)
class ComputeFleet:
    """The Slurm queue's one compute resource."""

    instance_type: str
    count: int  # MinCount = MaxCount: static nodes, up (and billed) from `up` to `down`
    volume_gb: int
    spot: bool
    placement_group: bool
    ami: str = ""  # "" = ParallelCluster's official image for the OS


def compute_resource_name(instance_type: str) -> str:
    """'p3.2xlarge' -> 'p3-2xlarge' (lowercase letters, digits and '-', at most 25 characters)."""
    return re.sub(r"[^a-z0-9-]", "-", instance_type.lower())[:NAME_MAX].rstrip("-")


def cluster_config(
    *,
    region: str,
    fleet: ComputeFleet,
    resolved: Resolved,
    settings: Settings,
    tags: Mapping[str, str],
) -> dict[str, Any]:
    """The ParallelCluster 3 configuration (a dict in the YAML's key order)."""
    image: dict[str, Any] = {"Os": OS}
    if fleet.ami:
        image["CustomAmi"] = fleet.ami  # an AMI built with `pcluster build-image`
    config: dict[str, Any] = {"Region": region, "Image": image, "Imds": {"ImdsSupport": "v2.0"}}
    if settings.custom_s3_bucket:
        config["CustomS3Bucket"] = settings.custom_s3_bucket
    config["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    config["HeadNode"] = {
        "InstanceType": settings.head_instance_type,
        "Networking": {"SubnetId": resolved.subnet_id},
        "Ssh": {"KeyName": resolved.key_name, "AllowedIps": resolved.ssh_cidr},
        "Imds": {"Secured": True},
        "LocalStorage": {"RootVolume": {"Encrypted": True, "VolumeType": "gp3"}},
    }
    networking: dict[str, Any] = {"SubnetIds": [resolved.subnet_id]}
    if fleet.placement_group:
        networking["PlacementGroup"] = {"Enabled": True}
    config["Scheduling"] = {
        "Scheduler": "slurm",
        "SlurmQueues": [
            {
                "Name": QUEUE,
                "CapacityType": "SPOT" if fleet.spot else "ONDEMAND",
                "ComputeResources": [
                    {
                        "Name": compute_resource_name(fleet.instance_type),
                        "InstanceType": fleet.instance_type,
                        "MinCount": fleet.count,
                        "MaxCount": fleet.count,
                    }
                ],
                "ComputeSettings": {
                    "LocalStorage": {"RootVolume": {"Size": fleet.volume_gb, "Encrypted": True, "VolumeType": "gp3"}}
                },
                "Networking": networking,
            }
        ],
    }
    if settings.shared_gb:
        config["SharedStorage"] = [
            {
                "Name": "shared",
                "StorageType": "Ebs",
                "MountDir": SHARED_MOUNT,
                "EbsSettings": {
                    "VolumeType": "gp3",
                    "Size": settings.shared_gb,
                    "Encrypted": True,
                    "DeletionPolicy": "Delete",  # deleted with the cluster: `down` leaves nothing
                },
            }
        ]
    return config


def to_yaml(config: Mapping[str, Any]) -> str:
    import yaml

    return "# written by ddpctl: the ParallelCluster 3 configuration of this cluster\n" + yaml.safe_dump(
        dict(config), sort_keys=False, default_flow_style=False
    )


def flatten_errors(messages: Any, path: str = "") -> list[str]:
    """marshmallow's nested error dict as ``Path.To[0].Field: message`` lines."""
    if isinstance(messages, Mapping):
        out: list[str] = []
        for key, value in messages.items():
            if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
                sub = f"{path}[{key}]"
            elif key == "_schema":
                sub = path
            else:
                sub = f"{path}.{key}" if path else str(key)
            out += flatten_errors(value, sub)
        return out
    if isinstance(messages, (list, tuple)):
        if all(isinstance(m, str) for m in messages):
            return [f"{path or 'configuration'}: {' '.join(messages)}"]
        out = []
        for item in messages:
            out += flatten_errors(item, path)
        return out
    return [f"{path or 'configuration'}: {messages}"]
