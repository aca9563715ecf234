"""A traced FastAPI handler: each request's span is the parent of the producer's
``send orders`` span, whose context travels to the consumers in the record's
``traceparent`` header.

Run it with OpenTelemetry configured, for instance by the ``opentelemetry-instrument``
launcher (which also gives FastAPI its server spans):

    KAFKA_BOOTSTRAP=127.0.0.1:9092 opentelemetry-instrument uvicorn examples.fastapi_tracing:app

``tests/broker/test_otel_fastapi.py`` runs it with FastAPI's TestClient against a real
broker and checks the spans and the headers.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from opentelemetry import trace

from aioproducer import Producer


def create_app(bootstrap: str, topic: str = "orders",
               tracer_provider: Any = "global") -> FastAPI:
    """The app; ``tracer_provider``: an OpenTelemetry TracerProvider, or "global"."""
    tracer = trace.get_tracer(__name__, tracer_provider=(
        None if tracer_provider == "global" else tracer_provider))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Producer(bootstrap_servers=bootstrap,
                            tracer_provider=tracer_provider) as producer:
            app.state.producer = producer
            yield  # close() on shutdown sends what is buffered

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders/{order_id}")
    async def create_order(order_id: str, request: Request) -> dict[str, int]:
        with tracer.start_as_current_span("create_order"):
            meta = await request.app.state.producer.send_and_wait(
                topic, await request.body(), key=order_id.encode())
        return {"partition": meta.partition, "offset": meta.offset}

    return app


app = create_app(os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
