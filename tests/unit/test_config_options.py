"""One declaration per option, checked when a config is made (issue #34, item 1).

Each field of ProducerConfig carries its option's facts in its metadata (an
``Option``: the kind of value, the Java name, the range); the checks and the table of
Java names are derived from them. ``ProducerConfig(...)`` checks itself, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from aioproducer import ConfigError, Producer, ProducerConfig
from aioproducer import config as config_module
from aioproducer.java import IGNORED, TRANSLATED
from aioproducer.testing import MockProducer


def _options() -> Iterator[tuple[str, Any]]:
    for f in dataclasses.fields(ProducerConfig):
        yield f.name, f.metadata.get("option")


def test_every_field_declares_its_option() -> None:
    assert [name for name, option in _options() if option is None] == []
    assert "_explicit" not in {f.name for f in dataclasses.fields(ProducerConfig)}


def test_the_java_table_is_made_of_the_declarations() -> None:
    declared = {option.java: name for name, option in _options() if option.java}
    rows = {o.name: o for o in config_module.JAVA_OPTIONS}
    for java, name in declared.items():
        assert rows[java].field == name, java
    # every row comes from a field's declaration or from the Java adapter's own tables
    adapter = {o.name for o in (*IGNORED, *TRANSLATED)}
    assert set(rows) == set(declared) | adapter
    assert not set(declared) & adapter


@pytest.mark.parametrize(("options", "message"), [
    ({"linger_ms": -1}, "linger_ms must be >= 0"),
    ({"batch_size": "16384"}, "batch_size must be an int"),
    ({"enable_idempotence": 1}, "enable_idempotence must be a bool"),
    ({"compression_type": "brotli"}, "compression_type must be one of none, gzip"),
    ({"compression_zstd_level": 99}, "between"),
    ({"acks": 2}, "acks must be 0, 1, -1 or 'all'"),
    ({"acks": 1, "enable_idempotence": True}, "conflicts with acks=1"),
    ({"security_protocol": "TLS"}, "security_protocol must be one of"),
    ({"ssl_cafile": "ca.pem"}, "use SSL or SASL_SSL"),
    ({"tracer_provider": 3}, "tracer_provider must be an OpenTelemetry TracerProvider"),
    ({"max_request_size": 2 << 30}, "max_request_size must be <= buffer_memory"),
])
def test_making_a_config_checks_it(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerConfig(**options)


def test_derived_defaults_are_filled_in_when_made() -> None:
    config = ProducerConfig()
    assert config.enable_idempotence is True and config.batch_max_size == 262144
    config = ProducerConfig(acks=1, batch_size=1 << 20, max_request_size=1 << 21)
    assert config.enable_idempotence is False and config.batch_max_size == 1 << 20
    assert config.validated() is config
    assert dataclasses.replace(config, acks=0).acks == 0  # a new config, checked again
    with pytest.raises(ConfigError, match="linger_ms"):
        dataclasses.replace(config, linger_ms=-5)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the checks of the rules between options (once per config made)."""
    counted: list[int] = []
    original = ProducerConfig._check_together

    def counting(self: ProducerConfig) -> None:
        counted.append(1)
        original(self)

    monkeypatch.setattr(ProducerConfig, "_check_together", counting)
    return counted


def test_a_config_is_checked_once(checks: list[int]) -> None:
    config = ProducerConfig.from_options({"linger.ms": "20", "acks": "all"})
    assert len(checks) == 1
    Producer(config)
    MockProducer(config)
    assert config.validated() is config
    assert len(checks) == 1
    Producer(linger_ms=20)  # from_options: one config made, checked once
    assert len(checks) == 2
