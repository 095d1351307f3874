"""Every ```python block in README.md and docs/*.md runs, so the docs cannot rot."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path) -> List[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of one file run in order, in one namespace, in a scratch directory."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    sys.modules.setdefault(namespace["__name__"], type(sys)(namespace["__name__"]))
    for number, block in enumerate(python_blocks(path), 1):
        code = compile(block, f"{path.name}[block {number}]", "exec")
        exec(code, namespace)
        # Functions named test_* in a block are examples of user tests: run them
        # with the fixtures they name, so they are checked too.
        for name, func in list(namespace.items()):
            if name.startswith("test_") and callable(func) and not getattr(func, "_ran", False):
                run_example_test(func)
                func._ran = True


def run_example_test(func: object) -> None:
    import inspect

    from limiter import ManualClock

    fixtures = {"limiter_clock": ManualClock}
    params = inspect.signature(func).parameters  # type: ignore[arg-type]
    func(**{name: fixtures[name]() for name in params})  # type: ignore[operator]


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -e . && python -m limiter demo" in readme
    assert '\npip install -e ".[dev]" && python -m pytest\n' in readme
    # .ci/run takes the command from README.md (the first line that starts so).
    assert """grep -m1 -E '^pip install -e "\\.\\[dev\\]" && python -m pytest' README.md""" in ci
    assert 'eval "$test_cmd"' in ci


def test_every_doc_has_runnable_code() -> None:
    without = [p.name for p in DOCS if p.name != "benchmarks.md" and not python_blocks(p)]
    assert without == []
