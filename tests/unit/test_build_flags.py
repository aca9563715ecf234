"""What the compiled core declares to the interpreter: that it needs the GIL.

Every module's ``Py_mod_gil`` slot says ``Py_MOD_GIL_USED`` (``setup.py``:
``freethreading_compatible`` off), so a free-threaded CPython turns the GIL back on
when it imports aioproducer (docs/install.md). No free-threaded interpreter can be
installed on the project's machines, so this is checked on the C that Cython generated
for this build (``make build`` writes it under ``build/cython/release``)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
MODULES = sorted(p.stem for p in (ROOT / "aioproducer" / "_native").glob("*.pyx"))


def _directives() -> dict[str, object]:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "DIRECTIVES" for t in targets):
                assert node.value is not None
                return dict(ast.literal_eval(ast.unparse(node.value).replace(
                    "DEBUG", "False").replace("not False", "True")))
    raise AssertionError("no DIRECTIVES in setup.py")


def test_setup_declares_the_core_needs_the_gil() -> None:
    assert _directives()["freethreading_compatible"] is False


def test_every_generated_module_has_the_gil_slot() -> None:
    build = ROOT / "build" / "cython" / "release" / "aioproducer" / "_native"
    if not build.is_dir():
        pytest.skip("no release build in this checkout (make build)")
    for name in MODULES:
        c = (build / f"{name}.c").read_text()
        assert re.search(r"\{Py_mod_gil, __Pyx_FREETHREADING_COMPATIBLE\}", c), name
        assert "#define CYTHON_FREETHREADING_COMPATIBLE 1" not in c, name
        # Unless the C compiler is told otherwise, the slot's value is Py_MOD_GIL_USED.
        default = c[c.index("#ifdef CYTHON_FREETHREADING_COMPATIBLE"):]
        default = default[default.index("#else\n#define __Pyx_FREETHREADING_COMPATIBLE"):]
        assert default.split("\n")[1] == "#define __Pyx_FREETHREADING_COMPATIBLE Py_MOD_GIL_USED"


def test_this_interpreter_runs_with_the_gil() -> None:
    """On a default build the GIL is always on; on a free-threaded one, importing the
    core has turned it back on (the slot above)."""
    import aioproducer._native  # noqa: F401

    assert getattr(sys, "_is_gil_enabled", lambda: True)()
