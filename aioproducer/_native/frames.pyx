# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A broker connection's framing of requests, compiled: the head written before a
request's body (its size and request header), and the record of a request waiting for
its response. Both are made once per request (``net/connection.py``)."""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_CheckExact, PyByteArray_GET_SIZE
from cpython.bytes cimport (
    PyBytes_AS_STRING,
    PyBytes_CheckExact,
    PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE,
)
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy


cdef extern from "Python.h":
    bint PyMemoryView_Check(object)
    Py_buffer* PyMemoryView_GET_BUFFER(object)

# A request's size field is an INT32.
cdef int64_t MAX_REQUEST = 0x7FFFFFFF


cdef inline Py_ssize_t _nbytes(object part) except -1:
    cdef Py_buffer buf
    if PyBytes_CheckExact(part):
        return PyBytes_GET_SIZE(part)
    if PyMemoryView_Check(part):
        return PyMemoryView_GET_BUFFER(part).len
    if PyByteArray_CheckExact(part):
        return PyByteArray_GET_SIZE(part)
    PyObject_GetBuffer(part, &buf, PyBUF_SIMPLE)
    try:
        return buf.len
    finally:
        PyBuffer_Release(&buf)


def request_head(int api_key, int api_version, int correlation_id,
                 bytes client_id_field, bint flexible, body_parts):
    """``(head, total)``: the bytes written before a request's ``body_parts`` (its
    4-byte size, then request header v1, or v2 when ``flexible``: api key, version,
    correlation id, ``client_id_field`` as encoded, and v2's empty tagged fields),
    and the request's size on the wire, head included."""
    if api_key < -32768 or api_key > 32767 or api_version < -32768 or api_version > 32767:
        raise OverflowError(f"api key {api_key} or version {api_version} is not an INT16")
    cdef Py_ssize_t field = PyBytes_GET_SIZE(client_id_field)
    cdef Py_ssize_t header = 8 + field + (1 if flexible else 0)
    cdef int64_t size = header
    for part in body_parts:
        size += _nbytes(part)
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes is larger than a Kafka frame can be")
    head = PyBytes_FromStringAndSize(NULL, 4 + header)
    cdef uint8_t* p = <uint8_t*>PyBytes_AS_STRING(head)
    cdef uint32_t n = <uint32_t>size
    p[0] = <uint8_t>(n >> 24); p[1] = <uint8_t>(n >> 16); p[2] = <uint8_t>(n >> 8)
    p[3] = <uint8_t>n
    cdef uint16_t k = <uint16_t>api_key
    cdef uint16_t v = <uint16_t>api_version
    cdef uint32_t c = <uint32_t>correlation_id
    p[4] = <uint8_t>(k >> 8); p[5] = <uint8_t>k
    p[6] = <uint8_t>(v >> 8); p[7] = <uint8_t>v
    p[8] = <uint8_t>(c >> 24); p[9] = <uint8_t>(c >> 16); p[10] = <uint8_t>(c >> 8)
    p[11] = <uint8_t>c
    if field:
        memcpy(p + 12, PyBytes_AS_STRING(client_id_field), <size_t>field)
    if flexible:
        p[12 + field] = 0
    return head, size + 4


@cython.final
cdef class InFlight:
    """A request waiting for its response: its ``future``, or, for a request sent
    with a reply function, its ``reply`` (``future`` is then None)."""

    cdef readonly int correlation_id
    cdef readonly int api_key
    cdef readonly int api_version
    cdef readonly bint flexible_header
    cdef readonly object future
    cdef readonly double deadline
    cdef readonly long long timeout_ms
    cdef readonly object decode
    cdef readonly object reply

    def __init__(self, int correlation_id, int api_key, int api_version,
                 bint flexible_header, future, double deadline, long long timeout_ms,
                 decode, reply):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.flexible_header = flexible_header
        self.future = future
        self.deadline = deadline
        self.timeout_ms = timeout_ms
        self.decode = decode
        self.reply = reply
