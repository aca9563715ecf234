"""Every Java producer option is accepted, with values as a .properties file gives them
(issue #17, item 13): implemented, mapped to our equivalent, or ignored with a
one-time ConfigIgnoredWarning; bad values are a ConfigError naming the option."""

from __future__ import annotations

import shutil
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aioproducer import java as java_module
from aioproducer.config import (
    JAVA_OPTIONS,
    ConfigIgnoredWarning,
    JavaOption,
    ProducerConfig,
    effective_status,
    java_option,
    parse_properties,
)
from aioproducer.errors import ConfigError, SerializationError

JAVA_DIR = Path(__file__).resolve().parents[1] / "support" / "java"
PROPERTIES = JAVA_DIR / "producer-4x.properties"


@pytest.fixture(autouse=True)
def _fresh_warnings() -> Iterator[None]:
    """The once-per-process memory of warned names, emptied around each test."""
    java_module._warned.clear()
    yield
    java_module._warned.clear()


def _java_names() -> list[str]:
    """Every name in the fixture file, including the commented-out ones (no default)."""
    names = []
    for line in PROPERTIES.read_text().splitlines():
        body = line[1:] if line.startswith("#") else line
        if "=" in body and " " not in body.split("=", 1)[0]:
            names.append(body.split("=", 1)[0])
    return names


def _build(**options: Any) -> ProducerConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigIgnoredWarning)
        return ProducerConfig.from_options(options)


def _java(name: str, value: Any) -> ProducerConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigIgnoredWarning)
        return ProducerConfig.from_options({name: value})


# -- the table ---------------------------------------------------------------------------

def test_every_java_producer_option_has_a_row() -> None:
    names = _java_names()
    assert len(names) == 113  # kafka-clients 4.3.1 ProducerConfig.configDef()
    missing = [n for n in names if java_option(n) is None]
    assert missing == []
    # underscores and dashes name the same option
    for n in names:
        assert java_option(n.replace(".", "_")) is java_option(n)


def test_rows_are_consistent() -> None:
    fields = {f for f in ProducerConfig.__dataclass_fields__ if not f.startswith("_")}
    for opt in JAVA_OPTIONS:
        if opt.status == "ignored":
            assert opt.field is None and opt.note, opt
        elif opt.kind != "store_type":
            assert opt.field is not None, opt
        if opt.field is not None and opt.status == "mapped":
            assert opt.field in fields, opt
    assert len({o.name for o in JAVA_OPTIONS}) == len(JAVA_OPTIONS)
    # every option another part of the producer implements has landed its field
    pending = [o.name for o in JAVA_OPTIONS if o.status == "implemented" and o.field not in fields]
    assert pending == []


def test_an_option_whose_field_is_missing_is_ignored_with_a_warning() -> None:
    ghost = JavaOption("ghost.option.ms", "ghost_option_ms", "long", "implemented")
    assert effective_status(ghost) == "ignored"
    assert effective_status(java_option("linger.ms")) == "implemented"  # type: ignore[arg-type]


# -- the whole Java 4.x file -------------------------------------------------------------

def test_java_defaults_file_builds_a_config() -> None:
    with pytest.warns(ConfigIgnoredWarning) as record:
        config = ProducerConfig.from_properties(PROPERTIES)
    warned = {str(w.message).split("'")[1] for w in record}
    ignored = {o.name for o in JAVA_OPTIONS if effective_status(o) == "ignored"}
    assert warned <= ignored
    assert "metric.reporters" in warned and "linger.ms" not in warned
    assert record[0].filename == __file__  # points at the caller, not at the package
    assert (config.batch_size, config.buffer_memory, config.linger_ms) == (16384, 33554432, 5)
    assert config.acks == -1 and config.enable_idempotence is True
    assert config.retries == 2**31 - 1 and config.max_in_flight_requests_per_connection == 5
    assert config.send_buffer_bytes == 131072 and config.receive_buffer_bytes == 32768
    assert config.connections_max_idle_ms == 540000
    assert config.socket_connection_setup_timeout_max_ms == 30000
    assert config.client_dns_lookup == "use_all_dns_ips"
    assert config.compression_type == "none" and config.compression_gzip_level == -1
    assert config.key_serializer is None and config.value_serializer is None
    assert config.partitioner == "murmur2" and config.ssl_check_hostname is True
    assert config.transactional_id is None and config.interceptors == ()


