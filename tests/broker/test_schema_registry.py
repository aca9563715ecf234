"""Schema Registry serializers against a real registry (Apicurio Registry, Confluent's API
under /apis/ccompat/v7, tests/support/registry.py) and the real broker: what aioproducer
writes is read back and decoded by confluent-kafka's own deserializers."""

from __future__ import annotations

import asyncio
import datetime
import enum
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from pydantic import BaseModel, ConfigDict, Field
from support.kafka_util import consume_all
from support.registry import (  # noqa: F401  (session fixtures)
    REGISTRY_USERS,
    TLSFiles,
    TokenIssuer,
    auth_schema_registry,
    schema_registry_url,
    tls_schema_registry,
)

from aioproducer import KafkaError, Producer
from aioproducer.schema import (
    AsyncSchemaRegistryClient,
    AvroSerializer,
    JSONSchemaSerializer,
    ProtobufSerializer,
    PydanticSerializer,
    SchemaIncompatibleError,
    SchemaNotFoundError,
    SchemaRegistryError,
)

pytestmark = pytest.mark.asyncio

USER_AVRO = {
    "type": "record", "name": "User", "namespace": "h6.test",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def _ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def _read(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    got = consume_all(bootstrap, topic, expected, timeout=60.0)
    return [r.value for r in got if r.value is not None]


@pytest.fixture
def confluent_sr(schema_registry_url: str) -> Iterator[SchemaRegistryClient]:  # noqa: F811
    with SchemaRegistryClient({"url": schema_registry_url}) as client:
        yield client


async def test_avro_read_back_by_confluent_deserializer(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        confluent_sr: SchemaRegistryClient) -> None:
    records = [{"name": f"user-{i}", "age": 20 + i, "email": None if i % 2 else f"u{i}@x",
                "tags": ["a"] * i} for i in range(5)]
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr:
        ser = AvroSerializer(sr, USER_AVRO)
        async with Producer(bootstrap_servers=kafka_bootstrap, value_serializer=ser,
                            linger_ms=0) as producer:
            for rec in records:
                await (await producer.send(kafka_topic, rec))
    des = AvroDeserializer(confluent_sr)
    back = [des(v, _ctx(kafka_topic)) for v in _read(kafka_bootstrap, kafka_topic, 5)]
    assert back == records
    assert confluent_sr.get_subjects().count(f"{kafka_topic}-value") == 1


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Address(BaseModel):
    city: str
    zip: str | None = None


class Customer(BaseModel):
    """A customer."""

    id: int
    name: str
    plan: Plan = Plan.FREE
    score: float = 0.0
    address: Address
    labels: list[str] = Field(default_factory=list)


def _customers() -> list[Customer]:
    return [Customer(id=i, name=f"c{i}", plan=Plan.PRO if i % 2 else Plan.FREE,
                     score=i / 4, address=Address(city=f"city{i}",
                                                  zip=None if i % 2 else f"{i:05d}"),
                     labels=[f"l{j}" for j in range(i)]) for i in range(4)]


async def test_pydantic_json_read_back_by_confluent_deserializer(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        confluent_sr: SchemaRegistryClient) -> None:
    customers = _customers()
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=PydanticSerializer(sr, Customer)) as producer:
        for c in customers:
            await producer.send(kafka_topic, value=c)
        await producer.flush()
    # The writer's schema comes from the registry by the id in each record.
    des = JSONDeserializer(None, schema_registry_client=confluent_sr)
    back = [Customer.model_validate(des(v, _ctx(kafka_topic)))
            for v in _read(kafka_bootstrap, kafka_topic, len(customers))]
    assert back == customers
    for got, sent in zip(back, customers, strict=True):  # field by field
        assert (got.id, got.name, got.plan, got.score, got.address.city, got.address.zip,
                got.labels) == (sent.id, sent.name, sent.plan, sent.score, sent.address.city,
                                sent.address.zip, sent.labels)


class Event(BaseModel):
    id: int
    kind: str
    at: datetime.datetime
    payload: bytes = b""
    ratio: float | None = None


async def test_pydantic_avro_read_back_by_confluent_deserializer(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        confluent_sr: SchemaRegistryClient) -> None:
    at = datetime.datetime(2026, 11, 25, 12, 0, 0, 123000, tzinfo=datetime.timezone.utc)
    events = [Event(id=i, kind=f"k{i}", at=at + datetime.timedelta(seconds=i),
                    payload=bytes([i]) * i, ratio=None if i % 2 else i / 2) for i in range(4)]
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=PydanticSerializer(sr, Event, format="avro",
                                                         namespace="h6.test")) as producer:
        for e in events:
            await producer.send(kafka_topic, value=e)
        await producer.flush()
    des = AvroDeserializer(confluent_sr)
    back = [Event.model_validate(des(v, _ctx(kafka_topic)))
            for v in _read(kafka_bootstrap, kafka_topic, len(events))]
    assert back == events


