"""A new `bytes` object of a given length, filled in place before anyone else sees it.

Reads return `bytes`. Building one from pieces (`b"".join`) or from a filled `bytearray`
(`bytes(buf)`) copies every byte once more; for a file read from this host's block files
that doubles the work of the whole read. CPython's C API allows exactly this case: a bytes
object made by `PyBytes_FromStringAndSize(NULL, n)` may be written through
`PyBytes_AsString` until it is shared. Callers fill the returned view, then hand out only
the bytes object (never the view). Elsewhere than CPython, a bytearray and one copy.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable

_IN_PLACE = platform.python_implementation() == "CPython"
if _IN_PLACE:
    _new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
    _new_bytes.restype = ctypes.py_object
    _new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    _bytes_buffer = ctypes.pythonapi.PyBytes_AsString
    _bytes_buffer.restype = ctypes.c_void_p
    _bytes_buffer.argtypes = [ctypes.py_object]
    # A writable view of that memory in one call (a ctypes array type per length would
    # cost more than reading a small file).
    _memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
    _memory_view.restype = ctypes.py_object
    _memory_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
    _PYBUF_WRITE = 0x200


def filled_bytes(length: int, fill: Callable[[memoryview], bool]) -> bytes | None:
    """`length` bytes written by `fill` into the writable view it is given, which answers
    whether it wrote them all: None when it did not (a read that must go another way).
    What `fill` raises propagates; a half-filled object is dropped, never returned."""
    if length <= 0:
        return b"" if fill(memoryview(bytearray())) else None
    if not _IN_PLACE:
        buffer = bytearray(length)
        return bytes(buffer) if fill(memoryview(buffer)) else None
    result: bytes = _new_bytes(None, length)
    view: memoryview = _memory_view(_bytes_buffer(result), length, _PYBUF_WRITE)
    try:
        filled = fill(view)
    finally:
        view.release()
    return result if filled else None


def bytes_to_fill(length: int) -> tuple[bytes, memoryview]:
    """A new `bytes` object of `length` bytes and a writable view of its memory, for a
    fill that outlasts one call (a block received on another thread): the view keeps the
    object alive, however the caller lets go of it. The same contract as `filled_bytes`:
    fill the view, release it, only then hand out the object. Elsewhere than CPython, the
    bytes come out of a filled bytearray once `finished_bytes` asks for them."""
    if not _IN_PLACE or length <= 0:
        buffer = bytearray(length)
        return b"", memoryview(buffer)
    result: bytes = _new_bytes(None, length)
    memory = (ctypes.c_char * length).from_address(_bytes_buffer(result))
    memory.owner = result  # type: ignore[attr-defined]
    return result, memoryview(memory).cast("B")


def finished_bytes(result: bytes, view: memoryview) -> bytes:
    """The object `bytes_to_fill` gave, once `view` is filled (and then released)."""
    if not _IN_PLACE or not len(view):
        data = bytes(view)
        view.release()
        return data
    view.release()
    return result
