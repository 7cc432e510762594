"""What tests/unit/test_short_failures.py and tests/integration/test_short_failures.py share."""

from __future__ import annotations

import re

TB = "Traceback (most recent call last):"
NOTE = re.compile(r"^ddpctl: (\d+) lines? of other ranks' and torchrun's traces left out \(`ddpctl logs (\w+)` has")