def _protobuf_classes() -> tuple[Any, Any]:
    """Two message types of one file, built at run time (``User`` is the second message:
    its message index is [1]; ``Other.Inner`` is [0, 0])."""
    fdp = descriptor_pb2.FileDescriptorProto(name="h6/user.proto", package="h6test",
                                             syntax="proto3")
    f = descriptor_pb2.FieldDescriptorProto
    other = fdp.message_type.add(name="Other")
    other.field.add(name="x", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    inner = other.nested_type.add(name="Inner")
    inner.field.add(name="flag", number=1, type=f.TYPE_BOOL, label=f.LABEL_OPTIONAL)
    user = fdp.message_type.add(name="User")
    user.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    user.field.add(name="age", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    user.field.add(name="tags", number=3, type=f.TYPE_STRING, label=f.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName("h6test.User")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName("h6test.Other.Inner")))


async def test_protobuf_read_back_by_confluent_deserializer(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        topic_factory: Any) -> None:
    user_cls, inner_cls = _protobuf_classes()
    users = [user_cls(name=f"u{i}", age=30 + i, tags=[f"t{j}" for j in range(i)])
             for i in range(4)]
    inner_topic = topic_factory()
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr:
        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=ProtobufSerializer(sr, user_cls)) as producer:
            for u in users:
                await producer.send(kafka_topic, value=u)
        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=ProtobufSerializer(sr, inner_cls)) as producer:
            await producer.send_and_wait(inner_topic, inner_cls(flag=True))
    des = ProtobufDeserializer(user_cls, {"use.deprecated.format": False})
    raw = _read(kafka_bootstrap, kafka_topic, len(users))
    assert raw[0][5:6] == b"\x02\x02"[:1]  # message indexes [1]: count 1 (zig-zag 2)...
    assert raw[0][5:7] == b"\x02\x02"       # ... then 1 (zig-zag 2)
    back = [des(v, _ctx(kafka_topic)) for v in raw]
    assert back == users
    inner_raw = _read(kafka_bootstrap, inner_topic, 1)
    assert inner_raw[0][5:8] == b"\x04\x00\x00"  # [0, 0]
    got = ProtobufDeserializer(inner_cls, {"use.deprecated.format": False})(
        inner_raw[0], _ctx(inner_topic))
    assert got.flag is True


async def test_subject_name_strategies(
        kafka_bootstrap: str, topic_factory: Any,
        schema_registry_url: str) -> None:  # noqa: F811
    topics = [topic_factory() for _ in range(3)]
    schema = dict(USER_AVRO, name="StrategyUser", namespace="h6.strat")
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr:
        for topic, strategy in zip(topics, ("topic", "record", "topic_record"), strict=True):
            ser = AvroSerializer(sr, schema, subject_name_strategy=strategy)
            key_ser = JSONSchemaSerializer(sr, {"title": "h6.strat.Key", "type": "object",
                                                "properties": {"k": {"type": "string"}}},
                                           subject_name_strategy=strategy)
            async with Producer(bootstrap_servers=kafka_bootstrap, value_serializer=ser,
                                key_serializer=key_ser) as producer:
                await producer.send_and_wait(
                    topic, {"name": "n", "age": 1, "email": None, "tags": []}, key={"k": "k"})
        subjects = set(await sr.get_subjects())
    assert {f"{topics[0]}-value", f"{topics[0]}-key", "h6.strat.StrategyUser",
            "h6.strat.Key", f"{topics[2]}-h6.strat.StrategyUser",
            f"{topics[2]}-h6.strat.Key"} <= subjects
    assert f"{topics[1]}-value" not in subjects


async def test_many_sends_one_registration(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str) -> None:  # noqa: F811
    requests: list[str] = []

    async def count(request: httpx.Request) -> None:
        requests.append(f"{request.method} {request.url.path}")

    n = 200
    async with AsyncSchemaRegistryClient(schema_registry_url,
                                         event_hooks={"request": [count]}) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=PydanticSerializer(sr, Address)) as producer:
        # Concurrent first sends too: one registration between them.
        futs = await asyncio.gather(*(producer.send(kafka_topic, Address(city=f"c{i}"))
                                      for i in range(n)))
        await asyncio.gather(*futs)
    assert requests == [f"POST /apis/ccompat/v7/subjects/{kafka_topic}-value/versions"]
    assert len(_read(kafka_bootstrap, kafka_topic, n)) == n


