"""How a provider declares the options it takes, once: the ``ClusterSpec.options`` key, the flag of
``ddpctl up``, the ``[cluster]`` key of ``ddpctl.toml`` (its TOML type), the default, the help text
and the format checks. The CLI builds its Click options and the config file its key types from
these declarations; ``ClusterSpec`` checks a value with them. Pure: no Click, no boto3.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model.errors import UsageError

#: The kinds an option's value takes: a TOML string, integer, boolean or table (a table is the
#: repeated ``KEY=VALUE`` flag on the command line, a ``dict[str, str]`` in the spec).
KINDS = (str, int, bool, dict)


@dataclass(frozen=True)
class Option:
    """One option a provider takes. Its empty value ("", 0, False, {}; ``default`` for a flag that
    is on unless turned off) means the provider's own default, which its plan fills in."""

    #: the key in ``ClusterSpec.options`` and in ``[cluster]`` of ``ddpctl.toml``; Click's parameter name
    name: str
    #: ``--region``; a flag on by default gives its pair, ``--configure/--no-configure``
    flag: str
    kind: type
    help: str
    metavar: str | None = None
    #: what ``up`` takes when it is not given (None: the kind's empty value)
    default: Any = None
    #: the format a given value matches, and what the refusal shows, e.g. "e.g. us-east-1"
    pattern: str = ""
    example: str = ""
    #: an integer's range (both ends allowed) and the unit the refusal names, e.g. "GB"
    bounds: tuple[int, int] | None = None
    unit: str = ""
    #: any other rule for a given value (raises ``UsageError``)
    check: Callable[[Any], None] | None = None
    #: another option this one needs when given, and why: ("subnet_id", "a subnet of that VPC ...")
    needs: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TypeError(f"option {self.name}: kind {self.kind!r} is not one of {KINDS}")

    @property
    def empty(self) -> Any:
        """The value when the option is not given."""
        return self.kind() if self.default is None else self.default

    @property
    def given_flag(self) -> str:
        """The flag that gives a non-default value: ``--no-configure`` of ``--configure/--no-configure``."""
        on, _, off = self.flag.partition("/")
        return off if off and self.empty else on

    def validate(self, value: Any) -> None:
        """Refuse a value of another type or format (whether it exists is the provider's check at ``up``)."""
        flag = self.flag.partition("/")[0]
        if isinstance(value, bool) != (self.kind is bool) or not isinstance(value, self.kind):
            raise UsageError(f"{flag} {value!r} is not {_KIND_NAMES[self.kind]}")
        if self.kind is dict and not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise UsageError(f"{flag} takes text keys and values (KEY=VALUE), not {value!r}")
        if value == self.empty:
            return
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise UsageError(f"invalid {flag} {value!r}: {self.example}")
        if self.bounds and not self.bounds[0] <= value <= self.bounds[1]:
            unit = f" ({self.unit})" if self.unit else ""
            raise UsageError(f"{flag} {value} is out of range: choose {self.bounds[0]} to {self.bounds[1]}{unit}")
        if self.check is not None:
            self.check(value)


_KIND_NAMES = {str: "text", int: "a whole number", bool: "true or false", dict: "a table of KEY=VALUE"}


def take(declared: tuple[Option, ...], given: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``declared`` from ``given`` (the caller has refused any other key), each
    checked, the ones not given at their empty value; then each one's ``needs``."""
    values = {o.name: given.get(o.name, o.empty) for o in declared}
    for option in declared:
        option.validate(values[option.name])
    by_name = {o.name: o for o in declared}
    for option in declared:
        if option.needs and values[option.name] != option.empty:
            other, why = by_name[option.needs[0]], option.needs[1]
            if values[other.name] == other.empty:
                raise UsageError(f"{option.given_flag} needs {other.given_flag} ({why})")
    return values


def merge(*declarations: tuple[Option, ...]) -> tuple[Option, ...]:
    """Every option of ``declarations``, each once, in order. Two providers that take the same
    option share its declaration (pcluster reuses aws's): two different ones by one name are a bug."""
    out: dict[str, Option] = {}
    for declared in declarations:
        for option in declared:
            if out.setdefault(option.name, option) != option:
                raise TypeError(f"option {option.name!r} is declared twice, differently")
    return tuple(out.values())
