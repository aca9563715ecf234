"""The package's metadata, as a user sees it on the index page and from the command
line: the version in one place (``aioproducer/_version.py``), ``aioproducer
--version``, the classifiers naming exactly the Python versions CI tests, the project
URLs, the changelog."""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import io
import re
import sys
from pathlib import Path

import pytest
import tomllib

import aioproducer
from aioproducer import _version
from aioproducer.cli import main
from tools import wheels as wheel_tools

ROOT = Path(__file__).resolve().parent.parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_lives_in_one_module() -> None:
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "aioproducer._version.__version__"}
    assert aioproducer.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc)?\d*", _version.__version__)
    # _version.py imports nothing: pyproject.toml's attr is read without building.
    tree = ast.parse((ROOT / "aioproducer" / "_version.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    # No other module spells the version out.
    literal = re.compile(re.escape(repr(_version.__version__)[1:-1]))
    spelled = [p.relative_to(ROOT) for p in (ROOT / "aioproducer").rglob("*.py")
               if p.name != "_version.py" and literal.search(p.read_text())]
    assert spelled == []


def test_installed_metadata_has_that_version() -> None:
    assert importlib.metadata.version("aioproducer") == _version.__version__


def test_everything_that_reports_the_version_uses_it() -> None:
    from aioproducer.net import connection
    from aioproducer.otel import _version as otel_version

    assert _version.__version__ == connection._SOFTWARE_VERSION  # ApiVersions (KIP-511)
    assert otel_version() == _version.__version__  # the OpenTelemetry scope


def test_cli_version() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    py = ".".join(map(str, sys.version_info[:3]))
    assert out.getvalue() == f"aioproducer {_version.__version__} (CPython {py}, GIL on)\n"


def test_classifiers_name_the_versions_the_suite_tests() -> None:
    classifiers = PYPROJECT["project"]["classifiers"]
    named = sorted(c.rsplit(" :: ", 1)[1] for c in classifiers
                   if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c))
    # The wheels' versions: tests/broker/test_wheels.py builds a wheel for each, installs
    # it without a compiler and runs it against the broker, in `make test`.
    assert named == list(wheel_tools.VERSIONS) == ["3.11", "3.12", "3.13"]
    minimum = PYPROJECT["project"]["requires-python"]
    assert minimum == f">={named[0]}"
    assert "Typing :: Typed" in classifiers and "Framework :: AsyncIO" in classifiers
    # PEP 639: an SPDX license expression, and no License :: classifier beside it.
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_project_urls_and_changelog() -> None:
    urls = PYPROJECT["project"]["urls"]
    assert {"Homepage", "Documentation", "Source", "Changelog", "Issues"} <= set(urls)
    base = urls["Source"]
    assert all(u.startswith(base) for u in urls.values()), urls
    assert urls["Changelog"].endswith("/CHANGELOG.md")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {_version.__version__}" in changelog
