"""What tests/unit/test_project.py and tests/integration/test_project.py share."""

from __future__ import annotations

from pathlib import Path

TRAIN = """\
import os
import torch.distributed as dist
from helpers import greeting  # a sibling module of the project
dist.init_process_group("gloo")
with open("data/words.txt") as f:  # relative to where the script starts: the project
    words = f.read().split()
print(f"rank {dist.get_rank()}: {greeting()} {len(words)} words", flush=True)
dist.destroy_process_group()
"""


def make_project(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "data" / "words.txt").write_text("one two three\n")
    (root / "helpers.py").write_text("def greeting():\n    return 'hello from helpers:'\n")
    (root / "train.py").write_text(TRAIN)
    return root / "train.py"
