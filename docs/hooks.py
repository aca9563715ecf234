"""MkDocs hook: render the docstrings' Sphinx roles (:class:`X`, :meth:`~a.b.c`, ...).

mkdocstrings leaves them as text (":class:" followed by the code span); this turns
each into the code span alone, showing the last name for a ``~`` reference, as Sphinx
does.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    if " &lt;" in target:  # `title <target>`: show the title
        return f"<code>{target.split(' &lt;', 1)[0]}</code>"
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)
