"""The torch versions ddpctl supports on the nodes, and the verdict on one node's version (pure).

The floor, 2.4, was read from the releases' source (torch/distributed/run.py and elastic/ of 2.1
to 2.9): everything ddpctl uses through torchrun is there from 2.2 (the c10d rendezvous with
``is_host``, ``--local-addr``, the per-rank line prefix through
``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``; the ``--log-line-prefix-template`` flag came only in
2.14, so the launch line never uses it), and the Trainer's ``torch.amp.GradScaler(device)`` from
2.3; 2.4 leaves a release of margin. The suite runs 2.13.0 and 2.14.1 end to end (the CPU builds
this project's build machines install offline); older releases in the range are checked by reading
only. The range has no upper end: what ddpctl passes to torchrun has stayed the same from 2.2 to
2.14, and a newer release is expected to keep it. The python_env role keeps the same floor (``python_env_torch_min_version``; a test checks that the two agree).
"""

from __future__ import annotations

import re

from .errors import UsageError

#: the oldest torch ddpctl launches (see the module's docstring)
FLOOR = "2.4"
#: the newest torch the test suite runs (the `train` extra's pin on the build machines)
NEWEST_TESTED = "2.14.1"
#: the older torch the test suite also runs, end to end (`./dev test` installs it beside the pin)
OLDER_TESTED = "2.13.0"


def release(version: str) -> tuple[int, ...]:
    """``2.13.0+cpu`` -> (2, 13, 0); a pre-release or dev build counts as its release."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if not match:
        raise ValueError(f"not a torch version: {version!r}")
    return tuple(int(p) for p in match.group(1).split("."))


def supported_range() -> str:
    return f"torch {FLOOR} or newer (tested: {OLDER_TESTED} and {NEWEST_TESTED})"


def check_torch(version: str, where: str) -> None:
    """Refuse a torch below the floor in one line naming ``where`` (a node, a Python), the version
    and the range."""
    try:
        found = release(version)
    except ValueError:
        raise UsageError(f"{where}: torch reports version {version!r}, which ddpctl cannot read") from None
    if found < release(FLOOR):
        raise UsageError(
            f"{where} has torch {version}: ddpctl supports {supported_range()}; "
            "upgrade torch there, or give a Python with a newer one"
        )
