"""The `privacy` level's records: block bytes sealed with AES-256-GCM in records of up to
1 MiB, under keys the two sides agree inside TLS.

Python's `ssl` seals and opens TLS records of at most 16 KiB, each through a Python call,
a copy in and a copy out of OpenSSL's buffers: ~1 ms of CPU a MiB on each side of a data
port here, where AES-GCM itself takes ~0.3 (`cryptography`'s `encrypt_into`, OpenSSL with
AES-NI). So the data port does what kernel TLS does with TLS's keys: TLS authenticates
the worker (its certificate, the CA, the name), the reader if the cluster asks, and
agrees the keys (ECDHE: forward secret); the bulk bytes then go in records this module
seals, 64 times larger than TLS's, opened straight into the reader's buffer.

Both sides offer the ALPN protocol `SEALED_ALPN`; when the handshake selects it, each side
sends, inside TLS, a fresh random 32-byte key for the bytes *it* will send, and once it
has the other's, speaks records on the bare TCP connection:

    length (4 bytes, little-endian: ciphertext + tag) | ciphertext | GCM tag (16)

The nonce is the record's sequence number on its direction (each direction has its own
key, so no nonce is used twice under one key), the length its associated data: a record
altered, dropped, replayed, reordered or moved between connections fails to open, and the
connection is closed. A TLS client that offers no such protocol (an older reader,
`openssl s_client`) gets TLS records, as before.
"""

from __future__ import annotations

import os
import struct

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError:  # a client installed without the server extras
    AVAILABLE = False
else:
    # Sealing into a given buffer needs AEAD's encrypt_into / decrypt_into (newer cryptography);
    # without them this process neither offers nor takes records: TLS records stay.
    AVAILABLE = hasattr(AESGCM, "encrypt_into") and hasattr(AESGCM, "decrypt_into")

from reservoir.common.blocks.data_protection import SEALED_ALPN

__all__ = ["AVAILABLE", "SEALED_ALPN", "RecordOpener", "RecordSealer", "RecordRefused", "new_key"]
KEY_BYTES = 32
TAG_BYTES = 16
LENGTH = struct.Struct("<I")
# Big enough that the per-record cost (a Python call, a nonce, a tag) vanishes against
# the AES pass, small enough that a buffer per record in flight stays cheap.
MAX_PLAINTEXT = 1 << 20
MAX_RECORD = MAX_PLAINTEXT + TAG_BYTES


class RecordRefused(ConnectionError):
    """A record that does not open under this connection's key: tampered with, replayed,
    reordered, or not ours. The connection is closed."""


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def _aead(key: bytes) -> AESGCM:
    if len(key) != KEY_BYTES:
        raise ValueError(f"a record key has {KEY_BYTES} bytes, not {len(key)}")
    return AESGCM(key)


def _nonce(sequence: int) -> bytes:
    return sequence.to_bytes(12, "little")


class RecordSealer:
    """One direction's records, sealed in order."""

    def __init__(self, key: bytes) -> None:
        self._aead = _aead(key)
        self._sequence = 0

    @staticmethod
    def record_size(plaintext_bytes: int) -> int:
        return LENGTH.size + plaintext_bytes + TAG_BYTES

    def seal_into(self, plaintext: bytes | memoryview, record: memoryview) -> memoryview:
        """`plaintext` (<= MAX_PLAINTEXT bytes) sealed into `record` (the length, then the
        ciphertext and tag); returns the record, `record_size(len(plaintext))` bytes of
        `record`. The two must not overlap (`cryptography` refuses it)."""
        if len(plaintext) > MAX_PLAINTEXT:
            raise ValueError(f"a record holds at most {MAX_PLAINTEXT} bytes")
        size = self.record_size(len(plaintext))
        header = LENGTH.pack(len(plaintext) + TAG_BYTES)
        record[: LENGTH.size] = header
        self._aead.encrypt_into(
            _nonce(self._sequence), plaintext, header, record[LENGTH.size : size]
        )
        self._sequence += 1
        return record[:size]

    def seal(self, plaintext: bytes | memoryview) -> bytearray:
        """`plaintext` (<= MAX_PLAINTEXT bytes) as one record in a new buffer."""
        record = bytearray(self.record_size(len(plaintext)))
        self.seal_into(plaintext, memoryview(record))
        return record


class RecordOpener:
    """The other direction's records, opened in order."""

    def __init__(self, key: bytes) -> None:
        self._aead = _aead(key)
        self._sequence = 0

    @staticmethod
    def body_size(header: bytes | bytearray | memoryview) -> int:
        """The ciphertext + tag bytes that follow a record's length field;
        RecordRefused for a length no sealer writes."""
        (size,) = LENGTH.unpack(header)
        if not TAG_BYTES <= size <= MAX_RECORD:
            raise RecordRefused(f"a sealed record of {size} bytes")
        return int(size)

    def open_into(self, header: bytes, body: memoryview, out: memoryview) -> int:
        """The plaintext of the record (`header`, `body`) into `out` (at least
        len(body) - TAG_BYTES bytes); returns its length. RecordRefused if it does not
        open."""
        size = len(body) - TAG_BYTES
        try:
            self._aead.decrypt_into(_nonce(self._sequence), body, header, out[:size])
        except InvalidTag as exc:
            raise RecordRefused("a sealed record did not open: tampered with on the way") from exc
        self._sequence += 1
        return size