# extra="forbid": a closed JSON Schema (additionalProperties false), under which adding an
# optional property is a compatible change; with an open one (Pydantic's default) any new
# property narrows the schema (JSON Schema's open content model) and is refused.
class OrderV1(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int


class OrderV2(BaseModel):  # a new required field, no default: not BACKWARD compatible
    model_config = ConfigDict(extra="forbid")
    id: int
    amount: int


class OrderV2Ok(BaseModel):  # a new field with a default: BACKWARD compatible
    model_config = ConfigDict(extra="forbid")
    id: int
    amount: int = 0


@pytest.mark.parametrize("fmt", ["avro", "json"])
async def test_incompatible_evolution_is_refused_before_sending(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        fmt: str) -> None:
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr:
        subject = f"{kafka_topic}-value"

        def serializer(model: type) -> PydanticSerializer:
            # One record name for the three versions (Avro compares records by name).
            ser = PydanticSerializer(sr, model, format=fmt)
            ser.inner.schema = type(ser.inner.schema)(
                ser.schema_str.replace(model.__name__, "Order"), ser.inner.schema.schema_type)
            return ser

        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=serializer(OrderV1)) as producer:
            await producer.send_and_wait(kafka_topic, OrderV1(id=1))
        await sr.set_compatibility("BACKWARD", subject)
        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=serializer(OrderV2)) as producer:
            with pytest.raises(SchemaIncompatibleError) as info:
                await producer.send(kafka_topic, OrderV2(id=2, amount=5))
            assert isinstance(info.value, KafkaError)
            assert info.value.status == 409
            # A clear message: the model, the subject, the rule, the registry's reason.
            message = str(info.value)
            assert message.startswith(f"the {fmt.upper()} schema of model OrderV2 is not "
                                      f"compatible with the versions registered under "
                                      f"subject '{subject}' under its compatibility rule "
                                      "BACKWARD; the registry refused it, nothing was sent.")
            assert ("amount" if fmt == "avro" else "REQUIRED_PROPERTIES") in message
            assert isinstance(info.value.__cause__, SchemaIncompatibleError)
            await producer.flush()
        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=serializer(OrderV2Ok)) as producer:
            await producer.send_and_wait(kafka_topic, OrderV2Ok(id=3, amount=7))
        assert await sr.get_versions(subject) == [1, 2]
    assert len(_read(kafka_bootstrap, kafka_topic, 2)) == 2  # nothing of the refused one


async def test_lookup_only_and_latest_version(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        confluent_sr: SchemaRegistryClient) -> None:
    async with AsyncSchemaRegistryClient(schema_registry_url) as sr:
        lookup = AvroSerializer(sr, USER_AVRO, auto_register_schemas=False)
        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=lookup) as producer:
            with pytest.raises(SchemaNotFoundError):
                await producer.send(kafka_topic, {"name": "a", "age": 1, "tags": []})
        registered = await AvroSerializer(sr, USER_AVRO).prepare(kafka_topic)
        assert await AvroSerializer(sr, USER_AVRO, auto_register_schemas=False).prepare(
            kafka_topic) == registered
        # use_latest_version: writes with the registered schema and its id, whatever the
        # serializer was given (here a schema that was never registered).
        other = dict(USER_AVRO, fields=[*USER_AVRO["fields"],  # type: ignore[list-item]
                                        {"name": "x", "type": "int", "default": 0}])
        latest = AvroSerializer(sr, other, use_latest_version=True)
        async with Producer(bootstrap_servers=kafka_bootstrap,
                            value_serializer=latest) as producer:
            await producer.send_and_wait(kafka_topic,
                                         {"name": "b", "age": 2, "email": None, "tags": []})
        assert await sr.get_versions(f"{kafka_topic}-value") == [1]
    raw = _read(kafka_bootstrap, kafka_topic, 1)
    assert int.from_bytes(raw[0][1:5], "big") == registered
    assert AvroDeserializer(confluent_sr)(raw[0], _ctx(kafka_topic)) == {
        "name": "b", "age": 2, "email": None, "tags": []}


async def test_example_pydantic_registry(
        kafka_bootstrap: str, kafka_topic: str, schema_registry_url: str,  # noqa: F811
        confluent_sr: SchemaRegistryClient) -> None:
    from examples.pydantic_registry import Order, main
    assert await main(kafka_bootstrap, schema_registry_url, kafka_topic, 3) == [0, 1, 2]
    des = JSONDeserializer(None, schema_registry_client=confluent_sr)
    back = [Order.model_validate(des(v, _ctx(kafka_topic)))
            for v in _read(kafka_bootstrap, kafka_topic, 3)]
    assert back == [Order(id=i, item=f"item-{i}") for i in range(3)]


