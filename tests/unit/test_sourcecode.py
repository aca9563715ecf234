"""Lint and type checks are part of the suite (ruff on the package, tests/, bench/, fuzz/,
soak/; mypy --strict on the package)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_ruff_clean() -> None:
    r = _run("ruff", "check", "aioproducer", "tests", "bench", "fuzz", "soak", "tools",
             "setup.py")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict_on_the_package() -> None:
    r = _run("mypy", "--strict", "aioproducer")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("module", ["pool", "batch", "murmur2", "scan"])
def test_import_without_compiled_core_fails_clearly(module: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules['aioproducer._native.{module}'] = None\n"
        "try:\n"
        "    import aioproducer\n"
        "except ImportError as e:\n"
        "    print(e)\n"
        "else:\n"
        "    print('IMPORTED')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert "IMPORTED" not in r.stdout
    assert "compiled core" in r.stdout and "pip install -e ." in r.stdout, r.stdout + r.stderr


def test_py_typed_and_stubs_ship() -> None:
    pkg = ROOT / "aioproducer"
    assert (pkg / "py.typed").exists()
    for name in ("pool", "batch", "murmur2", "records", "scan"):
        assert (pkg / "_native" / f"{name}.pyi").exists()
