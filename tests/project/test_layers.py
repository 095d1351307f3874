"""The import layers of CONTRIBUTING.md ("Layers: what may import what"), checked on the source.

Every module of ``src/limiter`` is parsed with ``ast`` (never imported), and
every import counts: at module level, under ``if TYPE_CHECKING:``, inside a
function.  The graph they make must have no cycle, and each module may import
only modules on its own level or below.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import sysconfig
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "limiter"
TOP = 99

#: The level of each module, by name or by package prefix (the longest wins).
LEVELS: Dict[str, int] = {
    "limiter.core": 1,
    "limiter.clock": 1,
    "limiter.http": 1,  # its __init__ imports nothing
    "limiter.http.request": 1,
    "limiter.events": 1,
    "limiter.store": 2,
    "limiter.http.headers": 2,
    "limiter.http.keys": 2,
    "limiter.http.responses": 2,
    "limiter.backends": 3,
    "limiter.urls": 4,
    "limiter.waiting": 5,
    "limiter._observed": 5,
    "limiter.ratelimiter": 5,
    "limiter.slots": 5,
    "limiter.cleanup": 5,
    "limiter.http.rules": 6,
    "limiter.http.options": 6,
    "limiter.clients": 6,
    "limiter.metrics": 6,
    "limiter.http.guard": 7,
    "limiter.adapters": 7,
    "limiter.integrations": 8,
    "limiter": TOP,  # the package facade: lazy re-exports of everything
    "limiter.__main__": TOP,
    "limiter.cli": TOP,
    "limiter.testing": TOP,
}

#: Narrower than "its level or below", as CONTRIBUTING.md's table says.
ONLY: Dict[str, FrozenSet[str]] = {
    "limiter.core": frozenset({"limiter.core"}),
    "limiter.clock": frozenset(),
    "limiter.http.request": frozenset({"limiter.http"}),
    "limiter.events": frozenset({"limiter.core", "limiter.core.result"}),
    "limiter.store": frozenset(
        {"limiter.core", "limiter.core.costs", "limiter.core.limits", "limiter.core.result"}
    ),
}

#: Modules that may import only the standard library besides ``ONLY``.
#: Every module of ``limiter.core`` (level 1, pure) is one of them.
CORE = (
    "_values",
    "bucket",
    "costs",
    "limits",
    "lockout",
    "many",
    "parse",
    "quota",
    "result",
    "state",
)
STDLIB_ONLY = (
    *(f"limiter.core.{name}" for name in CORE),
    "limiter.clock",
    "limiter.http.request",
    "limiter.events",
)

#: Edges of a known cycle waiting for its fix, each with the reason.  The last
#: test fails once an edge is gone, so that its entry is removed with it.
KNOWN_CYCLE_EDGES: Dict[Tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> Dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def level_of(name: str) -> Optional[int]:
    while name:
        if name in LEVELS:
            return LEVELS[name]
        name = name.rpartition(".")[0]
    return None


def resolve(name: str, known: Set[str]) -> str:
    """The module of ``known`` that importing ``name`` names (``a.b.Class`` -> ``a.b``)."""
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def imported_names(name: str, path: Path) -> Iterator[str]:
    """Every absolute module name ``path`` imports, at any depth of its tree."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # "from . import x" may name a module x or an attribute of the package.
            yield from (f"{prefix}.{alias.name}" for alias in node.names)


def graph() -> Dict[str, Set[str]]:
    """module -> the ``limiter`` modules it imports (and subpackages whose ``__init__`` runs)."""
    found = modules()
    known = set(found)
    edges: Dict[str, Set[str]] = {}
    for name, path in found.items():
        targets: Set[str] = set()
        for imported in imported_names(name, path):
            if imported.split(".")[0] != "limiter":
                continue
            target = resolve(imported, known)
            # Importing limiter.adapters.wsgi runs limiter/adapters/__init__.py too; the
            # root package is left out: its imports are lazy re-exports for type checkers.
            # (A module's own packages are running already when it is imported: no edge.)
            parent = target.rpartition(".")[0]
            while parent not in ("", "limiter"):
                if not name.startswith(parent + "."):
                    targets.add(parent)
                parent = parent.rpartition(".")[0]
            targets.add(target)
        targets.discard(name)
        edges[name] = targets
    return edges


