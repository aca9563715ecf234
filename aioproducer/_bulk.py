"""``send_many()``'s input: Python lists or Arrow columns, in the form the native loop
reads (``CoreAppender.append_many``), and row by row for the Python path.

Lists go to the native loop as they are. An Arrow column (pyarrow ``Array`` or
``ChunkedArray``) goes as the addresses of its buffers: no Python object per record;
this object keeps the arrays alive while the native loop reads them. ``string``
columns are read as ``binary`` (the same buffers, UTF-8), ``timestamp`` columns as
their int64 milliseconds. A ``ChunkedArray`` of several chunks is combined into one
array first (one copy).

pyarrow is imported only when an Arrow column is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ._native import ProducerBatch
from .errors import SerializationError
from .record import SendManyResult

__all__ = ["BulkInput", "is_arrow", "send_many_error"]


def is_arrow(obj: object) -> bool:
    """A pyarrow Array or ChunkedArray (checked without importing pyarrow)."""
    module = type(obj).__module__
    if not module.startswith("pyarrow"):
        return False
    import pyarrow as pa
    return isinstance(obj, (pa.Array, pa.ChunkedArray))


def _address(buf: Any) -> int:
    return 0 if buf is None else int(buf.address)


def _one_array(col: Any) -> Any:
    import pyarrow as pa
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return col.chunk(0)
        return col.combine_chunks() if col.num_chunks else pa.array([], type=col.type)
    return col


def _binary_array(col: Any, what: str) -> Any:
    """``col`` as one binary or large_binary array (string columns viewed as binary)."""
    import pyarrow as pa
    arr = _one_array(col)
    t = arr.type
    if pa.types.is_string(t):
        return arr.view(pa.binary())
    if pa.types.is_large_string(t):
        return arr.view(pa.large_binary())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return arr
    if pa.types.is_binary_view(t) or pa.types.is_string_view(t) or \
            pa.types.is_fixed_size_binary(t):
        return arr.cast(pa.binary())
    raise SerializationError(
        f"send_many: the Arrow {what} column is {t}; it must be binary, large_binary, "
        "string or large_string")


def _binary_spec(arr: Any) -> tuple[int, int, int, int, bool]:
    import pyarrow as pa
    validity, offsets, data = arr.buffers()[:3]
    if arr.null_count == 0:
        validity = None
    return (_address(validity), _address(offsets), _address(data), arr.offset,
            pa.types.is_large_binary(arr.type))


def _timestamps_array(col: Any) -> Any:
    """``col`` as an int64 array of milliseconds since the epoch."""
    import pyarrow as pa
    arr = _one_array(col)
    t = arr.type
    if pa.types.is_timestamp(t):
        if t.unit != "ms":
            arr = arr.cast(pa.timestamp("ms", tz=t.tz), safe=False)
        return arr.view(pa.int64())
    if pa.types.is_integer(t):
        return arr if t == pa.int64() else arr.cast(pa.int64())
    raise SerializationError(
        f"send_many: the Arrow timestamps column is {t}; it must be int64 (ms since the "
        "epoch) or a timestamp")


def _headers_array(col: Any) -> tuple[Any, Any, Any]:
    """``col`` (list<struct<key: string, value: binary>>, Spark's Kafka headers) as
    (the list array, its key column, its value column)."""
    import pyarrow as pa
    arr = _one_array(col)
    t = arr.type
    ok = (pa.types.is_list(t) or pa.types.is_large_list(t)) and \
        pa.types.is_struct(t.value_type)
    if ok:
        st = t.value_type
        names = [st.field(i).name for i in range(st.num_fields)]
        ok = "key" in names and "value" in names
    if not ok:
        raise SerializationError(
            f"send_many: the Arrow headers column is {t}; it must be "
            "list<struct<key: string, value: binary>> (Spark's Kafka headers)")
    structs = arr.values
    if structs.null_count:
        raise SerializationError("send_many: the Arrow headers column has a null header "
                                 "(a null struct in a list); drop it or give it a key")
    key_type = structs.type.field("key").type
    if not (pa.types.is_string(key_type) or pa.types.is_large_string(key_type)):
        raise SerializationError(
            f"send_many: the Arrow header keys are {key_type}; they must be string")
    keys = _binary_array(structs.field("key"), "header key")
    values = _binary_array(structs.field("value"), "header value")
    return arr, keys, values


class BulkInput:
    """One ``send_many()`` call's columns: ``native`` arguments for the native loop and
    :meth:`row` for the Python path."""

    __slots__ = ("_harr", "_hkeys", "_hvals", "count", "headers", "keys", "timestamps",
                 "values")

    def __init__(self, values: Sequence[Any] | Any, keys: Sequence[Any] | Any | None,
                 headers: Sequence[Any] | Any | None,
                 timestamps: Sequence[Any] | Any | None) -> None:
        self._harr: Any = None
        self._hkeys: Any = None
        self._hvals: Any = None
        if is_arrow(values):
            self.values: Any = _binary_array(values, "values")
        else:
            self.values = values if type(values) is list else list(values)
        n = len(self.values)
        self.count = n
        self.keys: Any = None
        if keys is not None:
            self.keys = _binary_array(keys, "keys") if is_arrow(keys) else (
                keys if type(keys) is list else list(keys))
            _same_length(len(self.keys), n, "keys", "key")
        self.headers: Any = None
        if headers is not None:
            if is_arrow(headers):
                self._harr, self._hkeys, self._hvals = _headers_array(headers)
                self.headers = self._harr
            elif isinstance(headers, (str, bytes)):
                raise SerializationError(
                    "send_many: headers must be a sequence with one entry per record (None "
                    "or a list of (str, bytes | None) pairs), got " + type(headers).__name__)
            else:
                self.headers = headers if type(headers) is list else list(headers)
            _same_length(len(self.headers), n, "headers", "header list")
        self.timestamps: Any = None
        if timestamps is not None:
            if is_arrow(timestamps):
                self.timestamps = _timestamps_array(timestamps)
            elif isinstance(timestamps, (str, bytes)):
                raise SerializationError(
                    "send_many: timestamps must be a sequence of int ms (or None) with one "
                    "entry per record, got " + type(timestamps).__name__)
            else:
                self.timestamps = timestamps if type(timestamps) is list else list(timestamps)
            _same_length(len(self.timestamps), n, "timestamps", "timestamp")

    def native(self) -> tuple[Any, Any, Any, Any]:
        """(values, keys, headers, timestamps) as ``append_many`` takes them: lists as
        they are, Arrow columns as buffer addresses (valid while ``self`` lives)."""
        values, keys, headers, timestamps = self.values, self.keys, self.headers, \
            self.timestamps
        if values is not None and type(values) is not list:
            values = _binary_spec(values)
        if keys is not None and type(keys) is not list:
            keys = _binary_spec(keys)
        if self._harr is not None:
            arr = self._harr
            validity, offsets = arr.buffers()[:2]
            import pyarrow as pa
            headers = (_address(validity if arr.null_count else None), _address(offsets),
                       arr.offset, pa.types.is_large_list(arr.type),
                       _binary_spec(self._hkeys), _binary_spec(self._hvals))
        if timestamps is not None and type(timestamps) is not list:
            validity, data = timestamps.buffers()[:2]
            timestamps = (_address(validity if timestamps.null_count else None),
                          _address(data), timestamps.offset)
        return values, keys, headers, timestamps

    def row(self, i: int) -> tuple[Any, Any, Any, Any]:
        """Record ``i`` as Python objects: (value, key, headers, timestamp)."""
        value = self.values[i]
        if type(self.values) is not list:
            value = value.as_py()
        key = None
        if self.keys is not None:
            key = self.keys[i]
            if type(self.keys) is not list:
                key = key.as_py()
        headers = None
        if self._harr is not None:
            entry = self._harr[i].as_py()
            if entry is not None:
                headers = [(h["key"], h["value"].encode() if isinstance(h["value"], str)
                            else h["value"]) for h in entry]
        elif self.headers is not None:
            headers = self.headers[i]
        timestamp = None
        if self.timestamps is not None:
            timestamp = self.timestamps[i]
            if type(self.timestamps) is not list:
                timestamp = timestamp.as_py()
        return value, key, headers, timestamp


def _same_length(got: int, n: int, what: str, one: str) -> None:
    if got != n:
        raise SerializationError(
            f"send_many: {got} {what} for {n} values; give one {one} per value")


def send_many_error(exc: BaseException, i: int, touched: list[ProducerBatch],
                    firsts: list[int] | None = None,
                    ends: list[int] | None = None) -> BaseException:
    """What ``send_many()`` raises when record ``i`` failed with ``exc``.

    A :class:`SerializationError` becomes one that names the record (``record i``, the
    original as its cause). Records ``0..i-1`` were buffered and will be sent: a note
    says so; a cancelled call also hands over their result as
    ``exc.send_many_result``.
    """
    cancelled = isinstance(exc, asyncio.CancelledError)
    err = exc
    if type(exc) is SerializationError:
        err = SerializationError(f"send_many: record {i}: {exc}")
    if (i or cancelled) and hasattr(err, "add_note"):
        err.add_note(f"send_many: records 0..{i - 1} were buffered and will be sent"
                     if i else "send_many: no record was buffered")
    if cancelled:
        err.send_many_result = SendManyResult(touched, i, firsts, ends)  # type: ignore[attr-defined]
    return err
