"""A tiny wheel made on the fly (no build tool, no network): what tests of a run's own packages
(tests/integration/test_deps.py, test_onprem.py) install offline from a project's folder."""

from __future__ import annotations

import zipfile
from pathlib import Path

#: what a rank prints once it imports the package
TRAIN = """\
import os
import ddpctl_tinypkg
print(f"rank {os.environ['RANK']}: tinypkg says {ddpctl_tinypkg.WORD}", flush=True)
"""


def make_wheel(folder: Path, word: str = "hello", version: str = "0.1") -> Path:
    """``ddpctl_tinypkg`` (``WORD = word``) as a pure-Python wheel in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"ddpctl_tinypkg-{version}.dist-info"
    files = {
        "ddpctl_tinypkg/__init__.py": f"WORD = {word!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: ddpctl-tinypkg\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{dist}/RECORD"])
    path = folder / f"ddpctl_tinypkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return path


def make_project(root: Path, requirements: str = "ddpctl-tinypkg==0.1\n") -> Path:
    """A project whose script imports the wheel, the wheel in its ``wheels/`` and its requirements.txt."""
    make_wheel(root / "wheels")
    (root / "requirements.txt").write_text(requirements)
    (root / "train.py").write_text(TRAIN)
    return root / "train.py"
