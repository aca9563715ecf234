"""aioproducer.schema without a registry: the wire format, the cache, the subject name
strategies, basic auth and TLS plumbing (httpx MockTransport stands in for the HTTP
server; the real registry is in tests/broker/test_schema_registry.py)."""

from __future__ import annotations

import base64
import datetime
import enum
import io
import json
import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import fastavro
import httpx
import pytest
from pydantic import BaseModel

from aioproducer import KafkaError, SerializationError
from aioproducer.schema import (
    AsyncSchemaRegistryClient,
    AvroSerializer,
    JSONSchemaSerializer,
    ProtobufSerializer,
    PydanticSerializer,
    Schema,
    SchemaIncompatibleError,
    SchemaNotFoundError,
    SchemaRegistryError,
    SchemaSerializationError,
    avro_schema,
    record_name_strategy,
    topic_name_strategy,
    topic_record_name_strategy,
)
from aioproducer.schema.serializers import _zigzag_varints

AVRO = {"type": "record", "name": "Point", "namespace": "geo",
        "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}]}


class FakeRegistry:
    """Answers as Confluent's API does, and records every request."""

    def __init__(self, status: int = 200, body: object = None) -> None:
        self.requests: list[httpx.Request] = []
        self.status = status
        self.body = body

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.body is not None or self.status != 200:
            return httpx.Response(self.status, json=self.body)
        return httpx.Response(200, json={"id": 42})

    def client(self, **kwargs: object) -> AsyncSchemaRegistryClient:
        return AsyncSchemaRegistryClient(kwargs.pop("url", "http://registry.test/api"),  # type: ignore[arg-type]
                                         transport=httpx.MockTransport(self), **kwargs)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_avro_wire_format_and_one_registration_for_many_records() -> None:
    fake = FakeRegistry()
    async with fake.client() as sr:
        ser = AvroSerializer(sr, AVRO)
        outs = [await ser.serialize_async({"x": i, "y": -i}, "points") for i in range(50)]
    assert len(fake.requests) == 1
    req = fake.requests[0]
    assert (req.method, req.url.path) == ("POST", "/api/subjects/points-value/versions")
    assert req.headers["content-type"] == "application/vnd.schemaregistry.v1+json"
    assert json.loads(json.loads(req.content)["schema"]) == AVRO
    for i, out in enumerate(outs):
        assert out is not None
        assert out[:5] == b"\x00\x00\x00\x00\x2a"  # magic 0, id 42 (big-endian)
        rec = fastavro.schemaless_reader(io.BytesIO(out[5:]), fastavro.parse_schema(AVRO),
                                         None)
        assert rec == {"x": i, "y": -i}
    assert ser.serialize({"x": 1, "y": -1}, "points") == outs[1]  # sync, once resolved
    assert await ser.serialize_async(None, "points") is None


@pytest.mark.asyncio
async def test_basic_auth_from_option_and_from_url() -> None:
    for kwargs in ({"basic_auth": ("alice", "s3cret")},
                   {"url": "http://alice:s3cret@registry.test/api"}):
        fake = FakeRegistry()
        async with fake.client(**kwargs) as sr:
            await sr.register_schema("s", Schema(json.dumps(AVRO)))
        auth = fake.requests[0].headers["authorization"]
        assert auth == "Basic " + base64.b64encode(b"alice:s3cret").decode()
        assert fake.requests[0].url.host == "registry.test"
        assert "alice" not in str(fake.requests[0].url)
    fake = FakeRegistry()
    async with fake.client() as sr:
        await sr.register_schema("s", Schema(json.dumps(AVRO)))
    assert "authorization" not in fake.requests[0].headers


@pytest.mark.asyncio
async def test_tls_options_reach_httpx(tmp_path: Path) -> None:
    ctx = ssl.create_default_context()
    async with AsyncSchemaRegistryClient("https://registry.test", verify=ctx) as sr:
        assert sr.http._transport._pool._ssl_context is ctx  # type: ignore[attr-defined]
    async with AsyncSchemaRegistryClient("https://registry.test", verify=False) as sr:
        used = sr.http._transport._pool._ssl_context  # type: ignore[attr-defined]
        assert used.verify_mode == ssl.CERT_NONE
    # A client certificate is loaded into the context: a missing file fails at once...
    with pytest.raises((OSError, ssl.SSLError)):
        AsyncSchemaRegistryClient("https://registry.test", cert="/nonexistent/client.pem")
    # ... a real one is presented by the context httpx uses.
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj",
                    "/CN=client", "-days", "1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.create_default_context()
    async with AsyncSchemaRegistryClient("https://registry.test", verify=ctx,
                                         cert=(str(cert), str(key))) as sr:
        assert sr.http._transport._pool._ssl_context is ctx  # type: ignore[attr-defined]
    async with AsyncSchemaRegistryClient("https://registry.test", verify=False,
                                         cert=(cert, key)) as sr:
        used = sr.http._transport._pool._ssl_context  # type: ignore[attr-defined]
        assert used.verify_mode == ssl.CERT_NONE and not used.check_hostname
    with pytest.raises(TypeError, match="cert"):
        AsyncSchemaRegistryClient("https://registry.test", cert=42)


@pytest.mark.asyncio
async def test_registry_errors_are_typed() -> None:
    body = {"error_code": 409, "message": "Incompatible artifact: b at /fields/1"}
    async with FakeRegistry(409, body).client() as sr:
        with pytest.raises(SchemaIncompatibleError, match="Incompatible artifact") as info:
            await AvroSerializer(sr, AVRO).serialize_async({"x": 1, "y": 2}, "t")
    assert isinstance(info.value, KafkaError) and info.value.status == 409
    async with FakeRegistry(404, {"error_code": 40403, "message": "not found"}).client() as sr:
        with pytest.raises(SchemaNotFoundError) as nf:
            await AvroSerializer(sr, AVRO, auto_register_schemas=False).prepare("t")
    assert nf.value.error_code == 40403
    assert nf.value.args[0].startswith("Schema Registry POST /subjects/t-value")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)
    sr = AsyncSchemaRegistryClient("http://registry.test", transport=httpx.MockTransport(refuse))
    with pytest.raises(SchemaRegistryError, match="ConnectError"):
        await sr.get_subjects()
    await sr.aclose()


