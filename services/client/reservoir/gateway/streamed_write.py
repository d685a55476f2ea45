"""One object written through the write path from a stream of bytes (a PutObject body, a
copy's source, a completed multipart upload's spooled parts): cut into the write path's
parts as the bytes come, each once the client's write buffer has room for it (the stream
is read no further until it has), published only when the stream ended and `check` passed. Anything else aborts it: nothing is published."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from reservoir.client.async_client import AsyncClient
from reservoir.client.writer import NO_TERMS, WriteSession
from reservoir.common.errors import InvalidArgument, IsADirectory, NotFound, ReadOnly
from reservoir.common.models import Inode
from reservoir.common.write_terms import WriteTerms


async def begin(
    client: AsyncClient, path: str, terms: WriteTerms = NO_TERMS, size: int | None = None
) -> WriteSession:
    """The write of `path`, begun: ReadOnly (AccessDenied) where nothing may be written.
    `size`, when known: a small object goes in one PUT (its ETag its MD5, as in S3)."""
    try:
        return await client.begin_write(path, terms, size)
    except (NotFound, IsADirectory) as exc:
        if isinstance(exc, NotFound) and terms.if_match:
            raise  # no object to match, under a mount or not: NoSuchKey, as in S3
        # No mount holds the path, or it is a mount's root: nothing may be written there.
        raise ReadOnly(f"{path}: no writable mount holds it ({exc})") from exc


async def write_stream(
    client: AsyncClient,
    session: WriteSession,
    chunks: AsyncIterator[bytes],
    check: Callable[[], None] = lambda: None,
) -> Inode:
    """Writes `chunks` through the begun `session`; the published file. `check` runs after
    the last chunk, before the publish (a digest that does not match raises there)."""
    if session.whole is not None:
        return await _write_whole(session, chunks, check)
    in_flight: set[asyncio.Future[None]] = set()
    try:
        buffer = bytearray()
        number = size = 0

        async def send(length: int) -> None:
            nonlocal number
            # Bounded memory: the part is copied out once the write buffer has room.
            held = await session.hold(length)
            number += 1
            with memoryview(buffer) as view:
                part = session.wire_part(number, view[:length])
            del buffer[:length]
            in_flight.add(asyncio.ensure_future(session.put_part(part, held)))
            done = {future for future in in_flight if future.done()}
            in_flight.difference_update(done)
            for future in done:
                future.result()

        async for chunk in chunks:
            size += len(chunk)
            buffer += chunk
            while len(buffer) >= session.part_size:
                await send(session.part_size)
        if buffer:
            await send(len(buffer))
        if in_flight:
            await asyncio.gather(*in_flight)
            in_flight.clear()
        check()
    except BaseException:
        for future in in_flight:
            future.cancel()
        await asyncio.gather(*in_flight, return_exceptions=True)
        await session.abort()
        raise
    return await session.publish(size)


async def _write_whole(
    session: WriteSession, chunks: AsyncIterator[bytes], check: Callable[[], None]
) -> Inode:
    """A session begun with its size: every chunk gathered, then one PUT."""
    try:
        buffer = bytearray()
        async for chunk in chunks:
            buffer += chunk
            if len(buffer) > session.part_size:  # more than the size it was begun with
                raise InvalidArgument(f"{session.path}: more bytes than the write announced")
        check()
        await session.put_whole(bytes(buffer))
    except BaseException:
        await session.abort()
        raise
    return await session.publish(len(buffer))
