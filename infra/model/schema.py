"""Reading a record that ddpctl wrote (a cluster's state file, a run's ``options.json``) back into
typed values, every field checked once, here (pure): a string is a string, a count a whole number
in its range, a time a finite number of epoch seconds, a word one of its enum's, a list a list of
records. What is wrong is a ``SchemaError`` naming the field (``resources[1].id``) and what it
holds, never a ``TypeError`` deep in the command that meets it later.

    doc = Doc(data)                   # raises SchemaError unless data is a JSON object
    doc.text("cluster_id")            # a string (required: no default)
    doc.count("cpus", 1, low=1)       # a whole number, 1 by default
    [Node(n) for n in doc.docs("nodes")]
    doc.done()                        # a field no ddpctl writes is a damaged record
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import Enum
from typing import Any, TypeVar

#: epoch seconds a record's time can hold: from 1970 to 2100 (past that, a time is damage, and
#: Python's datetime cannot show it)
LATEST_TIME = 4_102_444_800.0
#: the largest count a record holds (ports, pids and node counts are far below it)
MAX_COUNT = 1 << 31

E = TypeVar("E", bound=Enum)
_REQUIRED: Any = object()


class SchemaError(ValueError):
    """A field of a record that is not what ddpctl writes there: ``field`` (``nodes[0].cpus``) and
    ``what`` is wrong with it, said in words (``'many', not a whole number``)."""

    def __init__(self, field: str, what: str) -> None:
        self.field, self.what = field, what
        super().__init__(f"{field}: {what}" if field else what)


def shown(value: object) -> str:
    """A record's value as a message names it: short, on one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def kind(value: object) -> str:
    """A JSON value's kind in words (``a string``, ``a list``...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    names = {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


class Doc:
    """A JSON object of a record, at ``where`` in it (``""``: the top), read one field at a time."""

    def __init__(self, data: object, where: str = "") -> None:
        if not isinstance(data, dict):
            raise SchemaError(where, f"{kind(data)}, not an object")
        self.data, self.where, self._taken = data, where, set()

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _REQUIRED) -> Any:
        """The field as it is (checked by the caller); a missing one is its ``default`` (none: damage)."""
        self._taken.add(key)
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            raise SchemaError(self.at(key), "missing")
        return default

    def _bad(self, key: str, value: object, what: str) -> SchemaError:
        return SchemaError(self.at(key), f"{shown(value)}, not {what}")

    def text(self, key: str, default: Any = _REQUIRED, *, nullable: bool = False) -> Any:
        """A string (``nullable``: or null, read as None)."""
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        if not isinstance(value, str):
            raise self._bad(key, value, "a string")
        return value

    def count(
        self, key: str, default: Any = _REQUIRED, *, low: int = 0, high: int = MAX_COUNT, nullable: bool = False
    ) -> Any:
        """A whole number from ``low`` to ``high`` (``nullable``: or null)."""
        value = self.raw(key, default)
        if value is None and (nullable or default is None):
            return None
        return whole(value, self.at(key), low, high)

    def number(self, key: str, default: Any = _REQUIRED, *, low: float = 0.0, high: float = math.inf) -> Any:
        """A finite number from ``low`` to ``high`` (None where the default is None and it is null)."""
        value = self.raw(key, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._bad(key, value, "a finite number")
        if not low <= value <= high:
            raise SchemaError(self.at(key), f"{shown(value)} is out of range ({low:g} to {high:g})")
        return float(value)

    def time(self, key: str, default: Any = _REQUIRED) -> float:
        """A moment, in epoch seconds (1970 to 2100)."""
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._bad(key, value, "a time (epoch seconds)")
        if not 0 <= value <= LATEST_TIME:
            raise SchemaError(self.at(key), f"{shown(value)} is not a time between 1970 and 2100 (epoch seconds)")
        return float(value)

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self._bad(key, value, "true or false")
        return value

    def word(self, key: str, words: type[E], default: Any = _REQUIRED) -> E:
        """One of the enum's words."""
        value = self.raw(key, default)
        try:
            return words(value)
        except ValueError:
            known = ", ".join(str(w.value) for w in words)
            raise self._bad(key, value, f"one of {known}") from None

    def choice(self, key: str, choices: Iterable[str], default: Any = _REQUIRED) -> Any:
        """One of ``choices`` (a string; None where the default is None and it is null)."""
        value = self.raw(key, default)
        if value is None and default is None:
            return None
        choices = tuple(choices)
        if not isinstance(value, str) or value not in choices:
            raise self._bad(key, value, f"one of {', '.join(choices)}")
        return value

    def texts(self, key: str, default: Any = _REQUIRED) -> tuple[str, ...]:
        """A list of strings."""
        value = self.raw(key, default)
        if not isinstance(value, (list, tuple)):
            raise self._bad(key, value, "a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise SchemaError(f"{self.at(key)}[{i}]", f"{shown(item)}, not a string")
        return tuple(value)

    def strings(self, key: str, default: Any = _REQUIRED) -> dict[str, str]:
        """An object whose values are strings (environment variables, playbook variables)."""
        value = self.obj(key, default)
        for name, item in value.items():
            if not isinstance(item, str):
                raise SchemaError(f"{self.at(key)}.{name}", f"{shown(item)}, not a string")
        return value

    def obj(self, key: str, default: Any = _REQUIRED) -> dict[str, Any]:
        """A JSON object, its fields not checked here (its own record type's, where it has one)."""
        value = self.raw(key, default)
        if not isinstance(value, dict):
            raise self._bad(key, value, "an object")
        return dict(value)

    def doc(self, key: str, default: Any = _REQUIRED) -> Doc | None:
        """A nested record (None where the default is None and it is null)."""
        value = self.raw(key, default)
        if value is None and default is None:
            return None
        return Doc(value, self.at(key))

    def docs(self, key: str, default: Any = _REQUIRED) -> list[Doc]:
        """A list of records."""
        value = self.raw(key, default)
        if not isinstance(value, list):
            raise self._bad(key, value, "a list")
        return [Doc(item, f"{self.at(key)}[{i}]") for i, item in enumerate(value)]

    def done(self, *ignored: str) -> None:
        """Every field was read (``ignored``: those read elsewhere, or no longer used): one that no
        ddpctl writes means the file is not what it seems."""
        extra = sorted(set(self.data) - self._taken - set(ignored))
        if extra:
            raise SchemaError(self.at(extra[0]), "a field no ddpctl writes here")


def whole(value: object, field: str, low: int = 0, high: int = MAX_COUNT) -> int:
    """``value`` as a whole number from ``low`` to ``high`` (a float that is whole is one)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(field, f"{shown(value)}, not a whole number")
    if not low <= value <= high:
        raise SchemaError(field, f"{value} is out of range ({low} to {high})")
    return value