def test_subject_name_strategies() -> None:
    assert topic_name_strategy("orders", False, "geo.Point") == "orders-value"
    assert topic_name_strategy("orders", True, None) == "orders-key"
    assert record_name_strategy("orders", False, "geo.Point") == "geo.Point"
    assert topic_record_name_strategy("orders", True, "geo.Point") == "orders-geo.Point"
    with pytest.raises(SchemaSerializationError, match="record name"):
        record_name_strategy("orders", False, None)


@pytest.mark.asyncio
async def test_strategy_names_and_record_names() -> None:
    fake = FakeRegistry()
    async with fake.client() as sr:
        for strategy, subject in [
                ("TopicNameStrategy", "t-key"),
                ("io.confluent.kafka.serializers.subject.RecordNameStrategy", "geo.Point"),
                ("topic_record", "t-geo.Point")]:
            ser = AvroSerializer(sr, AVRO, subject_name_strategy=strategy)
            assert ser.subject_for("t", True) == subject
        js = JSONSchemaSerializer(sr, {"title": "Thing", "type": "object"},
                                  subject_name_strategy="record")
        assert js.subject_for("t", False) == "Thing"
        with pytest.raises(ValueError, match="subject_name_strategy"):
            AvroSerializer(sr, AVRO, subject_name_strategy="bogus")
        with pytest.raises(TypeError):
            AvroSerializer(sr, AVRO, subject_name_strategy=42)


