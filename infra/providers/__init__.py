"""Providers: each implements the same verbs (see ``base.Provider``) in a module of its own.

Modules are imported only when their provider is used, so ``ddpctl --help`` stays light.
"""

from __future__ import annotations

import importlib

from ..errors import UsageError
from .base import Provider

_MODULES = {"local": "local", "onprem": "onprem", "aws": "aws", "pcluster": "pcluster"}


def get_provider(name: str) -> Provider:
    if name not in _MODULES:
        raise UsageError(f"provider {name!r} is not available yet: use --provider local, onprem, aws or pcluster")
    module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    return module.PROVIDER