def test_ignored_option_warns_once_per_name_per_process() -> None:
    with pytest.warns(ConfigIgnoredWarning, match="'metrics.num.samples' has no effect"):
        ProducerConfig.from_options({"metrics.num.samples": "2"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ProducerConfig.from_options({"metrics_num_samples": 3})  # same option, other spelling
    with pytest.warns(ConfigIgnoredWarning, match="metric.reporters"):
        ProducerConfig.from_options({"metric.reporters": "com.example.Reporter"})


# -- string values ------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "field", "expected"), [
    ("batch.size", "16384", "batch_size", 16384),
    ("batch_size", "32768", "batch_size", 32768),
    ("linger.ms", " 20 ", "linger_ms", 20),
    ("buffer.memory", "67108864", "buffer_memory", 67108864),
    ("acks", "all", "acks", -1),
    ("acks", "-1", "acks", -1),
    ("acks", "1", "acks", 1),
    ("acks", "0", "acks", 0),
    ("acks", " ALL ", "acks", -1),  # Java: trimmed, any case
    ("batch.size", "+100", "batch_size", 100),
    ("enable.idempotence", "false", "enable_idempotence", False),
    ("partitioner.ignore.keys", "TRUE", "partitioner_ignore_keys", True),
    ("compression.type", "lz4", "compression_type", "lz4"),
    ("compression.zstd.level", "-5", "compression_zstd_level", -5),
    ("send.buffer.bytes", "-1", "send_buffer_bytes", -1),
    ("receive.buffer.bytes", "65536", "receive_buffer_bytes", 65536),
    ("connections.max.idle.ms", "-1", "connections_max_idle_ms", -1),
    ("socket.connection.setup.timeout.max.ms", "5000",
     "socket_connection_setup_timeout_max_ms", 5000),
    ("metadata.recovery.strategy", " REBOOTSTRAP ", "metadata_recovery_strategy",
     "rebootstrap"),  # Java: CaseInsensitiveValidString
    ("client.dns.lookup", "Use_All_DNS_IPs", "client_dns_lookup", "use_all_dns_ips"),
    ("client.dns.lookup", "resolve_canonical_bootstrap_servers_only", "client_dns_lookup",
     "resolve_canonical_bootstrap_servers_only"),
    ("transactional.id", "txn-1", "transactional_id", "txn-1"),
    ("ssl.endpoint.identification.algorithm", "", "ssl_check_hostname", False),
    ("ssl.endpoint.identification.algorithm", "https", "ssl_check_hostname", True),
    ("partitioner.class", "", "partitioner", "murmur2"),
    ("interceptor.classes", "", "interceptors", ()),
])
def test_string_values_as_a_properties_file_gives_them(
        name: str, value: str, field: str, expected: Any) -> None:
    assert getattr(_java(name, value), field) == expected


def test_lists_as_comma_separated_strings() -> None:
    config = _java("bootstrap.servers", "127.0.0.1:9092, 127.0.0.2:9093")
    assert config.servers == ["127.0.0.1:9092", "127.0.0.2:9093"]


