"""The blocking file object a file is written through (`Client.open(path, "wb")`): parts
handed to a `WriteSession` on the client's event loop as they fill, each once the client's
write buffer has room for it (a `write` waits for room: backpressure), the file published
on close."""

from __future__ import annotations

import asyncio
import io
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from reservoir.common.blocks.block_file import Buffer
from reservoir.common.models import Inode

from .writer import WriteSession

if TYPE_CHECKING:
    from .client import Client


class ReservoirWriter(io.RawIOBase):
    """A file being written (`Client.open(path, "wb")`): bytes go to the store in parts
    as they come; `close` publishes the file. Leaving a `with` block by an exception
    aborts it instead: nothing is published. Not seekable.

    Like a Python file (and s3fs's), one dropped without `close` is closed — published —
    when it is collected (`torch.save(obj, fs.open(url, "wb"))` relies on it); a write
    that failed is never published."""

    def __init__(self, client: Client, session: WriteSession) -> None:
        super().__init__()
        self._client = client
        self._session = session
        self._buffer = bytearray()
        self._number = 0
        self._size = 0
        self._pending: list[Future[None]] = []
        self._failed = False
        self.inode: Inode | None = None  # the published file, after close

    @property
    def name(self) -> str:
        return self._session.path

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        """Bytes written so far (checkpoint writers note their offsets)."""
        return self._size

    def write(self, data: Buffer) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("write to a closed file")
        view = memoryview(data).cast("B")
        written = len(view)
        self._size += written
        part = self._session.part_size
        if self._buffer:  # top up the part being gathered first
            take = min(part - len(self._buffer), len(view))
            self._buffer += view[:take]
            view = view[take:]
            if len(self._buffer) == part:
                self._send(self._buffer)
                self._buffer.clear()
        # Whole parts straight from the caller's buffer: one copy each, however big the write.
        while len(view) >= part:
            self._send(view[:part])
            view = view[part:]
        self._buffer += view
        return written

    def _send(self, chunk: Buffer) -> None:
        """Copies `chunk` out as the next part once the write buffer has room for it
        (waiting here until it has: the copies held are what the buffer bounds)."""
        try:
            held = self._client._run(self._session.hold(len(chunk)))
        except BaseException:
            self._fail()
            raise
        self._number += 1
        try:
            part = self._session.wire_part(self._number, chunk)
        except BaseException:
            self._fail()  # the abort gives `held` back
            raise
        future = asyncio.run_coroutine_threadsafe(
            self._session.put_part(part, held), self._client._runtime.loop
        )
        self._pending.append(future)
        for done in [f for f in self._pending if f.done()]:
            self._pending.remove(done)
            self._wait(done)

    def _wait(self, future: Future[None]) -> None:
        try:
            future.result()
        except BaseException:
            self._fail()
            raise

    def _fail(self) -> None:
        if not self._failed:
            self._failed = True
            for future in self._pending:
                future.cancel()
            self._client._run(self._session.abort())
            super().close()

    def sync(self) -> None:
        """Waits until every part sent so far is in the store (what `fsync` of a file
        being written means here: the part still being gathered is sent on close, as
        every part but the last must be whole)."""
        for future in self._pending:
            self._wait(future)
        self._pending.clear()

    def close(self) -> None:
        """Sends what is left and publishes the file (an error: nothing is published)."""
        if self.closed:
            return
        try:
            if self._buffer:
                self._send(bytes(self._buffer))
                self._buffer.clear()
            for future in self._pending:
                self._wait(future)
            self._pending.clear()
            self.inode = self._client._run(self._session.publish(self._size))
        except BaseException:
            self._fail()
            raise
        super().close()

    def abort(self) -> None:
        """Gives the file up: nothing is published, the upload is dropped."""
        if not self.closed:
            self._fail()

    def __exit__(self, kind: Any, *rest: Any) -> None:
        if kind is not None:
            self.abort()
        else:
            self.close()
