"""An async Schema Registry client (Confluent's REST API) on ``httpx.AsyncClient``.

Registrations and lookups are cached per (subject, schema), schemas per id, so a
serializer asks the registry once per subject and schema and never again.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .errors import SchemaIncompatibleError, SchemaNotFoundError, SchemaRegistryError

__all__ = ["AsyncSchemaRegistryClient", "RegisteredSchema", "Schema"]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True)
class Schema:
    """A schema as the registry stores it: its text, type and references."""

    schema_str: str
    schema_type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()
    """``(name, subject, version)`` of each schema this one refers to."""

    def __post_init__(self) -> None:
        if not isinstance(self.schema_str, str) or not self.schema_str:
            raise TypeError("Schema.schema_str must be a non-empty str")
        if self.schema_type not in _SCHEMA_TYPES:
            raise ValueError(f"Schema.schema_type must be one of {_SCHEMA_TYPES}, "
                             f"got {self.schema_type!r}")

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": self.schema_str}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [{"name": n, "subject": s, "version": v}
                                  for n, s, v in self.references]
        return body


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema registered under a subject: its id, and version when known."""

    schema_id: int
    schema: Schema
    subject: str | None = None
    version: int | None = None


def _client_cert_context(verify: Any, cert: Any) -> ssl.SSLContext:
    """An SSL context that verifies as ``verify`` says and presents ``cert`` (a path, or
    ``(cert, key)`` / ``(cert, key, password)``)."""
    if isinstance(verify, ssl.SSLContext):
        ctx = verify
    elif isinstance(verify, (str, os.PathLike)):
        ctx = ssl.create_default_context(cafile=os.fspath(verify))
    else:
        ctx = ssl.create_default_context()
        if verify is False:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    if isinstance(cert, (str, os.PathLike)):
        ctx.load_cert_chain(os.fspath(cert))
    elif isinstance(cert, tuple) and 2 <= len(cert) <= 3:
        ctx.load_cert_chain(*cert)
    else:
        raise TypeError("cert must be a path or a (cert, key[, password]) tuple")
    return ctx


def _schema_of(body: Mapping[str, Any]) -> Schema:
    refs = tuple((str(r["name"]), str(r["subject"]), int(r["version"]))
                 for r in body.get("references") or ())
    return Schema(str(body["schema"]), str(body.get("schemaType") or "AVRO"), refs)


@dataclass
class _Caches:
    ids: dict[tuple[str, Schema], int] = field(default_factory=dict)
    by_id: dict[int, Schema] = field(default_factory=dict)
    latest: dict[str, RegisteredSchema] = field(default_factory=dict)


