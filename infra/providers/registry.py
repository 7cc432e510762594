"""The registry of providers (re-exported by the package): every provider's name and module, its
options, and the checks that need to know them all (another provider's options, which providers can
do a thing). Provider modules are imported only when their provider is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..model.errors import UsageError
from .options import Option, merge

if TYPE_CHECKING:  # annotations only: base.py imports this module (tests/unit/test_layers.py skips these)
    from ..model.spec import ClusterSpec
    from .base import Provider

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
    module = importlib.import_module(f"{__package__}.{_MODULES[name]}")
    return module.PROVIDER


def declared_options(name: str) -> tuple[Option, ...]:
    """The options provider ``name`` takes, as it declares them (its module is not imported)."""
    _known(name)
    if name not in _OPTIONS:
        return ()
    return importlib.import_module(f"{__package__}.{_OPTIONS[name]}").OPTIONS


def all_options() -> tuple[Option, ...]:
    """Every provider's options, each once, in the registry's order: ``up``'s flags, ``ddpctl.toml``'s keys."""
    return merge(*(declared_options(n) for n in NAMES))


def _known(name: str) -> None:
    if name not in _MODULES:
        raise UsageError(f"unknown provider {name!r}: choose one of {', '.join(NAMES)}")


def check_given(given: Mapping[str, Any]) -> None:
    """Options the user gave (a flag, a ``[cluster]`` key of ``ddpctl.toml``, ``ddpctl.up(options=)``):
    an empty text is refused, not taken as "not given" (``--instance-type ''`` from an unset shell
    variable would otherwise plan the default type). Leave the option out for the provider's default."""
    for option in all_options():
        value = given.get(option.name)
        if option.kind is str and isinstance(value, str) and not value.strip():
            flag = option.flag.partition("/")[0]
            hint = f" ({option.example})" if option.example else ""
            raise UsageError(
                f"{flag} {value!r} is empty: give a value{hint}, or leave {flag} out for the provider's default"
            )


def who(can: Callable[[type[Provider]], bool], sep: str = " or ") -> str:
    """The providers that ``can``, for a message: "aws or pcluster"."""
    names = [n for n in NAMES if can(provider_class(n))]
    return ", ".join(names[:-1]) + sep + names[-1] if len(names) > 1 else "".join(names)
