"""A blocking admin client, just enough for the development broker: ApiVersions and
Metadata (is a node up, which brokers does it list) and the ACL requests of the secured
mode, each over its own socket, encoded with ``kio``."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import random
import socket
import ssl
import struct
from collections.abc import Mapping, Sequence
from typing import TypeVar, cast

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.delete_acls.v3.response import DeleteAclsResponse
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_acls.v3.response import DescribeAclsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v11.request import MetadataRequest as MetadataRequest11
from kio.schema.metadata.v11.request import MetadataRequestTopic as MetadataRequestTopic11
from kio.schema.metadata.v11.response import MetadataResponse as MetadataResponse11
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32
from kio.static.protocol import HeaderV2RequestPayload, ResponsePayload

from .common import _HOST

_R = TypeVar("_R", bound=ResponsePayload)


# --------------------------------------------------------------------------------------
# Talking to a broker (just enough to tell whether it is up)


def _parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host or _HOST, int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks += chunk
    return bytes(chunks)


def _request(address: str, request: HeaderV2RequestPayload, response_type: type[_R],
             timeout: float, ssl_context: ssl.SSLContext | None = None) -> _R:
    buf = io.BytesIO()
    correlation_id = random.randrange(1, 2**31)
    header = RequestHeader(request_api_key=request.__api_key__,
                           request_api_version=request.__version__,
                           correlation_id=i32(correlation_id), client_id="aioproducer-devbroker")
    entity_writer(RequestHeader)(buf, header)
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    host, port = _parse_address(address)
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((host, port), timeout=timeout))
        if ssl_context is not None:
            sock = stack.enter_context(ssl_context.wrap_socket(sock, server_hostname=host))
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        data = _recv_exact(sock, size)
    response_header, offset = entity_reader(response_type.__header_schema__)(data, 0)
    if response_header.correlation_id != correlation_id:
        raise ConnectionError("response correlation id does not match the request")
    response, _ = entity_reader(response_type)(data, offset)
    return response


def api_versions(address: str, timeout: float = 2.0, *,
                 ssl_context: ssl.SSLContext | None = None) -> ApiVersionsResponse:
    """Send ApiVersions (v3) to ``host:port`` (over TLS with ``ssl_context``); raises
    ``OSError`` (``ssl.SSLError`` included) if it does not answer."""
    request = ApiVersionsRequest(client_software_name="aioproducer-devbroker",
                                 client_software_version="1")
    response = _request(address, request, ApiVersionsResponse, timeout, ssl_context)
    if response.error_code != ErrorCode.none:
        raise ConnectionError(f"ApiVersions error {response.error_code.name}")
    return response


def fetch_metadata(address: str, topics: Sequence[str] | None = (),
                   timeout: float = 5.0) -> MetadataResponse:
    """Send Metadata (v12) to ``host:port``: no topics by default, ``None`` for all.

    A broker older than Kafka 3.0 has no v12: it gets v11, whose answer has the same
    fields but the topic ids (brokers, topics, partitions, leaders, errors)."""
    versions = api_versions(address, timeout).api_keys
    newest = max((int(k.max_version) for k in versions if int(k.api_key) == 3), default=12)
    if newest < 12:
        wanted11 = None if topics is None else tuple(
            MetadataRequestTopic11(topic_id=None, name=TopicName(t)) for t in topics)
        old = MetadataRequest11(topics=wanted11, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
        return cast(MetadataResponse, _request(address, old, MetadataResponse11, timeout))
    wanted = None if topics is None else tuple(
        MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics)
    request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    return _request(address, request, MetadataResponse, timeout)


# ACLs (for the secured mode's StandardAuthorizer), over the protocol like the above: the
# PLAINTEXT listener's principal (User:ANONYMOUS) is a super user there.

_ACL_RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5,
                       "DELEGATION_TOKEN": 6, "USER": 7}
_ACL_OPERATIONS = {"ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6,
                   "ALTER": 7, "DESCRIBE": 8, "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10,
                   "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13,
                   "DESCRIBE_TOKENS": 14, "TWO_PHASE_COMMIT": 15}
_ACL_PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
_ACL_PATTERNS = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}

CLUSTER_RESOURCE = "kafka-cluster"
"""The name of the one CLUSTER resource (for IDEMPOTENT_WRITE, CLUSTER_ACTION...)."""


def _acl_code(table: Mapping[str, int], what: str, value: str) -> i8:
    try:
        return i8(table[value.upper()])
    except KeyError:
        raise ValueError(f"unknown ACL {what} {value!r} (one of {', '.join(table)})") from None


def _acl_name(table: Mapping[str, int], code: int) -> str:
    return next((name for name, c in table.items() if c == code), str(code))


class AclError(RuntimeError):
    """The broker refused to create, list or delete ACLs."""


@dataclasses.dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` (``"User:bob"``) may (``ALLOW``) or may not (``DENY``) do
    ``operation`` (``WRITE``, ``DESCRIBE``, ``IDEMPOTENT_WRITE``...) on the resource
    ``resource_type`` (``TOPIC``, ``GROUP``, ``CLUSTER``, ``TRANSACTIONAL_ID``) named
    ``resource_name`` (``CLUSTER_RESOURCE`` for the cluster), matched ``LITERAL``-ly or as
    a ``PREFIXED`` name. Names are Kafka's, upper-case."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission: str = "ALLOW"
    pattern: str = "LITERAL"
    host: str = "*"

    def __post_init__(self) -> None:
        for field_name, table in (("resource_type", _ACL_RESOURCE_TYPES),
                                  ("operation", _ACL_OPERATIONS),
                                  ("permission", _ACL_PERMISSIONS),
                                  ("pattern", _ACL_PATTERNS)):
            value = str(getattr(self, field_name)).upper()
            _acl_code(table, field_name, value)
            object.__setattr__(self, field_name, value)
        if ":" not in self.principal:
            raise ValueError(f"an ACL principal looks like 'User:name', not {self.principal!r}")


def create_acls(address: str, bindings: Sequence[AclBinding], timeout: float = 10.0) -> None:
    """Create ACLs through the broker at ``host:port`` (CreateAcls v3) as its listener's
    principal, which must be allowed to (a super user). Raises ``AclError``."""
    if not bindings:
        return
    request = CreateAclsRequest(creations=tuple(
        AclCreation(resource_type=_acl_code(_ACL_RESOURCE_TYPES, "resource type",
                                            b.resource_type),
                    resource_name=b.resource_name,
                    resource_pattern_type=_acl_code(_ACL_PATTERNS, "pattern", b.pattern),
                    principal=b.principal, host=b.host,
                    operation=_acl_code(_ACL_OPERATIONS, "operation", b.operation),
                    permission_type=_acl_code(_ACL_PERMISSIONS, "permission", b.permission))
        for b in bindings))
    response = _request(address, request, CreateAclsResponse, timeout)
    failed = [f"{b}: {r.error_code.name} {r.error_message or ''}".rstrip()
              for b, r in zip(bindings, response.results, strict=False)
              if r.error_code != ErrorCode.none]
    if failed:
        raise AclError("CreateAcls failed: " + "; ".join(failed))


def describe_acls(address: str, principal: str | None = None,
                  timeout: float = 10.0) -> list[AclBinding]:
    """The ACLs the broker at ``host:port`` knows (of ``principal`` only, if given)."""
    request = DescribeAclsRequest(
        resource_type_filter=i8(_ACL_RESOURCE_TYPES["ANY"]), resource_name_filter=None,
        pattern_type_filter=i8(_ACL_PATTERNS["ANY"]), principal_filter=principal,
        host_filter=None, operation=i8(_ACL_OPERATIONS["ANY"]),
        permission_type=i8(_ACL_PERMISSIONS["ANY"]))
    response = _request(address, request, DescribeAclsResponse, timeout)
    if response.error_code != ErrorCode.none:
        raise AclError(f"DescribeAcls failed: {response.error_code.name} "
                       f"{response.error_message or ''}".rstrip())
    return [AclBinding(resource_type=_acl_name(_ACL_RESOURCE_TYPES, r.resource_type),
                       resource_name=r.resource_name,
                       pattern=_acl_name(_ACL_PATTERNS, r.pattern_type),
                       principal=a.principal, host=a.host,
                       operation=_acl_name(_ACL_OPERATIONS, a.operation),
                       permission=_acl_name(_ACL_PERMISSIONS, a.permission_type))
            for r in response.resources for a in r.acls]


def delete_acls(address: str, principal: str | None = None, timeout: float = 10.0) -> int:
    """Delete every ACL (of ``principal`` only, if given); returns how many went."""
    request = DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=i8(_ACL_RESOURCE_TYPES["ANY"]), resource_name_filter=None,
        pattern_type_filter=i8(_ACL_PATTERNS["ANY"]), principal_filter=principal,
        host_filter=None, operation=i8(_ACL_OPERATIONS["ANY"]),
        permission_type=i8(_ACL_PERMISSIONS["ANY"])),))
    response = _request(address, request, DeleteAclsResponse, timeout)
    deleted = 0
    for result in response.filter_results:
        if result.error_code != ErrorCode.none:
            raise AclError(f"DeleteAcls failed: {result.error_code.name} "
                           f"{result.error_message or ''}".rstrip())
        deleted += len(result.matching_acls)
    return deleted