def external_imports(name: str, path: Path) -> Set[str]:
    return {
        imported.split(".")[0]
        for imported in imported_names(name, path)
        if imported.split(".")[0] not in ("limiter", "__future__")
    }


def is_stdlib(top: str) -> bool:
    names = getattr(sys, "stdlib_module_names", None)  # 3.10+
    if names is not None:
        return top in names
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    stdlib = sysconfig.get_paths()["stdlib"]
    return spec.origin.startswith(stdlib) and "site-packages" not in spec.origin


def find_cycle(edges: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A cycle as ``[a, b, ..., a]``, or ``None``."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def without_known(edges: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    return {
        source: {target for target in targets if (source, target) not in KNOWN_CYCLE_EDGES}
        for source, targets in edges.items()
    }


def test_the_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(without_known(graph()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_has_a_level() -> None:
    missing = [name for name in modules() if level_of(name) is None]
    assert missing == [], f"give these a level in LEVELS (and in CONTRIBUTING.md): {missing}"


def test_each_module_imports_only_its_level_or_below() -> None:
    wrong = []
    for source, targets in graph().items():
        level = level_of(source)
        assert level is not None
        for target in sorted(targets):
            target_level = level_of(target)
            assert target_level is not None, target
            allowed = ONLY.get(source)
            if (allowed is not None and target not in allowed) or target_level > level:
                wrong.append(f"{source} (level {level}) imports {target} (level {target_level})")
    assert wrong == []


@pytest.mark.parametrize("name", [name for name in STDLIB_ONLY if name in modules()])
def test_the_bottom_imports_only_the_standard_library(name: str) -> None:
    path = modules()[name]
    outside = sorted(top for top in external_imports(name, path) if not is_stdlib(top))
    assert outside == []


def test_the_request_view_has_one_home() -> None:
    import limiter
    import limiter.http.guard
    import limiter.http.keys
    import limiter.http.options
    import limiter.http.request

    # Users import it from limiter; the modules that use it share the one class.
    assert limiter.RequestInfo is limiter.http.request.RequestInfo
    assert limiter.http.guard.RequestInfo is limiter.http.request.RequestInfo
    assert limiter.http.keys.KeyFunc is limiter.http.request.KeyFunc
    assert limiter.http.options.Cost is limiter.http.request.Cost


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    code = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from .pkg.mod import Thing\n"
        "if TYPE_CHECKING:\n"
        "    from ..up import Other\n"
        "def f():\n"
        "    import limiter.deep.module\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(code)
    names = set(imported_names("limiter.a.mod", path))
    assert {"limiter.a.sibling", "limiter.a.pkg.mod.Thing", "limiter.up.Other"} <= names
    assert "limiter.deep.module" in names
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_known_cycle_edges_still_exist() -> None:
    """Each ``KNOWN_CYCLE_EDGES`` entry is still needed; remove it once its cycle is fixed."""
    edges = graph()
    stale = [edge for edge in KNOWN_CYCLE_EDGES if edge[1] not in edges.get(edge[0], set())]
    assert stale == []
    for source, target in KNOWN_CYCLE_EDGES:
        assert find_cycle({**without_known(edges), source: edges[source]}) is not None, (
            f"{source} -> {target} is no longer part of a cycle: drop it from KNOWN_CYCLE_EDGES"
        )


def test_the_suites_and_the_plugin_share_t0() -> None:
    from limiter import testing
    from limiter.testing import _adapter_suite, _shared, _store_suite

    assert _shared.T0 == testing.T0 == 1_700_000_000.0
    assert _store_suite.T0 is _adapter_suite.T0 is _shared.T0
