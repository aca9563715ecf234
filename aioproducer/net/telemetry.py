"""KIP-714 client telemetry requests: GetTelemetrySubscriptions (API key 71) and
PushTelemetry (API key 72), both at version 0 (the only one Kafka 3.7 to 4.3 know),
as kio entities over a :class:`~aioproducer.net.connection.BrokerConnection`.

A broker advertises these APIs only when a metric reporter that receives client
telemetry is configured on it; :func:`telemetry_supported` tells from the
connection's ApiVersions answer. :mod:`aioproducer.telemetry` drives them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Final

from kio.static.primitive import i8, i32

from .apis import ApiKey

if TYPE_CHECKING:
    from kio.schema.get_telemetry_subscriptions.v0.response import (
        GetTelemetrySubscriptionsResponse,
    )
    from kio.schema.push_telemetry.v0.response import PushTelemetryResponse

    from .connection import BrokerConnection
else:

    def __getattr__(name: str) -> Any:
        # kio's classes, imported when first asked for (the requests import them only
        # when a broker offers telemetry).
        if name == "GetTelemetrySubscriptionsResponse":
            from kio.schema.get_telemetry_subscriptions.v0.response import (
                GetTelemetrySubscriptionsResponse as value,
            )
        elif name == "PushTelemetryResponse":
            from kio.schema.push_telemetry.v0.response import PushTelemetryResponse as value
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value
        return value

__all__ = [
    "GET_TELEMETRY_SUBSCRIPTIONS_KEY",
    "PUSH_TELEMETRY_KEY",
    "ZERO_UUID",
    "GetTelemetrySubscriptionsResponse",
    "PushTelemetryResponse",
    "get_telemetry_subscriptions",
    "push_telemetry",
    "telemetry_supported",
]

GET_TELEMETRY_SUBSCRIPTIONS_KEY: Final = int(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS)
PUSH_TELEMETRY_KEY: Final = int(ApiKey.PUSH_TELEMETRY)
#: The client instance id of a client that has none yet (the broker assigns one).
ZERO_UUID: Final = uuid.UUID(int=0)


def telemetry_supported(conn: BrokerConnection) -> bool:
    """Whether the broker behind ``conn`` offers both telemetry APIs at version 0."""
    for key in (GET_TELEMETRY_SUBSCRIPTIONS_KEY, PUSH_TELEMETRY_KEY):
        versions = conn.api_versions.get(key)
        if versions is None or not versions[0] <= 0 <= versions[1]:
            return False
    return True


async def get_telemetry_subscriptions(
        conn: BrokerConnection, client_instance_id: uuid.UUID | None,
        *, timeout_ms: int | None = None) -> GetTelemetrySubscriptionsResponse:
    """Ask for this client's subscription; ``None`` (or the zero id) on the first
    request, so that the broker assigns a client instance id."""
    from kio.schema.get_telemetry_subscriptions.v0 import (
        GetTelemetrySubscriptionsRequest,
        GetTelemetrySubscriptionsResponse,
    )
    req = GetTelemetrySubscriptionsRequest(client_instance_id=client_instance_id or ZERO_UUID)
    return await conn.request(req, GetTelemetrySubscriptionsResponse, timeout_ms=timeout_ms)


async def push_telemetry(conn: BrokerConnection, client_instance_id: uuid.UUID,
                         subscription_id: int, payload: bytes, *, compression_type: int = 0,
                         terminating: bool = False,
                         timeout_ms: int | None = None) -> PushTelemetryResponse:
    """Push one (possibly compressed) OTLP ``MetricsData`` payload."""
    from kio.schema.push_telemetry.v0 import PushTelemetryRequest, PushTelemetryResponse
    req = PushTelemetryRequest(client_instance_id=client_instance_id,
                               subscription_id=i32(subscription_id), terminating=terminating,
                               compression_type=i8(compression_type), metrics=payload)
    return await conn.request(req, PushTelemetryResponse, timeout_ms=timeout_ms)
