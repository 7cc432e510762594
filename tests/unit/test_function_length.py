"""Functions stay short (issue 40): a function of infra/ or cli/ whose body (its docstring left out)
runs past 60 lines says why in its docstring ("Long because ..."), or is split."""

from __future__ import annotations

import ast

from tests.support import REPO

LIMIT = 60


def long_functions() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted([*(REPO / "infra").rglob("*.py"), *(REPO / "cli").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node) or ""
            first = node.body[0]
            has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and doc
            start = first.end_lineno + 1 if has_doc else first.lineno
            length = node.end_lineno - start + 1
            if length > LIMIT:
                found.append((f"{path.relative_to(REPO)}:{node.lineno} {node.name}", length, doc))
    return found


def test_a_long_function_says_why() -> None:
    unexplained = [f"{where} ({n} lines)" for where, n, doc in long_functions() if "Long because" not in doc]
    assert unexplained == [], "split these, or say in the docstring why they are long:\n" + "\n".join(unexplained)
