"""A resource's ``detail`` as a typed record of the provider that writes it.

``Resource.detail`` (``state.py``) is stored as a JSON object. The provider that owns a kind of
resource declares what it records there as a frozen dataclass of this base (``aws/details.py``,
``pcluster/details.py``), and every write and read goes through that one definition:
``VpcDetail(cidr=...).resource(name)`` in a plan, ``replace(detail, aws_id=...).put(res)`` once made,
``InstancesDetail.of(res).ids`` where it is read. A record holds every field of its kind; a field the
file does not hold (state version 2 wrote a field only once it was known) reads as its default, and
keys no field names are kept as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from .state import Resource

D = TypeVar("D", bound="Detail")


@dataclass(frozen=True)
class Detail:
    """The record of one kind of resource (this base: a kind that records nothing)."""

    kind: ClassVar[str] = ""  # the resource kind it describes ("": any)

    @classmethod
    def of(cls: type[D], res: Resource) -> D:
        """The record ``res`` holds: each field from its key, its default where the key is missing."""
        if cls.kind and res.kind != cls.kind:
            raise ValueError(f"a {res.kind} resource read as a {cls.kind} record ({cls.__name__})")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in res.detail:
                value = res.detail[f.name]
                values[f.name] = tuple(value) if isinstance(f.default, tuple) else value  # JSON has lists
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Every field, as JSON writes it (tuples as lists)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, dict) else value
        return out

    def put(self, res: Resource) -> None:
        """Record this in ``res`` (the state is saved by the caller)."""
        if self.kind and res.kind != self.kind:
            raise ValueError(f"a {type(self).__name__} record put in a {res.kind} resource")
        res.detail.update(self.to_dict())

    def resource(self, id: str) -> Resource:
        """A planned resource of this kind that records this."""
        return Resource(self.kind, id, detail=self.to_dict())
