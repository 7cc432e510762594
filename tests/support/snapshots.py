"""What tests/unit/test_snapshots.py and tests/integration/test_snapshots.py share."""

from __future__ import annotations

import importlib.util

from tests.support import TRAINING


def load_trainer():
    """training/trainer.py under a unique name (it is a plain script directory, not a package)."""
    spec = importlib.util.spec_from_file_location("ddpctl_snapshots_trainer", TRAINING / "trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
