"""A cluster spec as `up` plans it: the spec's own checks, then its provider's (``checked_spec``)."""

from __future__ import annotations

from typing import Any

from ddpctl.infra.model.spec import ClusterSpec
from ddpctl.infra.providers import checked_spec


def cluster_spec(**kwargs: Any) -> ClusterSpec:
    return checked_spec(ClusterSpec(**kwargs))
