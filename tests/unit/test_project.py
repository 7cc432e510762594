"""A user's project (issue 17): `ddpctl run ./train.py` runs the script from its project, whose
files remote nodes get a copy of (.gitignore honoured, copied again only when the content
changes). The copy over SSH is tested on the test cluster (tests/integration/test_onprem.py); here the
project's rules and a real local run of a script that imports a sibling module and reads a data
file relative to where it starts.

Its tests that start processes (real parts) are in tests/integration/test_project.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpctl.infra.launch.project import locate
from ddpctl.infra.model.errors import UsageError
from tests.support.project import make_project


def test_workdir_must_hold_the_script(tmp_path: Path) -> None:
    script = make_project(tmp_path / "p")
    (tmp_path / "other").mkdir()
    with pytest.raises(UsageError, match="does not contain"):
        locate(script, tmp_path / "other")
    assert locate(script, tmp_path).script == "p/train.py"
