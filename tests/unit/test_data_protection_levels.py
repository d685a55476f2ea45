"""The data port's protection levels without servers: the setting, the token proof, and
the seal that ties each response to its request, its place in the stream and its bytes."""

from __future__ import annotations

import hashlib
import os

import pytest

from reservoir.common.blocks import data_protection as protection
from reservoir.common.blocks.data_protection import Level, ResponseSeal
from reservoir.common.config import SecuritySettings
from reservoir.common.errors import InvalidArgument
from reservoir.common.serving.auth import TokenTable


def test_the_level_is_privacy_by_default_and_only_on_a_cluster_with_tls() -> None:
    assert SecuritySettings().data_level is None
    assert SecuritySettings(tls_ca="ca.pem").data_level is Level.PRIVACY
    integrity = SecuritySettings(tls_ca="ca.pem", data_protection="Integrity")
    assert integrity.data_level is Level.INTEGRITY


def test_an_unknown_level_is_refused_naming_the_choices() -> None:
    with pytest.raises(InvalidArgument, match="privacy, integrity, authentication"):
        SecuritySettings(data_protection="paranoid")


def test_a_proof_names_the_tokens_entry_without_revealing_the_token() -> None:
    token = "rsv_reader-token"
    digest = hashlib.sha256(token.encode()).digest()
    table = TokenTable.parse([f"reader {digest.hex()}"])
    entry = table.entry(protection.token_id(digest))
    assert entry is not None and entry[0] == digest and entry[1].role == "reader"
    client, server = os.urandom(16), os.urandom(16)
    evidence = protection.proof(digest, client, server)
    assert token.encode() not in evidence + protection.token_id(digest)
    assert evidence != protection.proof(digest, client, os.urandom(16))  # never replayable


def _pair() -> tuple[ResponseSeal, ResponseSeal]:
    key = protection.session_key(os.urandom(32), os.urandom(16), os.urandom(16))
    return ResponseSeal(key), ResponseSeal(key)


def test_a_sealed_response_checks_and_any_change_to_it_does_not() -> None:
    body = os.urandom(70_000)
    worker, reader = _pair()
    assert reader.check(b"req", b"header", body, worker.tag(b"req", b"header", body))
    changed = bytearray(body)
    changed[5] ^= 1
    for request, header, data in ((b"req", b"header", bytes(changed)), (b"other", b"header", body)):
        worker, reader = _pair()
        assert not reader.check(request, header, data, worker.tag(b"req", b"header", body))


def test_a_response_replayed_in_another_place_of_the_stream_does_not_check() -> None:
    worker, reader = _pair()
    first = worker.tag(b"req", b"h", b"block")
    assert reader.check(b"req", b"h", b"block", first)
    assert not reader.check(b"req", b"h", b"block", first)  # the second response's place


@pytest.mark.parametrize("size", [0, 100, 65_000, 65_536, 300_000])
@pytest.mark.parametrize("piece", [7, 4096, 256 * 1024])
def test_a_tag_fed_piece_by_piece_equals_the_tag_of_the_whole_body(size: int, piece: int) -> None:
    body = os.urandom(size)
    worker, reader = _pair()
    whole = worker.tag(b"req", b"header", body)
    running = reader.begin(b"req", b"header")
    buffer = bytearray(piece)  # reused between pieces, as a worker's read buffer is
    for start in range(0, size, piece):
        chunk = body[start : start + piece]
        buffer[: len(chunk)] = chunk
        running.update(memoryview(buffer)[: len(chunk)])
    assert running.matches(whole)
