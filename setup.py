"""Build of aioproducer's compiled core: every ``aioproducer/_native/*.pyx``.

Metadata lives in pyproject.toml; this file only declares the extensions.

Switches (environment variables, read at build time):

``AIOPRODUCER_DEBUG=1``
    ``-O0 -g``, Cython line tracing (``linetrace`` + ``CYTHON_TRACE``) for
    coverage/profilers, Cython's own bounds/wraparound checks back on, and the
    C macro ``AIOPRODUCER_DEBUG``, which turns on the core's extra assertion
    checks (``if AIOP_DEBUG:`` blocks; compiled away otherwise).
``AIOPRODUCER_ANNOTATE=1``
    Also write Cython's annotated ``.html`` (next to the generated ``.c`` files,
    in ``build/cython/<mode>/``).

There is deliberately no "optional extension" fallback: a failed compile fails
the install.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
NATIVE = Path("aioproducer") / "_native"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


DEBUG = _flag("AIOPRODUCER_DEBUG")
ANNOTATE = _flag("AIOPRODUCER_ANNOTATE")

# All Cython directives, in one place.
#
# boundscheck/wraparound are off because the core never indexes a Python
# sequence without checking the index itself first, and all writes into block
# memory go through the bounds-checked Writer (aioproducer/_native/wire.pxd),
# which checks before every single write.  cdivision is on because every
# division/modulo has a positive divisor that is validated beforehand.
# A debug build turns Cython's own checks back on as a second net.
DIRECTIVES: dict[str, object] = {
    "language_level": 3,
    "embedsignature": True,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "cdivision": not DEBUG,
    "initializedcheck": DEBUG,
    # Declared in every module (the Py_mod_gil slot): the core needs the GIL. Its buffer
    # pool, batches and futures are used from one event loop's thread and rely on the
    # GIL for the rest, so a free-threaded ("t") CPython re-enables the GIL when it
    # imports them (with a RuntimeWarning). See docs/install.md.
    "freethreading_compatible": False,
}
if DEBUG:
    DIRECTIVES["linetrace"] = True
    DIRECTIVES["profile"] = True

# GCC/Clang flags.  -Wconversion (which for C includes -Wsign-conversion) is
# on: Cython 3.3's generated code silences it where it narrows on purpose, and
# the core itself casts explicitly, so the build is warning-free with it and any
# new implicit narrowing shows up.
RELEASE_CFLAGS = ["-O2", "-Wall", "-Wconversion"]
DEBUG_CFLAGS = ["-O0", "-g", "-Wall", "-Wconversion", "-UNDEBUG"]
MSVC_RELEASE_CFLAGS = ["/O2", "/W3"]
MSVC_DEBUG_CFLAGS = ["/Od", "/Zi", "/W3"]

DEBUG_MACROS = [
    ("AIOPRODUCER_DEBUG", "1"),
    ("CYTHON_TRACE", "1"),
    ("CYTHON_TRACE_NOGIL", "1"),
]


class BuildExt(build_ext):
    """Picks the compiler flags for the compiler actually in use."""

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        if DEBUG:
            cflags = MSVC_DEBUG_CFLAGS if msvc else DEBUG_CFLAGS
        else:
            cflags = MSVC_RELEASE_CFLAGS if msvc else RELEASE_CFLAGS
        for ext in self.extensions:
            ext.extra_compile_args = [*cflags, *ext.extra_compile_args]
        super().build_extensions()


# The compression thread (compressor.pyx) links the vendored zstd and LZ4 sources
# (aioproducer/_native/vendor/README.md), each compiled as its own unit. Their symbols
# stay inside the module (-fvisibility=hidden: only the module's init is exported), and
# the linker drops what the thread does not call (the decompressors, among others).
VENDOR = NATIVE / "vendor"
VENDORED: dict[str, dict[str, list[Any]]] = {
    "compressor": {
        "sources": [str(VENDOR / f"unit_{name}.c")
                    for name in ("zstd", "lz4", "lz4hc", "lz4frame", "xxhash")],
        "include_dirs": [str(VENDOR)],
        # The libraries mark their API "default" visibility unless told otherwise.
        "define_macros": [(name, "") for name in (
            "ZSTDLIB_VISIBLE", "ZSTDERRORLIB_VISIBLE", "ZDICTLIB_VISIBLE",
            "LZ4LIB_VISIBILITY", "LZ4FLIB_VISIBILITY")],
        "extra_compile_args": ["-fvisibility=hidden", "-ffunction-sections",
                               "-fdata-sections", "-pthread"],
        # (macOS's linker calls it -dead_strip.)
        "extra_link_args": ["-Wl,-dead_strip" if sys.platform == "darwin"
                            else "-Wl,--gc-sections", "-pthread"],
    },
}


def extensions() -> list[Extension]:
    mods = sorted((HERE / NATIVE).glob("*.pyx"))
    if not mods:
        raise SystemExit(f"no .pyx files found in {HERE / NATIVE}")
    exts = [
        Extension(
            f"aioproducer._native.{pyx.stem}",
            [str(NATIVE / pyx.name), *VENDORED.get(pyx.stem, {}).get("sources", [])],
            define_macros=[*(DEBUG_MACROS if DEBUG else []),
                           *VENDORED.get(pyx.stem, {}).get("define_macros", [])],
            include_dirs=VENDORED.get(pyx.stem, {}).get("include_dirs", []),
            extra_compile_args=VENDORED.get(pyx.stem, {}).get("extra_compile_args", []),
            extra_link_args=VENDORED.get(pyx.stem, {}).get("extra_link_args", []),
        )
        for pyx in mods
    ]
    mode = "debug" if DEBUG else "release"
    return cythonize(
        exts,
        compiler_directives=DIRECTIVES,
        annotate=ANNOTATE,
        # One directory per mode: switching AIOPRODUCER_DEBUG regenerates the C
        # code instead of reusing .c files made with the other directives.
        build_dir=str(Path("build") / "cython" / mode),
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
