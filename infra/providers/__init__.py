"""The registry of providers: each implements ``base.Provider`` in a module of its own.

Modules are imported only when their provider is used, so ``ddpctl --help`` stays light; the CLI's
``--provider`` choices are ``NAMES``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from .base import Provider

#: Every provider, by the name users give to --provider, and the module that implements it.
_MODULES = {"local": "local", "onprem": "onprem", "aws": "aws", "pcluster": "pcluster"}
NAMES = tuple(_MODULES)


def provider_class(name: str) -> type[Provider]:
    return type(get_provider(name))


def get_provider(name: str) -> Provider:
    if name not in _MODULES:
        raise UsageError(f"unknown provider {name!r}: choose one of {', '.join(NAMES)}")
    module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    return module.PROVIDER
