"""The test suite's own rules: tests mirror the source; no test module imports another.

Every ``.py`` file under ``tests/`` is parsed with ``ast`` (never imported), and
every import counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List

TESTS = Path(__file__).resolve().parents[1]


def imported(tree: ast.AST) -> Iterator[str]:
    """The dotted names a module imports (``from x import y`` gives ``x``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_no_test_module_imports_another() -> None:
    offending: List[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name in imported(tree):
            if any(part.startswith("test_") for part in name.split(".")):
                offending.append(f"{path.relative_to(TESTS)} imports {name}")
    assert offending == [], "move what they share into tests/helpers/: " + "; ".join(offending)


def test_the_checker_sees_both_kinds_of_import() -> None:
    tree = ast.parse("import test_a\ndef f():\n    from test_b import x\nfrom helpers import y\n")
    assert sorted(imported(tree)) == ["helpers", "test_a", "test_b"]


def test_the_tests_mirror_the_source() -> None:
    # Each test file sits in a folder named after what it tests (CONTRIBUTING.md,
    # "Run the tests"); none at the top of tests/.
    folders = {"core", "ratelimiter", "backends", "http", "adapters", "integrations"}
    folders |= {"metrics", "clients", "cli", "project"}
    top = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert top == [], f"move these into one of {sorted(folders)}"
    placed = {path.parent.name for path in TESTS.rglob("test_*.py")}
    assert placed <= folders, sorted(placed - folders)
