"""A first-time user's path: a plan before an AWS account, help texts that agree with it, install
hints that work for how ddpctl was installed, and `./dev demo` saying how to reach `ddpctl`.
Its tests that start processes (real parts) are in tests/integration/test_onboarding.py.
"""

from __future__ import annotations

import pytest

from ddpctl.infra.tools import install
from tests.support import REPO


@pytest.mark.parametrize(
    ("record", "command"),
    [
        ({"url": "file:///home/me/ddpctl", "dir_info": {"editable": True}}, "pip install -e '/home/me/ddpctl[train]'"),
        ({"url": "file:///home/me/ddpctl", "dir_info": {}}, "pip install '/home/me/ddpctl[train]'"),
        (
            {
                "url": "https://git.example.org/ml/ddpctl.git",
                "vcs_info": {"vcs": "git", "commit_id": "0" * 40, "requested_revision": "v0.1.0"},
            },
            "pip install 'ddpctl[train] @ git+https://git.example.org/ml/ddpctl.git@v0.1.0'",
        ),
        (
            {"url": "https://git.example.org/ml/ddpctl.git", "vcs_info": {"vcs": "git", "commit_id": "ab12"}},
            "pip install 'ddpctl[train] @ git+https://git.example.org/ml/ddpctl.git@ab12'",
        ),
        (
            {"url": "file:///tmp/ddpctl-0.1.0-py3-none-any.whl", "archive_info": {}},
            "pip install 'ddpctl[train] @ file:///tmp/ddpctl-0.1.0-py3-none-any.whl'",
        ),
        ({}, "pip install 'ddpctl[train]'"),
    ],
)
def test_the_install_hint_follows_how_ddpctl_was_installed(record, command):
    """PEP 610's direct_url.json, as pip writes it for each way of installing."""
    assert install.pip_install("train", record=record) == command


def test_dev_demo_says_how_to_put_ddpctl_on_path():
    """The README's commands call bare `ddpctl`; after `./dev demo` it is in .venv/bin."""
    demo = (REPO / "dev").read_text().split("    demo)", 1)[1].split(";;", 1)[0]
    assert "source $VENV/bin/activate" in demo
    assert "exec " not in demo  # the hint comes after the run, whatever its result
