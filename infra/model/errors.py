"""Errors a user can act on. Each message is one line that says what to change."""

from __future__ import annotations


class DdpctlError(Exception):
    """A failure the user can fix; the CLI prints the message and exits 1."""

    exit_code = 1


class UsageError(DdpctlError):
    """Bad input (flags, paths, ports, config): the CLI exits 2 and nothing was created."""

    exit_code = 2


class ClusterNotFound(DdpctlError):
    """No cluster with that name is recorded under the state home."""


class ClusterExists(DdpctlError):
    """A cluster with that name is already recorded."""
