"""A griffe extension for the API reference: docstrings read as their authors meant.

The docstrings are prose (see mkdocs.yml, ``docstring_style: null``), rendered
as Markdown, where two things they contain would be misread:

* a doctest (``>>> ...`` up to the next blank line) would be nested block
  quotes, and its output a link (``[True, False]``): it is fenced as ``pycon``;
* a power written ``2**53`` outside backticks would open bold text: its stars
  are escaped.

Loaded by mkdocstrings from mkdocs.yml; not a page of the site (``exclude_docs``).
"""

from __future__ import annotations

import re
from typing import Any, List

import griffe

# A code span (``x`` or `x`), kept as it is, or a power such as 2**53.
_SPAN_OR_POWER = re.compile(r"(``.+?``|`[^`]+`)|(?<=\w)\*\*(?=\d)")


def _escape_powers(line: str) -> str:
    return _SPAN_OR_POWER.sub(lambda m: m.group(1) or r"\*\*", line)


def fence_doctests(text: str) -> str:
    """``text`` with each doctest block (``>>>`` to the next blank line) in a
    ``pycon`` fence, and the stars of powers (``2**53``) escaped outside code."""
    out: List[str] = []
    in_block = False
    for line in text.splitlines():
        if not in_block and line.lstrip().startswith(">>>"):
            out.append("```pycon")
            in_block = True
        elif in_block and not line.strip():
            out.append("```")
            in_block = False
        out.append(line if in_block else _escape_powers(line))
    if in_block:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fences the doctests of every docstring griffe loads."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is not None and (">>>" in docstring.value or "**" in docstring.value):
            docstring.value = fence_doctests(docstring.value)
