"""Data protection levels of a worker's data port on a secure cluster, as HDFS has them for
its data transfer protocol. The operator chooses one per cluster
(`RESERVOIR_DATA_PROTECTION`):

- `privacy` (the default): the port speaks TLS, as gRPC does: TLS authenticates the
  worker (and the reader, if the cluster asks) and agrees the keys of the AES-GCM records
  that then carry the bytes (`sealed_records.py`). An eavesdropper on the network sees
  nothing of the blocks; a reader proves itself with its token inside them.
- `integrity`: bytes in clear, each response sealed. A reader proves it holds a token of
  the cluster without sending it (below); both sides then derive a session key, and every
  response carries a 16-byte GMAC tag (AES-GCM with no plaintext, keyed per connection)
  over the request it answers, its header and its bytes. Tampering with a request, a
  response, their order or a single bit of a block is detected and the block is refused.
  An eavesdropper can read the blocks: for data that is not secret from the network
  (public datasets), at the cost of one GHASH pass (~7 GB/s a core here) instead of TLS.
- `authentication`: bytes in clear and unsealed: only who may read is checked (the same
  proof). For networks trusted against tampering and eavesdropping.

The proof never puts the token on the wire, so an eavesdropper cannot replay it on gRPC:

    reader -> HELLO  client nonce (16 bytes)
    worker -> OK     level (1 byte) | server nonce (16 bytes)
    reader -> PROOF  token id (16) | HMAC-SHA256(key=sha256(token), "proof" | nonces)
    worker -> OK, or UNAUTHENTICATED / PERMISSION_DENIED and the connection closes

The worker knows tokens by their SHA-256 only (the tokens file), which is the HMAC key, so
it holds no secret it did not hold before; the token id (a hash of that hash) names the
entry without revealing it. The session key is HMAC-SHA256 of the nonces under the same
key, so two connections never share one, and a response's GCM nonce is its sequence
number on the connection, never used twice under one key.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from typing import Any

from reservoir.common.errors import InvalidArgument

# The ALPN protocol a `privacy` reader offers: records sealed outside TLS once TLS has
# agreed their keys (`sealed_records.py`).
SEALED_ALPN = "reservoir-sealed/1"
NONCE_BYTES = 16
TOKEN_ID_BYTES = 16
PROOF_BYTES = 32
TAG_BYTES = 16
_PROOF = b"reservoir data port proof v1"
_SESSION = b"reservoir data port session v1"


class Level(enum.StrEnum):
    PRIVACY = "privacy"
    INTEGRITY = "integrity"
    AUTHENTICATION = "authentication"

    @classmethod
    def parse(cls, value: str) -> Level:
        try:
            return cls(value.strip().lower())
        except ValueError:
            choices = ", ".join(level.value for level in cls)
            raise InvalidArgument(
                f"RESERVOIR_DATA_PROTECTION={value!r}: one of {choices}"
            ) from None

    @property
    def code(self) -> int:
        return list(Level).index(self)

    @classmethod
    def of_code(cls, code: int) -> Level:
        levels = list(cls)
        if not 0 <= code < len(levels):
            raise InvalidArgument(f"data protection level {code} is not known")
        return levels[code]


def token_id(token_sha256: bytes) -> bytes:
    """The name of a token's entry on the wire: a hash of its hash."""
    return hashlib.sha256(b"reservoir token id" + token_sha256).digest()[:TOKEN_ID_BYTES]


def proof(token_sha256: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.digest(token_sha256, _PROOF + client_nonce + server_nonce, "sha256")


def session_key(token_sha256: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.digest(token_sha256, _SESSION + client_nonce + server_nonce, "sha256")[:16]


# Below this many bytes a response's tag is one AEAD call over the joined pieces (~3 us);
# past it, a GMAC fed piece by piece as the bytes pass (a Cipher object costs ~8 us, a
# copy of a large body more). Both give the same tag: GCM's associated data is one stream.
_JOIN_BELOW = 64 * 1024


class ResponseSeal:
    """The tags of one connection's responses, in order (the worker seals, the reader
    checks, each counting responses the same way)."""

    def __init__(self, key: bytes) -> None:
        # Imported here: settings name the levels, and every process reads settings.
        from cryptography.hazmat.primitives.ciphers import algorithms
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)
        self._key: Any = algorithms.AES(key)
        self._sequence = 0

    def begin(self, request: bytes, header: bytes) -> ResponseTag:
        """The next response's tag, over the request it answers and its header so far;
        its body is fed with `ResponseTag.update` as it passes."""
        nonce = self._sequence.to_bytes(12, "little")
        self._sequence += 1
        start = len(request).to_bytes(4, "little") + request + header
        return ResponseTag(self._aead, self._key, nonce, start)

    def tag(self, request: bytes, header: bytes, body: bytes | memoryview) -> bytes:
        """The next response's tag, over the request it answers, its header and body."""
        running = self.begin(request, header)
        running.update(body)
        return running.finish()

    def check(self, request: bytes, header: bytes, body: bytes | memoryview, tag: bytes) -> bool:
        return self.begin(request, header).update(body).matches(tag)


class ResponseTag:
    """One response's GMAC, fed its body piece by piece (each piece while it is still in
    the CPU's cache after the copy that brought it: the pass then costs a third)."""

    def __init__(self, aead: Any, key: Any, nonce: bytes, start: bytes) -> None:
        self._aead = aead  # the connection's AESGCM, for a small response's one call
        self._key = key  # its AES key, for a GMAC fed piece by piece
        self._nonce = nonce
        self._joined: list[bytes] | None = [start]
        self._size = len(start)
        self._gmac: Any = None

    def update(self, piece: bytes | memoryview) -> ResponseTag:
        if self._joined is not None and self._size + len(piece) < _JOIN_BELOW:
            self._joined.append(bytes(piece))  # the caller may reuse its buffer
            self._size += len(piece)
            return self
        if self._gmac is None:
            from cryptography.hazmat.primitives.ciphers import Cipher, modes

            self._gmac = Cipher(self._key, modes.GCM(self._nonce)).encryptor()
            for joined in self._joined or ():
                self._gmac.authenticate_additional_data(joined)
            self._joined = None
        self._gmac.authenticate_additional_data(piece)
        return self

    def finish(self) -> bytes:
        if self._joined is not None:
            return bytes(self._aead.encrypt(self._nonce, b"", b"".join(self._joined)))
        self._gmac.finalize()
        return bytes(self._gmac.tag)

    def matches(self, tag: bytes | bytearray | memoryview) -> bool:
        return hmac.compare_digest(self.finish(), bytes(tag))
