"""Topic administration over a :class:`~aioproducer.net.client.KafkaClient`.

:class:`Admin` sends CreateTopics and DeleteTopics to the least-loaded broker of
the client's cluster (trying the others after connection failures). The producer
never needs them: the CLI (``--create-partitions``), the pytest plugin and the tests
do.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta

from ..errors import for_code
from .apis import ApiKey
from .protocol import build_entity, request_module

if TYPE_CHECKING:
    from .client import KafkaClient

__all__ = ["Admin", "TopicSpec"]

CREATE_TOPICS_KEY: Final = int(ApiKey.CREATE_TOPICS)
DELETE_TOPICS_KEY: Final = int(ApiKey.DELETE_TOPICS)
_CREATE_TOPICS_VERSIONS: Final = (2, 7)
_DELETE_TOPICS_VERSIONS: Final = (1, 6)
_ZERO_UUID: Final = uuid.UUID(int=0)
_TOPIC_ALREADY_EXISTS: Final = int(ErrorCode.topic_already_exists)
_UNKNOWN_TOPIC: Final = int(ErrorCode.unknown_topic_or_partition)
#: Added to the operation's timeout for the request (the broker may use all of it).
_SLACK_S: Final = 5.0

TopicSpec = tuple[str, int, int, Mapping[str, str]]
"""``(name, num_partitions, replication_factor, configs)``; -1 for the broker default."""


def _ms(seconds: float) -> i32Timedelta:
    ms = max(0, min(int(seconds * 1000), 0x7FFFFFFF))
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


class Admin:
    """CreateTopics / DeleteTopics through ``client``'s connections."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    async def create_topics(self, topics: Sequence[TopicSpec], timeout_s: float, *,
                            exist_ok: bool = False) -> None:
        """Create ``[(name, num_partitions, replication_factor, configs), ...]``.

        ``-1`` for partitions or replication factor means the broker default.
        Raises the typed :class:`BrokerResponseError` of the first failed topic;
        ``exist_ok`` ignores TOPIC_ALREADY_EXISTS.
        """
        if not topics:
            return
        client = self.client

        async def op(node: int, remaining: float) -> None:
            conn = await client.connect(node, remaining)
            version = conn.version_for(CREATE_TOPICS_KEY, *_CREATE_TOPICS_VERSIONS)
            mod = request_module(CREATE_TOPICS_KEY, version)
            items = tuple(
                build_entity(mod.CreatableTopic, name=name, num_partitions=i32(partitions),
                             replication_factor=i16(replication), assignments=(),
                             configs=tuple(build_entity(mod.CreatableTopicConfig, name=k,
                                                        value=v)
                                           for k, v in configs.items()))
                for name, partitions, replication, configs in topics
            )
            req = build_entity(mod.CreateTopicsRequest, topics=items, timeout=_ms(timeout_s),
                               validate_only=False)
            resp: Any = await conn.request(req, timeout_ms=int((timeout_s + _SLACK_S) * 1000))
            for t in resp.topics:
                code = int(t.error_code)
                if code == 0 or (exist_ok and code == _TOPIC_ALREADY_EXISTS):
                    continue
                msg = getattr(t, "error_message", None)
                raise for_code(code, f"cannot create topic {t.name!r}" +
                               (f": {msg}" if msg else ""))

        await client.on_any_node(op, timeout_s + _SLACK_S, "create topics")

    async def delete_topics(self, names: Sequence[str], timeout_s: float, *,
                            missing_ok: bool = False) -> None:
        """Delete topics by name; ``missing_ok`` ignores UNKNOWN_TOPIC_OR_PARTITION."""
        if not names:
            return
        client = self.client

        async def op(node: int, remaining: float) -> None:
            conn = await client.connect(node, remaining)
            version = conn.version_for(DELETE_TOPICS_KEY, *_DELETE_TOPICS_VERSIONS)
            mod = request_module(DELETE_TOPICS_KEY, version)
            if hasattr(mod, "DeleteTopicState"):
                req = build_entity(mod.DeleteTopicsRequest, timeout=_ms(timeout_s),
                                   topics=tuple(build_entity(mod.DeleteTopicState, name=n,
                                                             topic_id=_ZERO_UUID)
                                                for n in names))
            else:
                req = build_entity(mod.DeleteTopicsRequest, timeout=_ms(timeout_s),
                                   topic_names=tuple(names))
            resp: Any = await conn.request(req, timeout_ms=int((timeout_s + _SLACK_S) * 1000))
            for t in resp.responses:
                code = int(t.error_code)
                if code == 0 or (missing_ok and code == _UNKNOWN_TOPIC):
                    continue
                msg = getattr(t, "error_message", None)
                raise for_code(code, f"cannot delete topic {t.name!r}" +
                               (f": {msg}" if msg else ""))

        await client.on_any_node(op, timeout_s + _SLACK_S, "delete topics")
