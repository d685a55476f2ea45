"""RESERVOIR_WRITE_BUFFER, in process: a writer holds at most that many bytes of parts the
store has not yet taken, and waits (backpressure) rather than exceed it; the write
concurrency still caps the parts in flight; a buffer smaller than a part is refused when
the settings are read. The real WriteSession and ReservoirWriter run on a loop thread of
their own, with a stand-in for the store that holds each part until the test lets it go
(the path a cluster with no worker takes; a part sent to a worker holds its room the same
way, until the worker answers that the store has it)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from reservoir.client.reservoir_writer import ReservoirWriter
from reservoir.client.write_buffer import WriteBuffer
from reservoir.client.writer import WriteSession
from reservoir.common import config as cfg
from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.under_store import Part
from reservoir.v1 import master_pb2
from tests.eventually import eventually

MiB = 1024 * 1024
PART = 5 * MiB
T = TypeVar("T")


class _GatedStore:
    """The store's side of uploads: a part is taken only when the test opens the gate;
    records the parts it got and how many it held at once."""

    def __init__(self) -> None:
        self.gate = threading.Semaphore(0)
        self.parts: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self.uploading = 0
        self.most_uploading = 0

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        with self._lock:
            self.uploading += 1
            self.most_uploading = max(self.most_uploading, self.uploading)
        self.gate.acquire()
        with self._lock:
            self.uploading -= 1
            self.parts[number] = data
        return Part(number, f"etag-{number}")

    def let_all_through(self) -> None:
        for _ in range(1000):
            self.gate.release()


class _View:
    """The cluster as a writer sees it with no worker: parts go to the store from here."""

    async def workers(self, fresh: bool = False) -> list[Any]:
        return []

    async def call(self, method: str, request: Any, what: str) -> Any:
        return None  # AbortWrite: nothing to answer


class _Writes:
    """What a client's writes share (writer.Writes), with the gated store."""

    def __init__(self, config: cfg.ClientConfig, store: _GatedStore) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.config = config
        self.view = _View()
        self.buffer = WriteBuffer(config.write_buffer_bytes)
        self.store = store
        self.pool = ThreadPoolExecutor(32)

    async def direct_store(self, mount: Mount) -> _GatedStore:
        return self.store


class _LoopClient:
    """What ReservoirWriter needs of a Client: a loop thread to run the session on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._runtime = self

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def _config(buffer: int, concurrency: int) -> cfg.ClientConfig:
    return cfg.ClientConfig(
        write_part_size=PART,
        write_buffer_bytes=buffer,
        write_concurrency=concurrency,
        write_abort_on_sigterm=False,
    )


@pytest.fixture
def loop_client() -> Iterator[_LoopClient]:
    client = _LoopClient()
    yield client
    client.stop()


def _session(client: _LoopClient, writes: _Writes) -> WriteSession:
    reply = master_pb2.BeginWriteResponse(
        write_id="w1",
        upload_id="u1",
        ufs_uri="s3://bucket/ckpt/model.pt",
        mount_path="/ckpt",
        block_size=PART,
        keepalive_ms=1000,
        mount=Mount("/ckpt", "s3://bucket/ckpt/", MountOptions(writable=True)).to_proto(),
    )

    async def begin() -> WriteSession:
        return WriteSession(writes, "/ckpt/model.pt", reply)  # type: ignore[arg-type]

    return client._run(begin())


def test_a_writer_ahead_of_the_store_waits_with_at_most_the_buffer_held(
    loop_client: _LoopClient,
) -> None:
    store = _GatedStore()
    writes = _Writes(_config(buffer=3 * PART, concurrency=8), store)
    writer = ReservoirWriter(loop_client, _session(loop_client, writes))  # type: ignore[arg-type]
    data = os.urandom(10 * PART + 123)
    wrote = threading.Event()

    def write() -> None:
        writer.write(data)  # one call: the writer must wait inside it
        wrote.set()

    thread = threading.Thread(target=write)
    thread.start()
    # Three parts fill the buffer; the fourth waits for room, so `write` has not returned.
    eventually(lambda: store.uploading == 3, what="three parts at the store")
    assert not wrote.is_set()
    assert writes.buffer.held == 3 * PART
    store.let_all_through()
    thread.join(timeout=30)
    assert wrote.is_set()
    writer.sync()
    assert writes.buffer.peak == 3 * PART
    assert store.most_uploading == 3
    assert b"".join(store.parts[n] for n in sorted(store.parts)) == data[: 10 * PART]
    assert writes.buffer.held == 0


def test_write_concurrency_still_caps_the_parts_in_flight_under_a_larger_buffer(
    loop_client: _LoopClient,
) -> None:
    store = _GatedStore()
    writes = _Writes(_config(buffer=8 * PART, concurrency=2), store)
    session = _session(loop_client, writes)
    data = os.urandom(6 * PART)
    done = asyncio.run_coroutine_threadsafe(session.put_all(data), loop_client.loop)
    # Held: up to the buffer's eight parts (six here); sent to the store: two at once.
    eventually(lambda: writes.buffer.held == 6 * PART, what="all six parts held")
    eventually(lambda: store.uploading == 2, what="two parts at the store")
    store.let_all_through()
    done.result(timeout=30)
    assert store.most_uploading == 2
    assert b"".join(store.parts[n] for n in sorted(store.parts)) == data
    assert writes.buffer.held == 0


def test_an_aborted_write_gives_back_the_room_of_parts_never_sent(
    loop_client: _LoopClient,
) -> None:
    store = _GatedStore()
    writes = _Writes(_config(buffer=2 * PART, concurrency=1), store)
    session = _session(loop_client, writes)

    async def take_room_then_abort() -> None:
        session_held = await session.hold(PART)  # a part copied, its send never started
        sending = asyncio.ensure_future(
            session.put_part(session.wire_part(1, b"x" * PART), session_held)
        )
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        await session.abort()

    loop_client._run(take_room_then_abort())
    assert writes.buffer.held == 0


def test_the_buffer_hands_out_room_in_the_order_it_was_asked_for() -> None:
    async def scenario() -> list[str]:
        buffer = WriteBuffer(4)
        first = await buffer.hold(3)
        order: list[str] = []

        async def ask(name: str, size: int) -> None:
            held = await buffer.hold(size)
            order.append(name)
            held.release()

        big = asyncio.ensure_future(ask("big", 4))  # waits for the first to go
        await asyncio.sleep(0)
        small = asyncio.ensure_future(ask("small", 1))  # would fit now, but is behind
        await asyncio.sleep(0)
        assert order == []
        first.release()
        await asyncio.gather(big, small)
        return order

    assert asyncio.run(scenario()) == ["big", "small"]


def test_a_write_buffer_smaller_than_a_part_is_refused_when_settings_are_read() -> None:
    with pytest.raises(
        InvalidArgument, match=r"RESERVOIR_WRITE_BUFFER \(8.0MiB\) must hold at least one part"
    ):
        cfg.load(
            cfg.ClientConfig,
            {"RESERVOIR_WRITE_BUFFER": "8MiB", "RESERVOIR_WRITE_PART_SIZE": "16MiB"},
        )


def test_the_write_buffer_setting_takes_sizes_with_units() -> None:
    config = cfg.load(cfg.ClientConfig, {"RESERVOIR_WRITE_BUFFER": "1g"})
    assert config.write_buffer_bytes == 1024 * MiB
    assert cfg.ClientConfig().write_buffer_bytes == 256 * MiB
