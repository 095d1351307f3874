"""The shape issue 23 set, kept by the suite: small modules, short functions, no private imports.

Every module of ``src/limiter`` is parsed with ``ast`` (never imported):

* no module imports a ``_private`` name from another module (a private module
  ``_x.py`` may be imported by its own package, whose names inside it are
  public-named);
* no module is over ``MAX_MODULE_LINES`` lines;
* no function or method is over ``MAX_FUNCTION_LINES`` lines of code (blank
  lines, comments and docstrings not counted).

``KNOWN_*`` list what is still over a bound, each waiting for its fix; a test
fails once an entry is no longer needed, so the lists only shrink.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "limiter"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60

#: Modules over MAX_MODULE_LINES, waiting for their split.
KNOWN_LONG_MODULES: Set[str] = set()

#: Functions over MAX_FUNCTION_LINES lines of code ("module:qualname"), waiting for theirs.
KNOWN_LONG_FUNCTIONS: Set[str] = set()

#: Imports of another module's private name, waiting for the name's proper home.
KNOWN_PRIVATE_IMPORTS: Set[str] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> Dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def code_lines(source: str) -> Set[int]:
    """The line numbers holding code: not blank, not only a comment, not in a docstring."""
    lines: Set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT):
            continue
        if token.type in (tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        lines.update(range(token.start[0], token.end[0] + 1))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines.difference_update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def functions(tree: ast.AST, prefix: str = "") -> Iterator[Tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, prefix + node.name + ".")


def long_functions() -> Dict[str, int]:
    found: Dict[str, int] = {}
    for name, path in modules().items():
        source = path.read_text(encoding="utf-8")
        lines = code_lines(source)
        for qualname, node in functions(ast.parse(source)):
            start = node.lineno  # type: ignore[attr-defined]
            end = node.end_lineno  # type: ignore[attr-defined]
            count = len([n for n in lines if start <= n <= end])
            if count > MAX_FUNCTION_LINES:
                found[f"{name}:{qualname}"] = count
    return found


def long_modules() -> Dict[str, int]:
    found = {}
    for name, path in modules().items():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > MAX_MODULE_LINES:
            found[name] = count
    return found


def private_imports() -> List[str]:
    """``module imports other._name`` for every import of another module's private name."""
    wrong = []
    for name, path in modules().items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = node.module or ""
            if node.level:
                base = name.split(".")
                drop = node.level - 1 if is_package else node.level
                source = ".".join(base[: len(base) - drop] + ([source] if source else []))
            if source.split(".")[0] != "limiter":
                continue
            for alias in node.names:
                if not alias.name.startswith("_") or alias.name.startswith("__"):
                    continue
                # A private submodule imported by its own package (or below it) is fine.
                target = f"{source}.{alias.name}"
                if target in modules() and (package + ".").startswith(source + "."):
                    continue
                wrong.append(f"{name} imports {source}.{alias.name}")
    return wrong


def test_no_module_imports_another_modules_private_name() -> None:
    assert set(private_imports()) - KNOWN_PRIVATE_IMPORTS == set()


def test_no_module_is_over_the_bound() -> None:
    over = {name: count for name, count in long_modules().items() if name not in KNOWN_LONG_MODULES}
    assert over == {}, f"split these modules (at most {MAX_MODULE_LINES} lines)"


def test_no_function_is_over_the_bound() -> None:
    over = {
        name: count for name, count in long_functions().items() if name not in KNOWN_LONG_FUNCTIONS
    }
    assert over == {}, f"shorten these functions (at most {MAX_FUNCTION_LINES} lines of code)"


def test_the_known_lists_only_shrink() -> None:
    assert KNOWN_PRIVATE_IMPORTS - set(private_imports()) == set(), (
        "drop these from KNOWN_PRIVATE_IMPORTS"
    )
    assert KNOWN_LONG_MODULES - set(long_modules()) == set(), "drop these from KNOWN_LONG_MODULES"
    assert KNOWN_LONG_FUNCTIONS - set(long_functions()) == set(), (
        "drop these from KNOWN_LONG_FUNCTIONS"
    )


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    source = 'def f():\n    """Doc.\n\n    More.\n    """\n    # a comment\n\n    return 1\n'
    assert len(code_lines(source)) == 2  # "def f():" and "return 1"
    assert [name for name, _ in functions(ast.parse("class A:\n def m(self): pass\n"))] == ["A.m"]