class AsyncSchemaRegistryClient:
    """A Schema Registry client (Confluent's API; Apicurio serves it under
    ``/apis/ccompat/v7``).

    ``url``: the API's base URL. ``basic_auth``: ``(user, password)``, or put them in the
    URL (``https://user:pw@host``). TLS: ``verify`` (True, False, a CA bundle path or an
    ``ssl.SSLContext``) and ``cert`` (a client certificate: a path or ``(cert, key)``,
    loaded into the context given to httpx). ``timeout`` bounds every request (seconds).
    ``transport`` and ``event_hooks`` go to ``httpx.AsyncClient`` as they are (tests count
    requests with an event hook). Use ``async with`` or call :meth:`aclose`.
    """

    def __init__(self, url: str, *, basic_auth: tuple[str, str] | None = None,
                 verify: Any = True, cert: Any = None, timeout: float = 10.0,
                 transport: Any = None,
                 event_hooks: Mapping[str, list[Any]] | None = None) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - the schema extra is not installed
            raise ImportError("aioproducer.schema needs httpx: pip install "
                              "'aioproducer[schema]'") from exc
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
        parsed = httpx.URL(url)
        if parsed.username and basic_auth is None:
            basic_auth = (parsed.username, parsed.password or "")
            parsed = parsed.copy_with(username=None, password=None)
        if basic_auth is not None and (
                not isinstance(basic_auth, tuple) or len(basic_auth) != 2
                or not all(isinstance(s, str) for s in basic_auth)):
            raise TypeError("basic_auth must be a (user, password) pair of str")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.url = str(parsed).rstrip("/")
        kwargs: dict[str, Any] = {
            "base_url": self.url, "timeout": float(timeout),
            "headers": {"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE},
            "event_hooks": dict(event_hooks or {}),
        }
        if basic_auth is not None:
            kwargs["auth"] = httpx.BasicAuth(*basic_auth)
        if transport is not None:
            kwargs["transport"] = transport
        else:
            kwargs["verify"] = verify if cert is None else _client_cert_context(verify, cert)
        self.http = httpx.AsyncClient(**kwargs)
        self._caches = _Caches()
        self._locks: dict[Any, asyncio.Lock] = {}

    async def __aenter__(self) -> AsyncSchemaRegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- requests ----------------------------------------------------------------------

    async def _request(self, method: str, path: str, body: Any = None,
                       params: Mapping[str, str] | None = None) -> Any:
        import httpx
        try:
            resp = await self.http.request(
                method, path, params=params,
                content=None if body is None else json.dumps(body).encode())
        except httpx.HTTPError as exc:
            raise SchemaRegistryError(f"Schema Registry {method} {path}: "
                                      f"{type(exc).__name__}: {exc}") from exc
        try:
            data = resp.json() if resp.content else None
        except ValueError:
            data = None
        if resp.is_success:
            return data
        code = data.get("error_code") if isinstance(data, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        text = f"Schema Registry {method} {path}: HTTP {resp.status_code}" \
               f"{f' ({code})' if code is not None else ''}: {message or resp.text[:500]}"
        if resp.status_code == 409:
            raise SchemaIncompatibleError(text, resp.status_code, code)
        if resp.status_code == 404:
            raise SchemaNotFoundError(text, resp.status_code, code)
        raise SchemaRegistryError(text, resp.status_code, code)

    def _lock(self, key: Any) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    @staticmethod
    def _subject_path(subject: str) -> str:
        if not isinstance(subject, str) or not subject:
            raise ValueError(f"subject must be a non-empty str, got {subject!r}")
        return quote(subject, safe="")

    # -- the API -----------------------------------------------------------------------

    async def register_schema(self, subject: str, schema: Schema) -> int:
        """Register ``schema`` under ``subject`` (or find it there); its id. Cached: the
        registry is asked once per (subject, schema). An incompatible schema raises
        :class:`SchemaIncompatibleError`."""
        key = (subject, schema)
        cached = self._caches.ids.get(key)
        if cached is not None:
            return cached
        async with self._lock(("register", key)):
            cached = self._caches.ids.get(key)
            if cached is not None:
                return cached
            data = await self._request(
                "POST", f"/subjects/{self._subject_path(subject)}/versions", schema.to_json())
            schema_id = int(data["id"])
            self._caches.ids[key] = schema_id
            self._caches.by_id.setdefault(schema_id, schema)
            return schema_id

    async def lookup_schema(self, subject: str, schema: Schema) -> RegisteredSchema:
        """The registration of ``schema`` under ``subject`` (without registering it);
        :class:`SchemaNotFoundError` if it is not there. Cached."""
        key = (subject, schema)
        cached = self._caches.ids.get(key)
        if cached is not None:
            return RegisteredSchema(cached, schema, subject)
        async with self._lock(("lookup", key)):
            cached = self._caches.ids.get(key)
            if cached is not None:
                return RegisteredSchema(cached, schema, subject)
            data = await self._request(
                "POST", f"/subjects/{self._subject_path(subject)}", schema.to_json())
            schema_id = int(data["id"])
            self._caches.ids[key] = schema_id
            return RegisteredSchema(schema_id, schema, subject, data.get("version"))

    async def get_latest_version(self, subject: str, *, cached: bool = True
                                 ) -> RegisteredSchema:
        """The latest version registered under ``subject`` (cached unless ``cached=False``)."""
        if cached and subject in self._caches.latest:
            return self._caches.latest[subject]
        data = await self._request(
            "GET", f"/subjects/{self._subject_path(subject)}/versions/latest")
        reg = RegisteredSchema(int(data["id"]), _schema_of(data), data.get("subject", subject),
                               data.get("version"))
        self._caches.latest[subject] = reg
        self._caches.by_id.setdefault(reg.schema_id, reg.schema)
        return reg

    async def get_schema(self, schema_id: int) -> Schema:
        """The schema of an id. Cached."""
        cached = self._caches.by_id.get(schema_id)
        if cached is not None:
            return cached
        data = await self._request("GET", f"/schemas/ids/{int(schema_id)}")
        schema = _schema_of(data)
        self._caches.by_id[schema_id] = schema
        return schema

    async def test_compatibility(self, subject: str, schema: Schema,
                                 version: str = "latest") -> tuple[bool, list[str]]:
        """Whether ``schema`` passes ``subject``'s compatibility rule against ``version``;
        ``(is_compatible, reasons)``."""
        data = await self._request(
            "POST", f"/compatibility/subjects/{self._subject_path(subject)}/versions/"
                    f"{quote(str(version), safe='')}",
            schema.to_json(), params={"verbose": "true"})
        reasons = data.get("messages") or ([data["reason"]] if data.get("reason") else [])
        return bool(data.get("is_compatible")), [str(r) for r in reasons]

    async def set_compatibility(self, level: str, subject: str | None = None) -> str:
        """Set the compatibility level (BACKWARD, FORWARD, FULL, NONE, ..._TRANSITIVE) of
        ``subject``, or the global one."""
        path = "/config" if subject is None else f"/config/{self._subject_path(subject)}"
        data = await self._request("PUT", path, {"compatibility": level})
        return str(data.get("compatibility", level))

    async def get_compatibility(self, subject: str | None = None) -> str:
        """The compatibility level of ``subject`` (its own, else the global one), or the
        global one."""
        if subject is not None:
            try:
                data = await self._request("GET", f"/config/{self._subject_path(subject)}",
                                           params={"defaultToGlobal": "true"})
                level = data.get("compatibilityLevel") or data.get("compatibility")
                if level:
                    return str(level)
            except SchemaNotFoundError:
                pass
        data = await self._request("GET", "/config")
        return str(data.get("compatibilityLevel") or data.get("compatibility") or "")

    async def get_subjects(self) -> list[str]:
        """Every subject registered."""
        return [str(s) for s in await self._request("GET", "/subjects")]

    async def get_versions(self, subject: str) -> list[int]:
        """The versions registered under ``subject``."""
        return [int(v) for v in await self._request(
            "GET", f"/subjects/{self._subject_path(subject)}/versions")]

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Delete ``subject`` (soft, then permanently with ``permanent=True``)."""
        path = f"/subjects/{self._subject_path(subject)}"
        versions = await self._request("DELETE", path)
        if permanent:
            await self._request("DELETE", path, params={"permanent": "true"})
        self._caches.latest.pop(subject, None)
        for key in [k for k in self._caches.ids if k[0] == subject]:
            del self._caches.ids[key]
        return [int(v) for v in versions or ()]

    def clear_caches(self) -> None:
        """Forget every cached registration, lookup and schema."""
        self._caches = _Caches()

