"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a
missing page in the nav or an API reference entry that no longer resolves fails it).
``make test`` installs the docs extra for this; ``make docs`` builds into ``site/``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_build_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
         str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, check=False)
    assert proc.returncode == 0, ("mkdocs build --strict failed (the docs extra comes "
                                  "with `make test`):\n" + proc.stderr[-4000:])
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "performance" / "index.html").is_file()
