"""The wheels and the sdist, as a user gets them (``make wheel``, ``tools/wheels.py``).

For each CPython 3.11-3.13 on the machine: the manylinux wheel's contents and size; then
the wheel installed into a fresh venv whose PATH has no compiler and which has no
Cython (dependencies from the index as wheels only: nothing may compile), every
compiled module imported from the installed wheel, and records sent there with
``send``, ``send_many`` and ``send_and_wait`` to the test broker, read back here by
confluent-kafka and compared field by field. The sdist: everything ``setup.py`` needs,
nothing generated (the wheels above are built from it).

The wheels come from ``dist/`` when they are there and newer than every source file,
else this module builds them first (``tools/wheels.py``, a few minutes). Slow:
``make test`` runs it, ``-m "not slow"`` leaves it out. The venvs install the
dependencies from the package index (or pip's cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest
from support.kafka_util import consume_all

import aioproducer
from tools import wheels as wheel_tools

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent.parent
NATIVE = ROOT / "aioproducer" / "_native"
MODULES = sorted(p.stem for p in NATIVE.glob("*.pyx"))
STUBS = sorted(p.name for p in NATIVE.glob("*.pyi"))
HEADERS = sorted(p.name for p in NATIVE.glob("*.pxd"))
VERSION = aioproducer.__version__
# A wheel holds 9 compiled modules (no debug information) and the pure-Python
# package: 0.8 MB compressed in November 2026, 1.12-1.14 MB since the compression
# thread's module carries zstd's and LZ4's compressors (0.6 MB uncompressed). 1.5 MB
# leaves room for growth and catches a wheel that ships debug information or stray
# build files.
MAX_WHEEL_BYTES = 1_500_000
BUILD_TIMEOUT = 1800.0


def _tag(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}"
                          "{sys.version_info[1]}')"], check=True, capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip()


def _sources_mtime() -> float:
    files = [*ROOT.joinpath("aioproducer").rglob("*.py"), *NATIVE.glob("*.p[yx][xid]"),
             *(ROOT / n for n in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md"))]
    return max(f.stat().st_mtime for f in files if f.is_file())


@pytest.fixture(scope="module")
def interpreters() -> dict[str, str]:
    """``{"cp312": "/path/python3.12", ...}``: every CPython of ``tools/wheels.py``
    found here."""
    found = {_tag(p): p for p in wheel_tools.find_interpreters()}
    if not found:
        pytest.fail("no CPython 3.11-3.13 found", pytrace=False)
    return found


@pytest.fixture(scope="module")
def dist(interpreters: dict[str, str]) -> Path:
    """``dist/`` with the sdist and a wheel for each interpreter, built now unless they
    are there and newer than every source."""
    dist = ROOT / "dist"
    wanted = [dist / f"aioproducer-{VERSION}.tar.gz",
              *(_wheel(dist, tag) for tag in interpreters)]
    if any(w is None or not w.is_file() for w in wanted) or min(
            w.stat().st_mtime for w in wanted if w is not None) < _sources_mtime():
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / "wheels.py"),
                               *(a for p in interpreters.values() for a in ("--python", p))],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT, cwd=ROOT)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    return dist


def _wheel(dist: Path, tag: str) -> Path | None:
    found = sorted(dist.glob(f"aioproducer-{VERSION}-{tag}-{tag}-manylinux*.whl"))
    return found[-1] if found else None


@pytest.fixture(params=[f"cp{v.replace('.', '')}" for v in wheel_tools.VERSIONS])
def wheel(request: pytest.FixtureRequest, interpreters: dict[str, str],
          dist: Path) -> Iterator[tuple[str, Path]]:
    tag: str = request.param
    if tag not in interpreters:
        pytest.skip(f"no {tag} interpreter on this machine")
    path = _wheel(dist, tag)
    assert path is not None, sorted(p.name for p in dist.iterdir())
    yield interpreters[tag], path


def test_wheel_contents(wheel: tuple[str, Path]) -> None:
    _, path = wheel
    size = path.stat().st_size
    print(f"\n{path.name}: {size:,} bytes")
    assert size < MAX_WHEEL_BYTES
    # auditwheel's tag: glibc 2.17, as docs/install.md promises (a call to a symbol
    # versioned later, such as pthread_create@GLIBC_2.34, would raise it).
    assert "manylinux_2_17" in path.name, path.name
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        metadata = Parser().parsestr(z.read(f"aioproducer-{VERSION}.dist-info/METADATA")
                                     .decode())
        wheel_info = z.read(f"aioproducer-{VERSION}.dist-info/WHEEL").decode()
        sos = {n for n in names if n.endswith(".so")}
    top = {n.split("/", 1)[0] for n in names}
    assert top == {"aioproducer", f"aioproducer-{VERSION}.dist-info"}, top
    # Every compiled module, once; its stub; the typed marker; the .pxd headers.
    assert sorted(n.split("/")[-1].split(".")[0] for n in sos) == MODULES
    assert all(n.startswith("aioproducer/_native/") for n in sos)
    assert {f"aioproducer/_native/{s}" for s in STUBS} <= set(names)
    assert {f"aioproducer/_native/{h}" for h in HEADERS} <= set(names)
    assert "aioproducer/py.typed" in names
    # Nothing generated or for developers: no C, no annotation HTML, no tests, no
    # bytecode, no libraries grafted by auditwheel (the core needs libc only).
    assert not [n for n in names if n.endswith((".c", ".h", ".html", ".pyc"))]
    assert not [n for n in names if "/tests/" in n or n.startswith(("tests/", "bench/"))]
    assert not [n for n in names if ".libs/" in n]
    assert "Root-Is-Purelib: false" in wheel_info
    assert metadata["Version"] == VERSION
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = set(metadata.get_all("Classifier") or [])
    assert {f"Programming Language :: Python :: 3.{m}" for m in (11, 12, 13)} <= classifiers
    assert metadata.get_all("Project-URL")


def test_wheel_has_no_rpath_and_no_debug_info(wheel: tuple[str, Path],
                                             tmp_path: Path) -> None:
    """No absolute RPATH of the build machine's interpreter, no DWARF sections."""
    _, path = wheel
    with zipfile.ZipFile(path) as z:
        z.extractall(tmp_path)
    for so in sorted(tmp_path.rglob("*.so")):
        dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True,
                             check=True).stdout
        assert "RPATH" not in dyn and "RUNPATH" not in dyn, (so.name, dyn)
        needed = [line.split("[")[1].rstrip("]") for line in dyn.splitlines()
                  if "(NEEDED)" in line]
        assert set(needed) <= {"libc.so.6", "libpthread.so.0", "libm.so.6"}, (so.name,
                                                                              needed)
        sections = subprocess.run(["readelf", "-S", "-W", str(so)], capture_output=True,
                                  text=True, check=True).stdout
        assert ".debug_info" not in sections, so.name


