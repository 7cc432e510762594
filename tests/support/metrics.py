"""What tests/unit/test_metrics.py and tests/integration/test_metrics.py share."""

from __future__ import annotations

LINES = [
    {"kind": "step", "step": 1, "epoch": 1, "loss": 2.3, "samples_per_s": 100.0},
    {"kind": "step", "step": 20, "epoch": 1, "loss": 0.9, "samples_per_s": 900.5},
    {"kind": "epoch", "step": 70, "epoch": 1, "loss": 0.6, "accuracy": 91.2, "samples_per_s": 850.0},
    {"kind": "step", "step": 80, "epoch": 2, "loss": 0.4, "samples_per_s": 910.0},
]
