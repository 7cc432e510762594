"""The registry of providers: each implements ``base.Provider`` in a module of its own.

Modules are imported only when their provider is used, so ``ddpctl --help`` stays light; the CLI's
``--provider`` choices are ``NAMES``. The options a provider takes are declared in a light module
of its own (``options.OPTIONS``), read without the provider: ``up``'s flags and the ``[cluster]``
keys of ``ddpctl.toml`` are ``all_options()``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..model.errors import UsageError

if TYPE_CHECKING:
    from ..model.spec import ClusterSpec
    from .base import Provider
    from .options import Option

#: Every provider, by the name users give to --provider, and the module that implements it.
_MODULES = {"local": "local", "onprem": "onprem", "aws": "aws", "pcluster": "pcluster"}
#: The module that declares a provider's options (``OPTIONS``); a provider not listed takes none.
_OPTIONS = {"aws": "aws.options", "pcluster": "pcluster.options"}
NAMES = tuple(_MODULES)


def checked_spec(spec: ClusterSpec) -> ClusterSpec:
    """``spec`` as its provider takes it: the provider known, nothing given that it does not take
    (``Provider.check_spec``), and its options each checked and the rest at their empty values
    (``Provider.take_options``). Where a cluster is planned, once (``lifecycle.clusters.plan_up``)."""
    from dataclasses import replace

    impl = get_provider(spec.provider)
    impl.check_spec(spec)
    return replace(spec, options=impl.take_options(spec.options))


def provider_class(name: str) -> type[Provider]:
    return type(get_provider(name))


def get_provider(name: str) -> Provider:
    _known(name)
    module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    return module.PROVIDER


def declared_options(name: str) -> tuple[Option, ...]:
    """The options provider ``name`` takes, as it declares them (its module is not imported)."""
    _known(name)
    if name not in _OPTIONS:
        return ()
    return importlib.import_module(f"{__name__}.{_OPTIONS[name]}").OPTIONS


def all_options() -> tuple[Option, ...]:
    """Every provider's options, each once, in the registry's order: ``up``'s flags, ``ddpctl.toml``'s keys."""
    from .options import merge

    return merge(*(declared_options(n) for n in NAMES))


def _known(name: str) -> None:
    if name not in _MODULES:
        raise UsageError(f"unknown provider {name!r}: choose one of {', '.join(NAMES)}")
