"""Bad input (issue 16): every row is one line on stderr ("Error: ..." saying what to change), exit 2,
and nothing created under the state home. Rows may write files first (an inventory, a ddpctl.toml,
a script) into the directory the command runs in.
Its tests that start processes (real parts) are in tests/integration/test_bad_input.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.providers.local import check_local_snapshot_dir
from ddpctl.infra.runs.jobs import resolve_job
from tests.support.bad_input import CASES
from tests.support.specs import cluster_spec


def test_the_table_is_big_enough() -> None:
    """The issue's inputs (25 rows) and at least 20 more."""
    assert len(CASES) >= 45
    assert len({c[0] for c in CASES}) == len(CASES)


def test_unreadable_script_and_snapshot_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user who is not root meets (root reads and writes anything, so access() is stubbed)."""
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    monkeypatch.setattr(os, "access", lambda *_a, **_k: False)
    with pytest.raises(UsageError, match=r"script '.*train.py' cannot be read: `chmod u\+r"):
        resolve_job(str(script))
    with pytest.raises(UsageError, match=r"is not writable by \S+ \(the local nodes run as you\)"):
        check_local_snapshot_dir(str(tmp_path / "snapshots" / "mnist"))
    monkeypatch.undo()
    check_local_snapshot_dir(str(tmp_path / "snapshots" / "mnist"))  # creatable: fine
    assert not (tmp_path / "snapshots").exists()  # and checking creates nothing


def test_bounds_hold_for_specs_built_by_the_library() -> None:
    from ddpctl.infra.model.spec import RunSpec

    with pytest.raises(UsageError, match="--nodes 1025 is too many"):
        cluster_spec(nodes=1025)
    with pytest.raises(UsageError, match="--nproc-per-node 1025 is too many"):
        RunSpec(job="m", nodes=2, nproc_per_node=(1, 1025))
    with pytest.raises(UsageError, match="invalid environment variable name 'A B'"):
        RunSpec(job="m", env={"A B": "x"})
    with pytest.raises(UsageError, match="is not a whole number"):
        cluster_spec(nodes=2.7)  # type: ignore[arg-type]
