"""docs/architecture.md stays true: every module it names exists, every module of cli/ and
infra/ is named there (a folder of programs may be named as a whole, e.g. `infra/node_programs/`),
and what a row names (a function, a class, a variable) is defined."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO

DOC = REPO / "docs" / "architecture.md"


def named() -> set[str]:
    """The first column of the doc's "who owns what" table: a module (``infra/x.py``) or a folder."""
    return set(re.findall(r"^\| `([a-z0-9_/]+(?:\.py|/))`", DOC.read_text(), re.MULTILINE))


def has_code(path: Path) -> bool:
    """More than a docstring and ``from __future__`` imports."""
    body = ast.parse(path.read_text()).body
    return any(
        not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
        for n in body
    )


def test_every_module_it_names_exists() -> None:
    missing = sorted(p for p in named() if not (REPO / p).exists())
    assert missing == [], f"docs/architecture.md names what is not there: {missing}"


def test_every_module_is_named() -> None:
    folders = {p for p in named() if p.endswith("/")}
    modules = {
        str(p.relative_to(REPO))
        for top in ("cli", "infra")
        for p in (REPO / top).rglob("*.py")
        if p.name != "__init__.py" or has_code(p)  # a package's own code, not its docstring
    }
    unnamed = sorted(m for m in modules - named() if not any(m.startswith(f) for f in folders))
    assert unnamed == [], f"docs/architecture.md has no line for: {unnamed}"


def test_what_each_row_names_exists() -> None:
    """A function, class or constant a row names (``snake_case`` with an underscore, ``CamelCase``,
    ``a.b`` where ``b`` is one) is defined in the repository: a rename reaches the doc."""
    sources = "\n".join(
        p.read_text()
        for top in ("infra", "cli", "training", "playbooks")
        for p in (REPO / top).rglob("*")
        if p.suffix in (".py", ".yml", ".j2")
    )
    rows = re.findall(r"^\| `([a-z0-9_/]+(?:\.py|/))` \| (.*) \|$", DOC.read_text(), re.MULTILINE)
    shaped = re.compile(r"^[a-z]+(_[a-z0-9]+)+$|^[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]+$")
    missing = sorted(
        f"{module}: {token}"
        for module, text in rows
        for token in re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", text)
        if shaped.match(last := token.split(".")[-1]) and not re.search(rf"\b{re.escape(last)}\b", sources)
    )
    assert missing == [], "docs/architecture.md names what the code does not define:\n" + "\n".join(missing)
