"""infra/'s floors (infra/__init__.py): each package imports only from the floors below it, and no
module's imports, however deep in a function, lead back to itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO

INFRA = REPO / "infra"

#: each package of infra/ and the packages it may import from (itself included)
FLOORS: dict[str, set[str]] = {
    "model": set(),
    "tools": {"model"},
    "node_programs": set(),
    "hosts": {"model", "tools", "node_programs"},
    "launch": {"model", "tools", "node_programs", "hosts"},
    "providers": {"model", "tools", "node_programs", "hosts", "launch"},
    "lifecycle": {"model", "tools", "node_programs", "hosts", "launch", "providers"},
    "runs": {"model", "tools", "node_programs", "hosts", "launch", "providers", "lifecycle"},
}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(INFRA).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["infra", *parts])


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of a module but those under ``if TYPE_CHECKING:`` (annotations, never imported)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return [n for n in ast.walk(tree) if id(n) not in skip]


def imports() -> dict[str, set[str]]:
    """Every infra module -> the infra modules it imports at run time (at the top or inside a
    function; ``from`` imports and plain ``import`` statements, relative or by ``ddpctl.infra``)."""
    files = {module_of(p): p for p in INFRA.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        found: set[str] = set()
        for node in runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.removeprefix("ddpctl.") for a in node.names if a.name.startswith("ddpctl.infra")}
                continue
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("ddpctl.infra"):
                target = node.module.removeprefix("ddpctl.")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in files else target)
        graph[mod] = {t for t in found if t in files and t != mod}
    return graph


def floor(mod: str) -> str:
    return mod.split(".")[1] if mod.count(".") >= 1 else ""


def test_each_floor_imports_only_from_below() -> None:
    wrong = sorted(
        f"{mod} -> {dep}"
        for mod, deps in imports().items()
        if floor(mod) in FLOORS
        for dep in deps
        if floor(dep) != floor(mod) and floor(dep) not in FLOORS[floor(mod)] and dep != "infra"
    )
    assert wrong == [], "imports running up a floor:\n" + "\n".join(wrong)


def test_no_import_circle() -> None:
    edges = imports()  # a module importing its own package's __init__ counts: that is a circle too
    state: dict[str, int] = {}
    circles: list[str] = []

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(edges.get(mod, ())):
            if state.get(dep) == 1:
                circles.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[mod] = 2

    for mod in sorted(edges):
        if mod not in state:
            visit(mod, [mod])
    assert circles == [], "import circles:\n" + "\n".join(circles)


def test_every_package_says_what_it_may_import() -> None:
    for name in FLOORS:
        doc = ast.get_docstring(ast.parse((INFRA / name / "__init__.py").read_text())) or ""
        assert len(doc.split()) > 15, f"infra/{name}/__init__.py needs its one-paragraph docstring"


def test_tests_import_helpers_from_support_never_from_another_test_module() -> None:
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "tests" and len(parts) > 1 and parts[1] not in ("support",):
                    found.append(f"{path.relative_to(REPO)}: {name}")
    assert found == []


def test_the_cli_and_the_api_reach_infra_only_through_lifecycle_and_runs() -> None:
    """cli/ (the commands and the Python API) composes nothing of the lower floors itself: it parses,
    calls lifecycle/ or runs/ (model/'s types beside them), and prints."""
    allowed = ("infra.lifecycle", "infra.runs", "infra.model")
    wrong = []
    for path in sorted((REPO / "cli").rglob("*.py")):
        for node in runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                target = name.removeprefix("ddpctl.")
                if target.startswith("infra") and not target.startswith(allowed):
                    wrong.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    assert wrong == [], "cli/ reaching below lifecycle/ and runs/:\n" + "\n".join(wrong)


def test_each_package_says_what_it_may_import_as_the_floors_are() -> None:
    """Its docstring's "May import ``a/``, ``b/`` ..." (or "May import nothing") is FLOORS' list."""
    wrong = []
    for name, below in FLOORS.items():
        doc = " ".join((ast.get_docstring(ast.parse((INFRA / name / "__init__.py").read_text())) or "").split())
        said = re.search(r"May import (nothing|(?:``\w+/``(?:, | and )?)+)", doc)
        listed = set(re.findall(r"``(\w+)/``", said.group(1))) if said and said.group(1) != "nothing" else set()
        if said is None or listed != below:
            wrong.append(f"infra/{name}: says {sorted(listed) if said else 'nothing of it'}, floors {sorted(below)}")
    assert wrong == [], "\n".join(wrong)
