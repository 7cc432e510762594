"""The wheel, installed into a fresh venv outside the repository, carries everything ddpctl needs.

Its tests that start processes (real parts) are in tests/integration/test_packaging.py.
"""

from tests.support import REPO


def test_every_data_folder_is_a_declared_package():
    """setuptools warns (30 screens of it on a fresh clone) about folders of data it was not told of."""
    from ddpctl.config_file import tomllib

    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        "ddpctl." + ".".join(p.relative_to(REPO).parts)
        for top in ("playbooks", "training")
        for p in [REPO / top, *(REPO / top).rglob("*")]
        if p.is_dir() and p.name != "__pycache__"
    }
    assert folders - declared == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_every_python_package_is_declared():
    """A package of cli/ or infra/ missing from the list is missing from the wheel (the editable
    install here would not show it)."""
    from ddpctl.config_file import tomllib

    declared = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    names = {"cli": "ddpctl", "infra": "ddpctl.infra"}
    found = {
        ".".join([names[top], *p.parent.relative_to(REPO / top).parts])
        for top in names
        for p in (REPO / top).rglob("__init__.py")
    }
    assert found - declared == set(), "add these to [tool.setuptools] packages in pyproject.toml"
