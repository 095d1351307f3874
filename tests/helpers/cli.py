"""Running ``limiter.cli.main`` in the test's process, and an application module for it.

``run(capsys, *argv)`` is the command's exit status and output; ``app_module``
writes an application's limiters to a module file and imports it, as
``--limiter MODULE:ATTRIBUTE`` finds them.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Iterator, Tuple

import pytest

from limiter.cli import main
from limiter.urls import STORAGE_URL_ENV


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Tuple[int, str, str]:
    """``main(argv)`` in this process: (exit status, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def app_module(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tuple[str, ModuleType]]:
    """``(name, module)`` of ``source`` (``{url}``: an SQLite file in ``tmp_path``), imported
    from ``tmp_path``; then every ``RateLimiter``'s store of it closed, the module forgotten."""
    from limiter import RateLimiter

    monkeypatch.delenv(STORAGE_URL_ENV, raising=False)
    name = f"cli_app_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(source.format(url=f"sqlite:///{tmp_path / 'app.db'}"))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    try:
        yield name, module
    finally:
        for value in vars(module).values():
            if isinstance(value, RateLimiter):
                value.store.close()
        sys.modules.pop(name, None)
