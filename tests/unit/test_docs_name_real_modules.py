"""Docs true by test (issue 40): a module named in a docstring or comment of infra/, cli/ or
training/ (``something.py``, ``floor/module.py``) exists, read from the repository's root, infra/,
infra/providers/ or the naming file's own folder."""

from __future__ import annotations

import re

from tests.support import REPO

#: names that are not this repository's modules: torch's, a cited source's, a user's script in an example
ELSEWHERE = {"torch/distributed/run.py", "src/finops/aws_prices.py", "./train.py", "train.py", "my_train.py"}
NAMED = re.compile(r"[`\s(]((?:[\w.-]+/)*[\w-]+\.py)\b")


def missing() -> list[str]:
    found = []
    for path in sorted(p for d in ("infra", "cli", "training") for p in (REPO / d).rglob("*.py")):
        roots = [REPO, REPO / "infra", REPO / "infra" / "providers", path.parent, path.parent.parent]
        for ref in {m.group(1) for m in NAMED.finditer(path.read_text())} - ELSEWHERE:
            if "/" in ref:
                ok = any((root / ref).exists() for root in roots)
            else:  # a bare name: a module of that name somewhere here
                ok = any(REPO.glob(f"[!.]*/**/{ref}")) or (REPO / ref).exists()
            if not ok:
                found.append(f"{path.relative_to(REPO)}: {ref}")
    return found


def test_every_module_a_docstring_names_exists() -> None:
    assert missing() == [], "named but not here:\n" + "\n".join(missing())
