"""What the other modules of :mod:`aioproducer.devbroker` share: the host every node
listens on, the error raised when a node does not start, and a helper for log tails."""

from __future__ import annotations

_HOST = "127.0.0.1"


class BrokerStartError(RuntimeError):
    """A node did not start (in time); ``logs`` holds the tail of each failing node's log."""

    def __init__(self, message: str, logs: str = "", *, port_in_use: bool = False) -> None:
        super().__init__(f"{message}\n{logs}" if logs else message)
        self.logs = logs
        self.port_in_use = port_in_use


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])
