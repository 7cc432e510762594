"""The programs ddpctl runs on nodes, run for real here as the nodes' python3 runs them: ``python -c TEXT``.

With this Python, or the one in ``DDPCTL_TEST_NODE_PYTHON`` (e.g. a Python 3.8, the oldest a node may have;
the schema probe's tests need PyYAML in it).

Its tests that start processes (real parts) are in tests/integration/test_node_programs.py.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from ddpctl.infra import node_programs

#: what a program may import besides the standard library: its interpreter's own packages
THIRD_PARTY = {"pcluster_schema": ("yaml", "marshmallow", "pcluster"), "rdzv_store": ("torch",), "gpu_burn": ("torch",)}


# --- the package -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", node_programs.NAMES)
def test_each_program_is_the_module_file_and_parses_as_python_3_8(name: str) -> None:
    text = node_programs.source(name)
    assert text == (Path(node_programs.__file__).parent / f"{name}.py").read_text()
    tree = ast.parse(text, feature_version=(3, 8))
    assert 'if __name__ == "__main__":' in text
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


@pytest.mark.parametrize("name", node_programs.NAMES)
def test_each_program_imports_nothing_of_ddpctl(name: str) -> None:
    tree = ast.parse(node_programs.source(name))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    allowed = {"__future__", *THIRD_PARTY.get(name, ())}
    assert imported - allowed <= set(sys.stdlib_module_names)
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))


def test_an_unknown_program_is_refused() -> None:
    with pytest.raises(ValueError, match="no node program 'nope'"):
        node_programs.source("nope")
