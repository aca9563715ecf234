"""``import aioproducer`` stays cheap: kio's message classes are imported per (API,
version) when that version is first used, and the code of optional features (SASL,
admin, transactions, client telemetry) on first use.

kio has one module per API and version, 1-3 ms each to import; the producer uses the
one version of each API it negotiated. The import checks run in a fresh interpreter,
so that what other tests imported does not count.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import kio.schema.produce.v12.response as p12
import kio.schema.produce.v13.response as p13
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32, i32Timedelta, i64

from aioproducer.net.protocol import (
    decode_produce_response,
    produce_results,
)

ROOT = Path(__file__).resolve().parents[2]

#: kio.schema modules ``import aioproducer`` may load. 12 today, all kio's own: errors,
#: index and the request/response headers that ``kio.static.protocol`` imports. Before
#: the lazy loading it was 104 (every version of Metadata, Produce, ApiVersions, SASL...).
MAX_KIO_SCHEMA_MODULES = 16

#: Modules of features a producer may not use: imported when first used.
OPTIONAL_MODULES = (
    "aioproducer.net.admin",
    "aioproducer.net.sasl",
    "aioproducer.net.telemetry",
    "aioproducer.telemetry",
    "aioproducer.transactions",
)


def _run(code: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    result: list[str] = json.loads(r.stdout.splitlines()[-1])
    return result


_MODULES = "print(json.dumps(sorted(sys.modules)))"


def test_import_loads_few_kio_schema_modules() -> None:
    loaded = _run(f"import json, sys\nimport aioproducer\n{_MODULES}")
    kio = [m for m in loaded if m.startswith("kio.schema.")]
    assert len(kio) <= MAX_KIO_SCHEMA_MODULES, kio
    messages = [m for m in kio if m.endswith((".request", ".response"))]
    assert messages == [], "imported at `import aioproducer`: " + ", ".join(messages)


def test_optional_features_are_imported_on_first_use() -> None:
    loaded = set(_run(f"import json, sys\nimport aioproducer\n{_MODULES}"))
    assert [m for m in OPTIONAL_MODULES if m in loaded] == []


def test_the_fault_proxy_is_imported_only_by_name() -> None:
    """``aioproducer.testing.faultproxy`` (the tests' and the soaks' Kafka-aware proxy)
    ships with the package, but neither ``import aioproducer`` nor ``import
    aioproducer.testing`` (the mock, which a service's own tests import) loads it."""
    loaded = set(_run(f"import json, sys\nimport aioproducer.testing\n{_MODULES}"))
    assert "aioproducer.testing" in loaded
    assert "aioproducer.testing.faultproxy" not in loaded


def test_the_crc32c_function_is_loaded_without_the_package_init() -> None:
    """The crc32c package's ``__init__`` reads its version with importlib.metadata
    (email, zipfile, csv...: ~27 ms of CPU per start); the batch core loads the
    package's extension module alone. hypothesis (a test dependency, which imports
    importlib.metadata itself) is hidden, as in a service's environment."""
    code = """\
import json, sys
sys.modules["hypothesis"] = None
import aioproducer
from aioproducer._native import batch
loaded = sorted(sys.modules)
import crc32c
assert batch._crc32c is crc32c.crc32c, "the package uses the same extension module"
assert batch._crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
print(json.dumps(loaded))
"""
    loaded = _run(code)
    assert "crc32c._crc32c" in loaded
    assert "crc32c" not in loaded
    assert "importlib.metadata" not in loaded


def _produce_response(version: int, module: Any) -> Any:
    part_fields: dict[str, Any] = {
        "index": i32(3), "error_code": ErrorCode.none, "base_offset": i64(42),
        "log_append_time": None, "log_start_offset": i64(0), "record_errors": (),
        "error_message": None,
    }
    names = {f.name for f in dataclasses.fields(module.PartitionProduceResponse)}
    part = module.PartitionProduceResponse(
        **{k: v for k, v in part_fields.items() if k in names})
    topic_fields: dict[str, Any] = {"partition_responses": (part,)}
    if version >= 13:
        topic_fields["topic_id"] = uuid.UUID(int=7)
    else:
        topic_fields["name"] = "events"
    return module.ProduceResponse(
        responses=(module.TopicProduceResponse(**topic_fields),),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)))


def _encode(response: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    return buf.getvalue()


def test_decoding_imports_only_the_version_used() -> None:
    body = _encode(_produce_response(12, p12)).hex()
    code = f"""\
import json, sys
import aioproducer
from aioproducer.net.protocol import decode_produce_response, produce_results
response = decode_produce_response(12, bytes.fromhex({body!r}))
[(name, topic_id, part)] = produce_results(response)
assert (name, topic_id, int(part.base_offset)) == ("events", None, 42), (name, topic_id)
{_MODULES}
"""
    loaded = _run(code)
    produce = [m for m in loaded if m.startswith("kio.schema.produce.")]
    # (a version's package imports its request module with the response's)
    assert produce == ["kio.schema.produce.v12", "kio.schema.produce.v12.request",
                       "kio.schema.produce.v12.response"]


def test_produce_results_by_name_and_by_id() -> None:
    r12 = decode_produce_response(12, _encode(_produce_response(12, p12)))
    r13 = decode_produce_response(13, _encode(_produce_response(13, p13)))
    [(name, topic_id, part)] = produce_results(r12)
    assert (name, topic_id, int(part.base_offset)) == ("events", None, 42)
    [(name, topic_id, part)] = produce_results(r13)
    assert (name, topic_id, int(part.base_offset)) == (None, uuid.UUID(int=7), 42)


def test_lazy_names_resolve() -> None:
    """The unions of every version's classes are still importable at run time."""
    code = """\
import json, sys
import aioproducer
from aioproducer import GroupMetadata
from aioproducer.net import Admin, MetadataResponse, PartitionProduceResponse, ProduceResponse
from aioproducer.net.telemetry import GetTelemetrySubscriptionsResponse, PushTelemetryResponse
import kio.schema.metadata.v1.response as m1, kio.schema.metadata.v13.response as m13
import kio.schema.produce.v9.response as p9, kio.schema.produce.v13.response as p13
assert MetadataResponse.__args__ == tuple(
    sys.modules[f"kio.schema.metadata.v{v}.response"].MetadataResponse for v in range(1, 14))
assert ProduceResponse.__args__ == tuple(
    sys.modules[f"kio.schema.produce.v{v}.response"].ProduceResponse for v in range(9, 14))
assert PartitionProduceResponse.__args__[0] is p9.PartitionProduceResponse
assert GroupMetadata.__module__ == "aioproducer.transactions"
assert Admin.__module__ == "aioproducer.net.admin"
assert PushTelemetryResponse.__module__ == "kio.schema.push_telemetry.v0.response"
from aioproducer import *  # every name in __all__ resolves
try:
    aioproducer.NoSuchName
except AttributeError as exc:
    assert "NoSuchName" in str(exc)
else:
    raise AssertionError("no AttributeError")
print("[]")
"""
    assert _run(code) == []
