"""Providers: each implements ``base.Provider`` in a module of its own; ``registry`` knows them all.

Modules are imported only when their provider is used, so ``ddpctl --help`` stays light; the CLI's
``--provider`` choices are ``NAMES``. The options a provider takes are declared in a light module
of its own (``options.OPTIONS``), read without the provider: ``up``'s flags and the ``[cluster]``
keys of ``ddpctl.toml`` are ``all_options()``. May import ``model/``, ``tools/``, ``node_programs/``,
``hosts/`` and ``launch/``.
"""

from __future__ import annotations

from .registry import NAMES, all_options, check_given, checked_spec, declared_options, get_provider, provider_class

__all__ = ["NAMES", "all_options", "check_given", "checked_spec", "declared_options", "get_provider", "provider_class"]
