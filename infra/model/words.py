"""Enums whose members are their own words (statuses, phases, states): standard library only, so
that what travels to the head node in the supervisor's bundle (``launch/nodes.py``) uses it too."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """An enum whose members are their own words: equal to the string, written to JSON and shown as it
    (``str`` and f-strings give ``"up"``, not ``"ClusterPhase.UP"``, on every Python ddpctl supports)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
