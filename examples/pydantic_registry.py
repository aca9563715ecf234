"""Pydantic models sent through a Schema Registry: the model's JSON Schema is registered
under ``orders-value`` on the first send (the registry checks it against the subject's
compatibility rule), and every record carries the schema id in Confluent's wire format,
so any Confluent-compatible consumer decodes it.

    KAFKA_BOOTSTRAP=127.0.0.1:9092 SCHEMA_REGISTRY_URL=http://127.0.0.1:8081 \\
        python examples/pydantic_registry.py

(Apicurio Registry serves the same API under ``/apis/ccompat/v7``.)
``tests/broker/test_schema_registry.py`` runs :func:`main` against a real registry and
broker.
"""

from __future__ import annotations

import asyncio
import os

from pydantic import BaseModel

from aioproducer import Producer
from aioproducer.schema import AsyncSchemaRegistryClient, PydanticSerializer


class Order(BaseModel):
    id: int
    item: str
    quantity: int = 1


async def main(bootstrap: str, registry_url: str, topic: str = "orders",
               count: int = 3) -> list[int]:
    """Send ``count`` orders; their offsets."""
    async with AsyncSchemaRegistryClient(registry_url) as registry, \
            Producer(bootstrap_servers=bootstrap,
                     value_serializer=PydanticSerializer(registry, Order)) as producer:
        futures = [await producer.send(topic, value=Order(id=i, item=f"item-{i}"))
                   for i in range(count)]
        return [(await f).offset for f in futures]


if __name__ == "__main__":
    print(asyncio.run(main(os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                           os.environ.get("SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081"))))
