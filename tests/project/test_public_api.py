"""The public API is the pinned list in tests/helpers/public_api.py, and nothing more.

Each public module's ``__all__`` is its pinned names, every other module of
``src/limiter`` has no ``__all__``, the distinct names stay within
``MAX_NAMES``, and each top-level name imports and means one thing.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Dict, List

from helpers.public_api import MAX_NAMES, PUBLIC

SRC = Path(__file__).resolve().parents[2] / "src"


def declared_all() -> Dict[str, List[str]]:
    """module -> its ``__all__``, read with ``ast`` from every module that has one."""
    found = {}
    for path in sorted((SRC / "limiter").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                found[".".join(parts)] = list(ast.literal_eval(node.value))
    return found


def test_only_the_public_modules_have_an_all() -> None:
    assert sorted(declared_all()) == sorted(PUBLIC)


def test_each_public_module_exports_its_pinned_names() -> None:
    declared = declared_all()
    for module, names in PUBLIC.items():
        assert sorted(declared[module]) == sorted(names), module


def test_the_api_stays_small() -> None:
    distinct = {name for names in PUBLIC.values() for name in names}
    assert len(distinct) <= MAX_NAMES


def test_every_public_name_imports() -> None:
    for module, names in PUBLIC.items():
        loaded = importlib.import_module(module)
        for name in names:
            assert getattr(loaded, name) is not None, f"{module}.{name}"


def test_a_name_in_two_modules_is_one_thing_or_one_role() -> None:
    # RateLimitMiddleware (WSGI, ASGI, Django) and RateLimit (Flask, FastAPI) are
    # each one role in several frameworks; any other name means one object.
    roles = {"RateLimitMiddleware", "RateLimit"}
    seen: Dict[str, object] = {}
    for module, names in PUBLIC.items():
        loaded = importlib.import_module(module)
        for name in names:
            if name in roles:
                continue
            obj = getattr(loaded, name)
            assert seen.setdefault(name, obj) is obj, name
