"""The documentation site (mkdocs.yml, docs/reference/) and the docs' pictures (docs/pictures.py).

* Every public name (``__all__`` of every public module) is rendered in the API
  reference: a ``::: module`` directive in docs/reference/*.md lists it under
  ``members``, in the module that defines it (re-exports are documented once,
  where they are defined; a private module's names where they are exported).
  A new public name or module without its entry fails here.
* Every page of docs/ is in the site's navigation.
* ``mkdocs build --strict`` passes (broken links and anchors, missing pages and
  docstring warnings are errors).
* docs/pictures.py draws its PNGs, and the ones the docs show are committed.

The site's packages and matplotlib are in the ``full`` extra: without them
those tests skip and say so, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from helpers.needs import need_module
from helpers.public_api import PUBLIC

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
TIMEOUT = 600  # seconds: a busy machine builds the site in ~15 s
# "::: limiter.core.bucket" and, indented below it, "members:" then "- Name" lines.
DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:[ \t]+\S.*\n?)*)", re.MULTILINE)


def modules() -> Dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    found = {}
    for path in sorted((SRC / "limiter").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


def is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


@functools.cache  # each module parsed once: home() asks for many names
def exports(module: str) -> Tuple[List[str], Dict[str, str]]:
    """A module's ``__all__`` and where its ``from ... import`` names come from."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: List[str] = []
    imported: Dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = list(ast.literal_eval(node.value))
        elif isinstance(node, ast.ImportFrom) and node.col_offset <= 4:  # module level
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                imported[alias.asname or alias.name] = source
    return names, imported


def home(module: str, name: str) -> str:
    """The public module that documents ``name``: where it is defined, following re-exports."""
    source = exports(module)[1].get(name)
    if source in MODULES and is_public(source):
        return home(source, name)
    return module


def public_modules() -> List[str]:
    """The modules whose ``__all__`` is the API (tests/helpers/public_api.py)."""
    return list(PUBLIC)


def documented(module: str) -> Set[str]:
    """The names a ``::: module`` section may list: the API's names that live there."""
    return {
        name for public, names in PUBLIC.items() for name in names if home(public, name) == module
    }


def reference() -> Dict[str, Optional[Set[str]]]:
    """Each ``::: module`` of docs/reference/*.md -> its ``members`` (None: not listed)."""
    directives: Dict[str, Optional[Set[str]]] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for module, options in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            assert module not in directives, f"{module} is documented twice ({page.name})"
            listed = re.search(r"^\s+members:\s*\n((?:\s+- \S+\n?)+)", options, re.MULTILINE)
            members = set(re.findall(r"- (\S+)", listed.group(1))) if listed else None
            directives[module] = members
    return directives


def test_every_public_module_has_a_reference_section() -> None:
    directives = reference()
    missing = [m for m in public_modules() if m not in directives]
    assert missing == [], f"add a '::: <module>' section to a docs/reference/*.md page: {missing}"


def test_every_public_name_is_rendered_in_the_reference() -> None:
    directives = reference()
    missing = []
    for module in public_modules():
        for name in PUBLIC[module]:
            where = home(module, name)
            if name not in (directives.get(where) or set()):
                missing.append(f"{where}.{name}")
    assert missing == [], (
        "list these under 'members:' of their module's '::: ' directive in "
        f"docs/reference/*.md: {sorted(set(missing))}"
    )


def test_the_reference_lists_only_the_api() -> None:
    for module, members in reference().items():
        assert module in MODULES, f"docs/reference: no module {module}"
        names = documented(module)
        assert (members or set()) <= names, f"{module}: {sorted(set(members or ()) - names)}"


def test_the_reference_finds_the_names_of_limiter_and_its_re_exports() -> None:
    """The static walk agrees with Python on where the top-level names live."""
    import limiter

    for name in limiter.__all__:
        where = home("limiter", name)
        # Documented in a public module that holds the very object (where it is
        # defined, or a public package that re-exports it from a private module).
        assert is_public(where) and where != "limiter", name
        assert getattr(importlib.import_module(where), name) is getattr(limiter, name), name
    assert home("limiter.testing", "AdapterConformance") == "limiter.testing"  # from a private one


def nav_pages() -> Set[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"([\w./-]+\.md)\s*$", nav, re.MULTILINE))


def test_every_docs_page_is_in_the_navigation() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - nav_pages() == set(), "add these pages to mkdocs.yml's nav"
    assert {"index.md", "reference/index.md"} <= nav_pages()


def test_readme_says_how_to_serve_the_site() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'pip install -e ".[docs]" && mkdocs serve' in readme


def test_every_picture_the_docs_show_is_committed() -> None:
    shown = set()
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", page.read_text(encoding="utf-8")):
            shown.add((page.parent / target).resolve())
    assert {p.name for p in shown} >= {
        "tokens-over-time.png",
        "bucket-vs-window.png",
        "quota-midnight.png",
        "demo.png",
        "algorithms.png",
    }
    for path in shown:
        assert is_png(path), path


def is_png(path: Path, *, min_size: Tuple[int, int] = (400, 200), min_bytes: int = 10_000) -> bool:
    """A real PNG picture, not a stub: the signature, a plausible size in pixels and bytes."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return False
    width, height = struct.unpack(">II", data[16:24])
    return width >= min_size[0] and height >= min_size[1] and len(data) >= min_bytes


def test_the_pictures_script_draws_its_pngs(tmp_path: Path) -> None:
    need_module("matplotlib")
    done = subprocess.run(
        [sys.executable, str(DOCS / "pictures.py"), "--out", str(tmp_path), "--no-screenshot"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    # The figure's claim, computed by the script from the library: "10/minute"
    # admits 19 in the first minute of one request a second; a fixed window, 10.
    assert "(first minute: token bucket 19, fixed window 10)" in done.stdout
    # A daily quota of 8 in Paris, one request an hour over two midnights
    # (one of them a 23-hour day): 8 admitted on each calendar day.
    assert "(admitted per day: [8, 8, 8])" in done.stdout
    # "10/minute" on one client's traffic: the most any 60 s admitted, per algorithm.
    assert "(the worst 60 s: token-bucket 19, fixed-window 20, sliding-window 19)" in done.stdout
    drawn = sorted(p.name for p in tmp_path.iterdir())
    assert drawn == [
        "algorithms.png",
        "bucket-vs-window.png",
        "quota-midnight.png",
        "tokens-over-time.png",
    ]
    for name in drawn:
        assert is_png(tmp_path / name), name


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    for package in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        need_module(package)
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,  # (mkdocs.yml names docs/reference/doctests.py from the root)
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # (material's notice)
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    core = (site / "reference" / "core" / "index.html").read_text(encoding="utf-8")
    assert (
        'id="limiter.core.limits.Limit"' in core and 'id="limiter.ratelimiter.RateLimiter"' in core
    )
    # A doctest renders as code, not as block quotes (docs/reference/doctests.py).
    adapters = (site / "reference" / "adapters" / "index.html").read_text(encoding="utf-8")
    assert '<span class="gp">&gt;&gt;&gt;' in adapters
    assert "<blockquote>" not in adapters
    assert (site / "search" / "search_index.json").is_file()
    for page in nav_pages():
        built = site / page.replace("index.md", "").replace(".md", "/") / "index.html"
        assert built.is_file(), page
