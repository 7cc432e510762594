"""What the ParallelCluster provider records of the two resources it adds to the aws provider's
(whose records are ``aws/details.py``), typed (``infra/model/details.py``): its configuration file and
the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...model.details import Detail
from .config import Settings


@dataclass(frozen=True)
class ConfigDetail(Detail):
    """The configuration file: the ``DDPCTL_PCLUSTER_*`` settings as planned (the plan is rebuilt
    from them, not from today's environment), then what ``up`` resolved."""

    kind = "config"
    settings: dict[str, Any] = field(default_factory=dict)  # Settings.to_dict()
    ssh_cidr: str = ""
    zone: str = ""
    subnet_id: str = ""

    @classmethod
    def planned(cls, settings: Settings) -> ConfigDetail:
        return cls(settings=settings.to_dict())

    @property
    def plan_settings(self) -> Settings:
        return Settings.from_dict(self.settings)


@dataclass(frozen=True)
class ClusterDetail(Detail):
    """The cluster (its CloudFormation stack)."""

    kind = "cluster"
    region: str = ""
    create_called: bool = False  # from then on, `down` asks ParallelCluster to delete it
    status: str = ""  # create-cluster's message