@pytest.mark.asyncio
async def test_bad_input_is_refused_with_typed_errors() -> None:
    fake = FakeRegistry()
    with pytest.raises(TypeError, match="AsyncSchemaRegistryClient"):
        AvroSerializer("http://registry.test", AVRO)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="http"):
        AsyncSchemaRegistryClient("registry.test:8081")
    with pytest.raises(TypeError, match="basic_auth"):
        AsyncSchemaRegistryClient("http://r.test", basic_auth=("user",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        AsyncSchemaRegistryClient("http://r.test", timeout=0)
    with pytest.raises(ValueError, match="Avro schema"):
        AvroSerializer(fake.client(), {"type": "record", "name": "X",
                                        "fields": [{"name": "a", "type": "nope"}]})
    async with fake.client() as sr:
        ser = AvroSerializer(sr, AVRO)
        with pytest.raises(SchemaSerializationError, match="Avro schema") as info:
            await ser.serialize_async({"x": "one", "y": 2}, "t")
        assert isinstance(info.value, SerializationError)
        with pytest.raises(SchemaSerializationError, match="needs the topic"):
            ser({"x": 1, "y": 2})
        with pytest.raises(SchemaRegistryError, match="not resolved"):
            AvroSerializer(sr, AVRO).serialize({"x": 1, "y": 2}, "elsewhere")
        js = JSONSchemaSerializer(sr, {"type": "object", "required": ["a"],
                                       "properties": {"a": {"type": "integer"}}})
        assert await js.serialize_async({"a": 1}, "t") == b"\x00\x00\x00\x00\x2a" + b'{"a":1}'
        with pytest.raises(SchemaSerializationError, match="a: 'x' is not of type"):
            await js.serialize_async({"a": "x"}, "t")
        with pytest.raises(TypeError, match="Protobuf"):
            ProtobufSerializer(sr, dict)


def test_protobuf_message_index_encoding() -> None:
    # Confluent's framing: the count then each index, zig-zag varints.
    assert _zigzag_varints([1]) == b"\x02\x02"
    assert _zigzag_varints([0, 0]) == b"\x04\x00\x00"
    assert _zigzag_varints([70]) == b"\x02\x8c\x01"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    n: int


class Everything(BaseModel):
    """Doc."""

    i: int
    f: float
    s: str
    b: bytes
    ok: bool
    when: datetime.datetime
    day: datetime.date
    uid: uuid.UUID
    color: Color = Color.RED
    maybe: str | None = None
    items: list[int]
    attrs: dict[str, float]
    inner: Inner
    inners: list[Inner]


def test_avro_schema_from_a_pydantic_model() -> None:
    schema = avro_schema(Everything, namespace="h6")
    fastavro.parse_schema(schema)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert schema["name"] == "Everything" and schema["namespace"] == "h6"
    assert schema["doc"] == "Doc."
    assert types["i"] == "long" and types["f"] == "double" and types["b"] == "bytes"
    assert types["when"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert types["day"] == {"type": "int", "logicalType": "date"}
    assert types["uid"] == {"type": "string", "logicalType": "uuid"}
    assert types["color"] == {"type": "enum", "name": "Color", "symbols": ["red", "blue"]}
    assert types["maybe"] == ["null", "string"]
    assert types["items"] == {"type": "array", "items": "long"}
    assert types["attrs"] == {"type": "map", "values": "double"}
    assert types["inner"]["type"] == "record" and types["inners"]["items"] == "Inner"
    defaults = {f["name"]: f.get("default", "-") for f in schema["fields"]}
    assert defaults["color"] == "red" and defaults["maybe"] is None and defaults["i"] == "-"
    with pytest.raises(TypeError, match="BaseModel"):
        avro_schema(dict)


@pytest.mark.asyncio
async def test_pydantic_serializers_encode_the_model() -> None:
    fake = FakeRegistry()
    rec = Everything(i=1, f=0.5, s="s", b=b"\x00", ok=True,
                     when=datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc),
                     day=datetime.date(2026, 1, 2), uid=uuid.UUID(int=7), color=Color.BLUE,
                     items=[1, 2], attrs={"a": 1.5}, inner=Inner(n=3), inners=[Inner(n=4)])
    async with fake.client() as sr:
        avro = PydanticSerializer(sr, Everything, format="avro")
        out = await avro.serialize_async(rec, "t")
        assert out is not None
        back = fastavro.schemaless_reader(io.BytesIO(out[5:]),
                                          fastavro.parse_schema(avro_schema(Everything)), None)
        assert Everything.model_validate(back) == rec
        js = PydanticSerializer(sr, Inner)
        assert await js.serialize_async(Inner(n=5), "t") == b"\x00\x00\x00\x00\x2a" + b'{"n":5}'
        assert await js.serialize_async({"n": 6}, "t") == b"\x00\x00\x00\x00\x2a" + b'{"n":6}'
        with pytest.raises(SchemaSerializationError, match="takes Inner"):
            await js.serialize_async(["n"], "t")
        with pytest.raises(SchemaSerializationError):
            await js.serialize_async({"n": "not a number"}, "t")
        with pytest.raises(ValueError, match="format"):
            PydanticSerializer(sr, Inner, format="xml")
        with pytest.raises(TypeError, match="BaseModel"):
            PydanticSerializer(sr, dict)
    registered = json.loads(json.loads(fake.requests[-1].content)["schema"])
    assert registered == Inner.model_json_schema()


def test_the_package_imports_without_the_schema_extra() -> None:
    code = ("import sys\n"
            "for m in ('httpx', 'fastavro', 'jsonschema', 'google.protobuf', 'pydantic'):\n"
            "    sys.modules[m] = None\n"
            "import aioproducer\n"
            "from aioproducer import Producer\n"
            "assert 'aioproducer.schema' not in sys.modules\n"
            "import aioproducer.schema\n"
            "try:\n"
            "    aioproducer.schema.AsyncSchemaRegistryClient('http://r.test')\n"
            "except ImportError as exc:\n"
            "    assert 'aioproducer[schema]' in str(exc), exc\n"
            "else:\n"
            "    raise SystemExit('no ImportError')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
