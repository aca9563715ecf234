"""MkDocs hooks: the site's home page is the README, and the docstrings' Sphinx roles
(:class:`X`, :meth:`~a.b.c`, ...) are rendered as code.

- ``index.md`` is not a file under ``docs/``: it is made from ``README.md`` at each
  build (:func:`on_files`), so the two cannot drift apart. The README links into
  ``docs/`` (``docs/guide.md#...``), which becomes a link between pages of the site
  (``guide.md#...``); a link to another file of the repository (``CHANGELOG.md``,
  ``LICENSE``) becomes a link to it on the repository's site (``project.urls.Source``
  in ``pyproject.toml``). ``mkdocs --strict`` checks every link and anchor of the
  result, as of any page.
- mkdocstrings leaves the Sphinx roles as text (":class:" followed by the code span);
  :func:`on_page_content` turns each into the code span alone, showing the last name
  for a ``~`` reference, as Sphinx does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tomllib
from mkdocs.structure.files import File, Files

_ROLE = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const):<code>(~?)([^<]*)</code>")

#: An inline Markdown link's target: ``](target)``.
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def site_index(readme: str, repository: str) -> str:
    """The README's Markdown with its links made right for the site's home page."""

    def target(match: re.Match[str]) -> str:
        url = match.group(1)
        if url.startswith(("http://", "https://", "mailto:", "#")):
            return match.group(0)
        if url.startswith("docs/"):
            return f"]({url.removeprefix('docs/')})"
        return f"]({repository}/blob/main/{url})"

    return _LINK.sub(target, readme)


def on_files(files: Files, config: Any, **_: Any) -> Files:
    root = Path(config["config_file_path"]).parent
    source = tomllib.loads((root / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    text = site_index((root / "README.md").read_text(), source.rstrip("/"))
    files.append(File.generated(config, "index.md", content=text))
    return files


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    if " &lt;" in target:  # `title <target>`: show the title
        return f"<code>{target.split(' &lt;', 1)[0]}</code>"
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)