def test_sdist_contents(dist: Path) -> None:
    sdist = dist / f"aioproducer-{VERSION}.tar.gz"
    print(f"\n{sdist.name}: {sdist.stat().st_size:,} bytes")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE",
                   "CHANGELOG.md", "aioproducer/py.typed", "aioproducer/_version.py",
                   *(f"aioproducer/_native/{m}.pyx" for m in MODULES),
                   *(f"aioproducer/_native/{s}" for s in STUBS),
                   *(f"aioproducer/_native/{h}" for h in HEADERS)):
        assert needed in names, needed
    # No generated C; the vendored libraries of the compression thread are sources.
    vendored = {n for n in names if n.startswith("aioproducer/_native/vendor/")}
    assert not [n for n in names - vendored if n.endswith((".c", ".so", ".html", ".pyc"))]
    assert {"aioproducer/_native/vendor/zstd/zstd.c", "aioproducer/_native/vendor/lz4/lz4.c",
            "aioproducer/_native/vendor/zstd/LICENSE", "aioproducer/_native/vendor/lz4/LICENSE",
            "aioproducer/_native/vendor/README.md"} <= vendored
    assert not [n for n in names if n.startswith(("build/", "tests/", ".broker", ".cache"))]


_CLIENT = textwrap.dedent('''
    import asyncio, importlib, importlib.machinery, json, shutil, sys
    from pathlib import Path

    bootstrap, topic, modules = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    t0 = int(sys.argv[4])
    import aioproducer
    from aioproducer import Producer

    site = Path(sys.prefix)
    assert Path(aioproducer.__file__).resolve().is_relative_to(site), aioproducer.__file__
    loaded = {}
    for name in modules:
        mod = importlib.import_module(f"aioproducer._native.{name}")
        assert isinstance(mod.__loader__, importlib.machinery.ExtensionFileLoader), name
        loaded[name] = Path(mod.__file__).name
    try:
        import Cython  # noqa: F401
        cython = True
    except ImportError:
        cython = False

    async def main():
        out = []
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            futs = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=0,
                                        headers=[("h", b"%d" % i)],
                                        timestamp_ms=t0 + i)
                    for i in range(100)]
            for f in futs:
                md = await f
                out.append([md.partition, md.offset, md.timestamp])
            assert await (await producer.send_many(topic, [b"m%d" % i for i in range(100)],
                                                   partition=0)) == 100
            md = await producer.send_and_wait(topic, b"last", key=b"k", partition=0)
            out.append([md.partition, md.offset, md.timestamp])
        return out

    print(json.dumps({"version": aioproducer.__version__, "modules": loaded,
                      "cython": cython, "cc": [shutil.which(c) for c in ("cc", "gcc", "clang")],
                      "sent": asyncio.run(main())}))
''')


