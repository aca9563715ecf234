"""What the other modules of :mod:`aioproducer.devbroker` share: the host every node
listens on, the error raised when a node does not start, a helper for log tails, and
the state file a cluster keeps in its directory (read and written whole)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_HOST = "127.0.0.1"


def load_state(path: Path) -> dict[str, Any] | None:
    """A cluster's state file, or None if it is missing or unreadable."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write a cluster's state file whole (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)


class BrokerStartError(RuntimeError):
    """A node did not start (in time); ``logs`` holds the tail of each failing node's log."""

    def __init__(self, message: str, logs: str = "", *, port_in_use: bool = False) -> None:
        super().__init__(f"{message}\n{logs}" if logs else message)
        self.logs = logs
        self.port_in_use = port_in_use


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])