async def test_tls_against_the_real_registry(
        kafka_bootstrap: str, kafka_topic: str,
        tls_schema_registry: tuple[str, TLSFiles]) -> None:  # noqa: F811
    """Apicurio serving HTTPS only, with a certificate of a test CA: the CA given as a
    path or in an SSLContext is trusted, the system CAs refuse it (typed error), and
    confluent-kafka's client reads the records back over the same TLS."""
    url, tls = tls_schema_registry
    assert url.startswith("https://127.0.0.1:")
    async with AsyncSchemaRegistryClient(url) as sr:  # the system CAs: not trusted
        with pytest.raises(SchemaRegistryError, match="CERTIFICATE_VERIFY_FAILED"):
            await sr.get_subjects()
    plain = "http://" + url.removeprefix("https://")
    async with AsyncSchemaRegistryClient(plain) as sr:  # no plain HTTP on that port
        with pytest.raises(SchemaRegistryError):
            await sr.get_subjects()
    records = [{"name": f"tls-{i}", "age": i, "email": None, "tags": []} for i in range(3)]
    # The CA as a path, and a client certificate (presented; Apicurio's build cannot
    # require one, so this shows only that the handshake works with it).
    async with AsyncSchemaRegistryClient(url, verify=str(tls.ca),
                                         cert=(str(tls.client_cert), str(tls.client_key))
                                         ) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=AvroSerializer(sr, USER_AVRO)) as producer:
        for rec in records:
            await producer.send(kafka_topic, rec)
        await producer.flush()
    async with AsyncSchemaRegistryClient(url, verify=tls.client_context(with_cert=False)
                                         ) as sr:
        assert await sr.get_versions(f"{kafka_topic}-value") == [1]
    async with AsyncSchemaRegistryClient(url, verify=False) as sr:
        assert f"{kafka_topic}-value" in await sr.get_subjects()
    with SchemaRegistryClient({"url": url, "ssl.ca.location": str(tls.ca)}) as csr:
        des = AvroDeserializer(csr)
        back = [des(v, _ctx(kafka_topic)) for v in _read(kafka_bootstrap, kafka_topic, 3)]
    assert back == records


async def test_basic_auth_against_the_real_registry(
        kafka_bootstrap: str, kafka_topic: str,
        auth_schema_registry: tuple[str, TokenIssuer]) -> None:  # noqa: F811
    """Apicurio with authentication on: anonymous requests and a wrong password are
    refused (401, typed), the user and password given as an option or in the URL are
    let in (Apicurio trades them for a token at its OpenID Connect server), and
    confluent-kafka reads the records back with the same credentials."""
    url, issuer = auth_schema_registry
    [(user, password)] = REGISTRY_USERS.items()
    async with AsyncSchemaRegistryClient(url) as sr:
        with pytest.raises(SchemaRegistryError) as anonymous:
            await sr.get_subjects()
    assert anonymous.value.status == 401
    async with AsyncSchemaRegistryClient(url, basic_auth=(user, "wrong")) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=PydanticSerializer(sr, Address)) as producer:
        with pytest.raises(SchemaRegistryError) as wrong:
            await producer.send(kafka_topic, Address(city="nowhere"))
    assert wrong.value.status == 401
    assert user in issuer.refusals
    addresses = [Address(city=f"c{i}", zip=f"{i:05d}") for i in range(3)]
    async with AsyncSchemaRegistryClient(url, basic_auth=(user, password)) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=PydanticSerializer(sr, Address)) as producer:
        for a in addresses[:2]:
            await producer.send(kafka_topic, a)
        await producer.flush()
    in_url = url.replace("http://", f"http://{user}:{password}@")
    async with AsyncSchemaRegistryClient(in_url) as sr, \
            Producer(bootstrap_servers=kafka_bootstrap,
                     value_serializer=PydanticSerializer(sr, Address)) as producer:
        await producer.send_and_wait(kafka_topic, addresses[2])
        assert await sr.get_versions(f"{kafka_topic}-value") == [1]
    assert user in issuer.grants
    with SchemaRegistryClient({"url": url,
                               "basic.auth.user.info": f"{user}:{password}"}) as csr:
        des = JSONDeserializer(None, schema_registry_client=csr)
        back = [Address.model_validate(des(v, _ctx(kafka_topic)))
                for v in _read(kafka_bootstrap, kafka_topic, 3)]
    assert back == addresses