@pytest.mark.parametrize(("name", "value", "words"), [
    ("batch.size", "abc", ["batch.size", "'abc'", "integer", "'16384'"]),
    ("batch.size", "99999999999", ["batch.size", "out of range"]),
    ("linger_ms", "1.5", ["linger_ms", "integer"]),
    ("linger_ms", "1_000", ["linger_ms", "integer"]),  # Java's parseInt refuses it too
    ("enable.idempotence", "maybe", ["enable.idempotence", "'maybe'", "true or false"]),
    ("partitioner.ignore.keys", "yes", ["partitioner.ignore.keys", "true or false"]),
    ("acks", "2", ["acks", "'all'", "1 or 0"]),
    ("acks", "leader", ["acks", "'leader'", "'all'"]),
    ("compression.type", "brotli", ["compression_type", "'brotli'", "zstd"]),
    ("client.dns.lookup", "default", ["client_dns_lookup", "use_all_dns_ips"]),
    ("send.buffer.bytes", "-2", ["send_buffer_bytes", ">= -1"]),
    ("ssl.endpoint.identification.algorithm", "ldap", ["ssl.endpoint", "'https'"]),
    ("partitioner.class", "org.apache.kafka.clients.producer.RoundRobinPartitioner",
     ["partitioner.class", "RoundRobinPartitioner", "callable"]),
    ("key.serializer", "io.confluent.kafka.serializers.KafkaAvroSerializer",
     ["key.serializer", "KafkaAvroSerializer", "StringSerializer"]),
    ("value.serializer", "org.apache.kafka.common.serialization.ListSerializer",
     ["value.serializer", "ListSerializer"]),
    ("transaction.two.phase.commit.enable", "true", ["two-phase", "'false'"]),
    ("sasl.oauthbearer.token.endpoint.url", "https://idp.example/token",
     ["sasl_oauth_token_provider"]),
    ("config.providers", "file", ["config.providers", "${"]),
    ("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256", ["ssl_context"]),
    ("sasl.jaas.config", "com.sun.security.auth.module.Krb5LoginModule required;",
     ["sasl.jaas.config", "Krb5LoginModule"]),
    ("linger.mss", "5", ["'linger.mss'", "did you mean 'linger.ms'"]),
    ("transactional.id", "", ["transactional_id", "non-empty"]),  # Java: NonEmptyString
])
def test_bad_values_are_config_errors_naming_the_option(
        name: str, value: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        _java(name, value)
    for word in words:
        assert word in str(info.value)


def test_python_names_keep_python_values() -> None:
    """A Python field name takes the Python value, even where the Java option of the
    same field takes another kind (ssl.endpoint.identification.algorithm: 'https')."""
    assert ProducerConfig.from_options(ssl_check_hostname=False).ssl_check_hostname is False
    assert _build(ssl_check_hostname="false").ssl_check_hostname is False
    config = ProducerConfig.from_options(security_protocol="SSL", ssl_cafile="/ca.pem",
                                         ssl_password="pw", ssl_certfile="/c.pem")
    assert (config.ssl_cafile, config.ssl_certfile, config.ssl_password) == (
        "/ca.pem", "/c.pem", "pw")


def test_python_values_still_checked() -> None:
    with pytest.raises(ConfigError, match="enable_idempotence must be a bool"):
        ProducerConfig.from_options(enable_idempotence=1)
    with pytest.raises(ConfigError, match="enable_idempotence: 'maybe ' is not a boolean"):
        ProducerConfig.from_options(enable_idempotence="maybe ")
    with pytest.raises(ConfigError, match="batch_size must be an int"):
        ProducerConfig.from_options(batch_size=1.5)
    with pytest.raises(ConfigError, match="given twice"):
        ProducerConfig.from_options({"batch.size": "1"}, batch_size=2)


# -- mapped values ------------------------------------------------------------------------

def test_java_serializers_map_to_the_same_bytes() -> None:
    def ser(name: str) -> Any:
        return _java("value.serializer", name).value_serializer

    pkg = "org.apache.kafka.common.serialization."
    for name in ("ByteArraySerializer", "ByteBufferSerializer", "BytesSerializer"):
        assert ser(pkg + name) is None  # bytes-like values as they are
    assert ser(pkg + "StringSerializer")("héllo") == "héllo".encode()
    assert ser("StringSerializer")(None) is None  # the short name too
    assert ser(pkg + "IntegerSerializer")(1) == b"\x00\x00\x00\x01"
    assert ser(pkg + "IntegerSerializer")(-2) == b"\xff\xff\xff\xfe"
    assert ser(pkg + "LongSerializer")(-1) == b"\xff" * 8
    assert ser(pkg + "ShortSerializer")(258) == b"\x01\x02"
    assert ser(pkg + "DoubleSerializer")(1.5) == b"\x3f\xf8" + b"\x00" * 6
    assert ser(pkg + "FloatSerializer")(1.5) == b"\x3f\xc0\x00\x00"
    assert ser(pkg + "BooleanSerializer")(True) == b"\x01"
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert ser(pkg + "UUIDSerializer")(u) == str(u).encode()
    assert ser(pkg + "VoidSerializer")(None) is None
    with pytest.raises(SerializationError, match="IntegerSerializer takes int"):
        ser(pkg + "IntegerSerializer")("1")
    with pytest.raises(SerializationError, match="does not fit"):
        ser(pkg + "IntegerSerializer")(2**31)
    with pytest.raises(SerializationError, match="IntegerSerializer"):
        ser(pkg + "IntegerSerializer")(True)
    key = _java("key.serializer", pkg + "StringSerializer").key_serializer
    assert key is not None and key("k") == b"k"


def test_java_partitioner_and_interceptor_classes() -> None:
    assert _java("partitioner.class",
                 "org.apache.kafka.clients.producer.internals.DefaultPartitioner"
                 ).partitioner == "murmur2"
    with pytest.warns(ConfigIgnoredWarning, match="com.example.Audit"):
        config = ProducerConfig.from_options({"interceptor.classes": "com.example.Audit"})
    assert config.interceptors == ()


def test_sasl_jaas_config_gives_the_plain_credentials() -> None:
    config = ProducerConfig.from_options({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="alice" password="p\\"w;d";'})
    assert (config.sasl_plain_username, config.sasl_plain_password) == ("alice", 'p"w;d')


def test_pem_stores_map_and_jks_stores_are_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until the TLS context is built")
    config = ProducerConfig.from_options({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca)})
    assert config.ssl_cafile == str(ca)
    with pytest.raises(ConfigError, match=r"JKS stores are not supported.*PEM"):
        ProducerConfig.from_options({"security.protocol": "SSL",
                                     "ssl.truststore.location": "/etc/kafka/trust.jks"})


# -- .properties syntax -------------------------------------------------------------------

_SYNTAX = r"""# a comment
! another comment
   batch.size = 16384
linger.ms:20
acks all
client.id=app\
    -one
key\=with\:seps=v
unicode=caf\u00e9\tend
trailing=spaces\u0020\u0020
empty=
dup=first
dup=second
path=C:\\kafka\\ca.pem
"""
_EXPECTED = {
    "batch.size": "16384", "linger.ms": "20", "acks": "all", "client.id": "app-one",
    "key=with:seps": "v", "unicode": "café\tend", "trailing": "spaces  ", "empty": "",
    "dup": "second", "path": "C:\\kafka\\ca.pem",
}


def test_parse_properties_reads_java_syntax() -> None:
    assert parse_properties(_SYNTAX) == _EXPECTED


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK")
def test_parse_properties_agrees_with_java_util_properties(tmp_path: Path) -> None:
    src = tmp_path / "Dump.java"
    src.write_text(
        "import java.util.*; import java.io.*;\n"
        "public class Dump { public static void main(String[] a) throws Exception {\n"
        "  Properties p = new Properties(); p.load(new FileReader(a[0]));\n"
        "  for (String k : new TreeSet<>(p.stringPropertyNames()))\n"
        "    System.out.println(k.replace(\"\\t\", \"<TAB>\") + \"\\t\"\n"
        "        + p.getProperty(k).replace(\"\\t\", \"<TAB>\")); } }\n")
    (tmp_path / "in.properties").write_text(_SYNTAX, encoding="utf-8")
    subprocess.run(["javac", str(src)], check=True, timeout=60)
    out = subprocess.run(["java", "-cp", str(tmp_path), "Dump", str(tmp_path / "in.properties")],
                         check=True, timeout=60, capture_output=True, text=True).stdout
    java = dict(line.split("\t", 1) for line in out.splitlines())
    ours = {k.replace("\t", "<TAB>"): v.replace("\t", "<TAB>")
            for k, v in parse_properties(_SYNTAX).items()}
    assert ours == java


def test_from_properties_text_and_overrides(tmp_path: Path) -> None:
    text = "bootstrap.servers=10.0.0.1:9092\nbatch.size=1000\nlinger.ms=7\n"
    config = ProducerConfig.from_properties(text, batch_size=2000, **{"linger.ms": 9})
    assert (config.servers, config.batch_size, config.linger_ms) == (
        ["10.0.0.1:9092"], 2000, 9)
    path = tmp_path / "p.properties"
    path.write_text(text)
    assert ProducerConfig.from_properties(str(path)).batch_size == 1000
    assert ProducerConfig.from_properties(path).linger_ms == 7
    with pytest.raises(ConfigError, match="unknown producer option 'nope'"):
        ProducerConfig.from_properties("nope=1\n")


def test_the_configuration_page_lists_every_option_with_its_status() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line.split("|")[2].strip()
            for line in page.splitlines() if line.startswith("| `")}
    for opt in JAVA_OPTIONS:
        if opt.name in ("batch.max.size", "receive.message.max.bytes"):
            continue  # aioproducer's own dotted names
        assert rows.get(opt.name) == opt.status, opt.name


def test_java_serializers_match_the_java_client() -> None:
    """Our equivalents write the bytes kafka-clients' serializers write."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    from aioproducer.devbroker import KafkaLibsError, ensure_kafka_libs

    try:
        libs = ensure_kafka_libs()
    except KafkaLibsError as exc:
        pytest.skip(f"Kafka jars unavailable: {exc}")
    u = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    cases: list[tuple[str, Any]] = [
        ("String", "héllo, wörld ✓"), ("String", ""), ("Integer", -2), ("Integer", 2**31 - 1),
        ("Long", 2**40 + 7), ("Long", -(2**63)), ("Short", 258), ("Short", -32768),
        ("Float", 1.5), ("Float", -0.1), ("Double", -0.1), ("Double", 1e300),
        ("Boolean", True), ("Boolean", False), ("UUID", u),
    ]
    done = subprocess.run(
        [java, "-cp", f"{libs}/*", str(JAVA_DIR / "SerializerVectors.java")],
        input="".join(f"{kind}\t{value}\n" for kind, value in cases).encode(),
        capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert len(lines) == len(cases)
    for (kind, value), expected in zip(cases, lines, strict=True):
        ser = _java("value.serializer", f"{kind}Serializer").value_serializer
        assert ser is not None
        assert ser(value).hex() == expected, (kind, value)