def test_wheel_installs_without_a_compiler_and_round_trips(
        wheel: tuple[str, Path], tmp_path: Path, kafka_bootstrap: str,
        topic_factory: object) -> None:
    python, path = wheel
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    # Only the venv on PATH: no cc/gcc/clang, no Cython; pip may take wheels only.
    env = {"PATH": str(venv / "bin"), "HOME": os.environ.get("HOME", str(tmp_path)),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "LANG": "C.UTF-8"}
    # How this machine reaches the package index (pip's settings, certificates, a proxy).
    env.update({k: v for k, v in os.environ.items()
                if k.startswith(("PIP_", "SSL_CERT_")) or k.lower().endswith("_proxy")
                or k == "REQUESTS_CA_BUNDLE"})
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--only-binary=:all:", str(path)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-4000:]
    topic = topic_factory(partitions=1)  # type: ignore[operator]
    t0 = (int(time.time()) - 3600) * 1000  # recent: within the broker's retention
    run = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", _CLIENT, kafka_bootstrap,
                          topic, ",".join(MODULES), str(t0)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout)
    assert report["version"] == VERSION
    assert report["cython"] is False and report["cc"] == [None, None, None]
    assert sorted(report["modules"]) == MODULES
    cli = subprocess.run([str(venv / "bin" / "aioproducer"), "--version"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and cli.stdout.startswith(f"aioproducer {VERSION} (CPython 3.")

    consumed = consume_all(kafka_bootstrap, topic, 201, timeout=60)
    assert [(c.partition, c.offset) for c in consumed] == [(0, i) for i in range(201)]
    sent = report["sent"]
    for i, c in enumerate(consumed[:100]):
        assert sent[i] == [c.partition, c.offset, c.timestamp]
        assert (c.key, c.value, c.headers, c.timestamp) == (
            b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], t0 + i)
    assert [c.value for c in consumed[100:200]] == [b"m%d" % i for i in range(100)]
    assert (consumed[200].key, consumed[200].value) == (b"k", b"last")
    assert sent[100] == [0, 200, consumed[200].timestamp]
