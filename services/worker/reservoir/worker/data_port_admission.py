"""Who may read on one data port connection (`block_transfer.py` has the frames): a reader
presents its token (AUTH, over TLS), or on a port in clear proves it holds one without
sending it (HELLO, then PROOF: `reservoir.common.blocks.data_protection`). A proven reader
on an `integrity` port gets every response sealed, under a key of this connection's own.

Each step answers the body of its OK response, or raises the domain error the connection
answers before it closes."""

from __future__ import annotations

import hmac
import os

from reservoir.common.blocks import data_protection as protection
from reservoir.common.blocks.data_protection import Level, ResponseSeal
from reservoir.common.errors import InvalidArgument, Unauthenticated
from reservoir.common.serving.auth import TokenTable, authorize_principal, authorize_token
from reservoir.common.worker_methods import READ_BLOCK

from .data_port_transport import ByteChannel
from .sealed_responses import SealedResponses


class Admission:
    def __init__(
        self, channel: ByteChannel, tokens: TokenTable | None, level: Level | None
    ) -> None:
        """`tokens`: None when this worker checks none (every reader is admitted);
        `level`: the cluster's data protection level (below privacy: proofs, in clear)."""
        self._channel = channel
        self._tokens = tokens
        self.admitted = tokens is None
        self._proofs: Level | None = level if level is not Level.PRIVACY else None
        self._nonces: tuple[bytes, bytes] | None = None
        self.sealed: SealedResponses | None = None  # the seal of each response, once proven

    def token(self, token: bytes) -> bytes:
        """AUTH: the reader's bearer token, allowed to call ReadBlock."""
        if self._proofs is not None:
            raise InvalidArgument(
                "this data port is in clear: prove a token (HELLO, PROOF), never send it"
            )
        if self._tokens is None:
            return b""  # no tokens checked here: nothing to prove
        authorize_token(self._tokens, READ_BLOCK, token.decode(errors="replace"))
        self.admitted = True
        return b""

    def hello(self, client_nonce: bytes) -> bytes:
        """HELLO: the level and this side's nonce, for the PROOF to come."""
        if self._proofs is None:
            raise InvalidArgument("this data port takes no HELLO (TLS, or no tokens)")
        if len(client_nonce) != protection.NONCE_BYTES or self._nonces is not None:
            raise InvalidArgument("a malformed or second HELLO")
        server_nonce = os.urandom(protection.NONCE_BYTES)
        self._nonces = (client_nonce, server_nonce)
        return bytes([self._proofs.code]) + server_nonce

    def prove(self, body: bytes) -> bytes:
        """PROOF: a token of this cluster's, named by its id, proven by an HMAC over both
        nonces; the reader is then admitted, and with `integrity` its responses sealed."""
        if self._proofs is None or self._nonces is None or self._tokens is None:
            raise InvalidArgument("a PROOF before its HELLO")
        if len(body) != protection.TOKEN_ID_BYTES + protection.PROOF_BYTES:
            raise InvalidArgument("a malformed PROOF")
        entry = self._tokens.entry(body[: protection.TOKEN_ID_BYTES])
        expected = protection.proof(entry[0], *self._nonces) if entry is not None else b""
        if entry is None or not hmac.compare_digest(expected, body[protection.TOKEN_ID_BYTES :]):
            raise Unauthenticated(
                "the token proof was refused: this cluster's tokens file does not list the "
                "token (a token of another cluster, mistyped, or revoked?)"
            )
        authorize_principal(entry[1], READ_BLOCK)
        self.admitted = True
        if self._proofs is Level.INTEGRITY:
            seal = ResponseSeal(protection.session_key(entry[0], *self._nonces))
            self.sealed = SealedResponses(self._channel, seal)
        return b""
