"""One contract for every MetadataStore backend: memory:// in-process, etcd:// against a
real etcd server process, plaintext and over TLS with a client certificate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from reservoir.common.config import EtcdSettings
from reservoir.common.errors import InvalidArgument, NotFound
from reservoir.common.metadata.metadata_store import (
    MAX_TXN_OPS,
    Guard,
    MetadataStore,
    open_metadata_store,
)

from .etcd_servers import EtcdServer


@dataclass(frozen=True)
class Backend:
    url: str
    etcd: EtcdSettings


@pytest.fixture
def etcd_url(etcd_server: EtcdServer) -> str:
    return etcd_server.url


@pytest.fixture(params=["memory", "etcd", "etcd-tls"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return Backend("memory://", EtcdSettings())
    name = "tls_etcd_server" if request.param == "etcd-tls" else "etcd_server"
    server: EtcdServer = request.getfixturevalue(name)
    return Backend(server.url, server.settings)


def run(backend: Backend, scenario, page_keys: int = 1000) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        store: MetadataStore = open_metadata_store(
            backend.url, timeout_s=5, etcd=backend.etcd, page_keys=page_keys
        )
        try:
            await store.delete_prefix(b"/contract/")
            await scenario(store)
        finally:
            await store.delete_prefix(b"/contract/")
            await store.close()

    asyncio.run(main())


def test_put_get_delete_round_trip(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        assert await s.get(b"/contract/a") is None
        await s.put(b"/contract/a", b"1")
        assert await s.get(b"/contract/a") == b"1"
        await s.put(b"/contract/a", b"2")
        assert await s.get(b"/contract/a") == b"2"
        await s.delete(b"/contract/a")
        assert await s.get(b"/contract/a") is None

    run(backend, scenario)


def test_get_prefix_is_sorted_and_bounded_by_the_prefix(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.put_many(
            [(b"/contract/p/b", b"2"), (b"/contract/p/a", b"1"), (b"/contract/q", b"x")]
        )
        assert await s.get_prefix(b"/contract/p/") == [
            (b"/contract/p/a", b"1"),
            (b"/contract/p/b", b"2"),
        ]
        await s.delete_prefix(b"/contract/p/")
        assert await s.get_prefix(b"/contract/p/") == []
        assert await s.get(b"/contract/q") == b"x"

    run(backend, scenario)


def test_a_prefix_larger_than_a_page_is_read_whole_in_pages_of_the_page_size(
    backend: Backend,
) -> None:
    async def scenario(s: MetadataStore) -> None:
        items = [(f"/contract/pg/{i:04d}".encode(), str(i).encode()) for i in range(250)]
        await s.put_many(items + [(b"/contract/pg", b"outside"), (b"/contract/ph/0", b"x")])
        pages = [page async for page in s.scan_prefix(b"/contract/pg/")]
        assert [len(p) for p in pages] == [64, 64, 64, 58]
        assert [kv for page in pages for kv in page] == items
        assert await s.get_prefix(b"/contract/pg/") == items
        assert [len(p) async for p in s.scan_prefix(b"/contract/pg/", page_keys=100)] == [
            100,
            100,
            50,
        ]
        # A prefix of exactly a page ends without an empty page.
        await s.delete_many([k for k, _ in items[64:]])
        assert [len(p) async for p in s.scan_prefix(b"/contract/pg/")] == [64]
        assert [p async for p in s.scan_prefix(b"/contract/none/")] == []

    run(backend, scenario, page_keys=64)


def test_a_scan_abandoned_after_its_first_page_leaves_no_read_running(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.put_many([(f"/contract/ab/{i:03d}".encode(), b"v") for i in range(30)])
        pages = s.scan_prefix(b"/contract/ab/", page_keys=10)
        first = await anext(pages)
        assert len(first) == 10
        await pages.aclose()  # the next page was already asked for
        assert asyncio.all_tasks() == {asyncio.current_task()}

    run(backend, scenario)


def test_a_range_read_stops_at_its_limit_and_its_end(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.put_many([(f"/contract/r/{c}".encode(), c.encode()) for c in "abcdef"])
        assert await s.get_range(b"/contract/r/b", b"/contract/r/e", 10) == [
            (b"/contract/r/b", b"b"),
            (b"/contract/r/c", b"c"),
            (b"/contract/r/d", b"d"),
        ]
        assert await s.get_range(b"/contract/r/bb", b"/contract/r/z", 2) == [
            (b"/contract/r/c", b"c"),
            (b"/contract/r/d", b"d"),
        ]
        assert await s.first_in_ranges(
            [
                (b"/contract/r/cc", b"/contract/r0"),
                (b"/contract/r/g", b"/contract/r0"),
                (b"/contract/r/a", b"/contract/r/b"),
            ]
        ) == [(b"/contract/r/d", b"d"), None, (b"/contract/r/a", b"a")]

    run(backend, scenario)


def test_a_page_of_values_larger_than_one_etcd_message_is_read_in_smaller_parts(
    backend: Backend,
) -> None:
    async def scenario(s: MetadataStore) -> None:
        big = b"x" * (1024 * 1024)  # five of them exceed a client's 4 MiB message
        items = [(f"/contract/big/{i}".encode(), big) for i in range(6)]
        for item in items:
            await s.put(*item)
        assert [k for k, _ in await s.get_prefix(b"/contract/big/")] == [k for k, _ in items]

    run(backend, scenario)


def test_count_prefix_counts_only_the_keys_under_the_prefix(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        assert await s.count_prefix(b"/contract/c/") == 0
        await s.put_many(
            [(b"/contract/c/a", b"1"), (b"/contract/c/b/x", b"2"), (b"/contract/d", b"3")]
        )
        assert await s.count_prefix(b"/contract/c/") == 2
        assert await s.count_prefix(b"/contract/") == 3
        await s.delete(b"/contract/c/a")
        assert await s.count_prefix(b"/contract/c/") == 1

    run(backend, scenario)


def test_get_range_reads_one_page_in_key_order_and_resumes_after_a_key(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        names = [f"{i:03d}".encode() for i in range(25)]
        await s.put_many([(b"/contract/r/" + n, n) for n in reversed(names)])
        await s.put_many([(b"/contract/q", b"before"), (b"/contract/s", b"after")])
        start, end = b"/contract/r/", b"/contract/r0"  # the prefix's range: "/" + 1 is "0"
        seen: list[bytes] = []
        while True:
            page = await s.get_range(start, end, 10)
            assert len(page) <= 10
            seen.extend(v for _, v in page)
            if len(page) < 10:
                break
            start = page[-1][0] + b"\0"  # the first key after the last one read
        assert seen == names
        assert await s.get_range(b"/contract/r/024\0", end, 10) == []
        assert await s.get_range(b"/contract/r/", b"/contract/r/002", 10) == [
            (b"/contract/r/000", b"000"),
            (b"/contract/r/001", b"001"),
        ]
        with pytest.raises(InvalidArgument):  # etcd would read a limit of 0 as "all"
            await s.get_range(b"/contract/r/", end, 0)

    run(backend, scenario)


def test_batches_larger_than_one_transaction_are_written_whole(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        items = [(f"/contract/many/{i:05d}".encode(), b"v") for i in range(MAX_TXN_OPS * 3 + 7)]
        await s.put_many(items)
        assert len(await s.get_prefix(b"/contract/many/")) == len(items)
        await s.delete_many([k for k, _ in items[:150]])
        assert len(await s.get_prefix(b"/contract/many/")) == len(items) - 150

    run(backend, scenario)


def test_keys_under_a_revoked_lease_disappear(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        lease = await s.grant_lease(30)
        await s.put(b"/contract/leased", b"x", lease)
        await s.put(b"/contract/kept", b"y")
        await s.refresh_lease(lease)
        await s.revoke_lease(lease)
        assert await s.get(b"/contract/leased") is None
        assert await s.get(b"/contract/kept") == b"y"
        with pytest.raises(NotFound):
            await s.refresh_lease(lease)

    run(backend, scenario)


def test_keys_under_an_expired_lease_disappear(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        lease = await s.grant_lease(1)
        await s.put(b"/contract/short", b"x", lease)
        await asyncio.sleep(2.5)
        assert await s.get(b"/contract/short") is None
        with pytest.raises(NotFound):
            await s.put(b"/contract/late", b"x", lease)

    run(backend, scenario)


def test_etcd_that_is_down_gives_unavailable_within_the_timeout(tmp_path: Path) -> None:
    from reservoir.common.errors import Unavailable
    from reservoir.local.cluster import free_port

    async def main() -> None:
        store = open_metadata_store(f"etcd://127.0.0.1:{free_port()}", timeout_s=1)
        try:
            with pytest.raises(Unavailable):
                await store.get(b"/x")
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_get_many_returns_values_in_order_with_none_for_absent_keys(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        items = [(f"/contract/gm/{i:04d}".encode(), str(i).encode()) for i in range(250)]
        await s.put_many(items)
        keys = [k for k, _ in items] + [b"/contract/gm/absent"]
        keys.reverse()
        values = await s.get_many(keys)
        assert values[0] is None
        assert values[1:] == [v for _, v in reversed(items)]

    run(backend, scenario)


def test_etcd_store_moves_on_to_a_reachable_endpoint(etcd_url: str) -> None:
    from reservoir.local.cluster import free_port

    live = etcd_url.removeprefix("etcd://")

    async def main() -> None:
        store = open_metadata_store(f"etcd://127.0.0.1:{free_port()},{live}", timeout_s=2)
        try:
            await store.put(b"/contract/failover", b"ok")
            assert await store.get(b"/contract/failover") == b"ok"
            await store.delete(b"/contract/failover")
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_prefix_watch_sees_later_puts_and_deletes_under_the_prefix_only(
    backend: Backend,
) -> None:
    async def scenario(s: MetadataStore) -> None:
        await s.put(b"/contract/w/before", b"0")
        changes = await s.watch_prefix(b"/contract/w/")
        await s.put(b"/contract/other", b"x")
        await s.put(b"/contract/w/a", b"1")
        await s.put_many([(b"/contract/w/a", b"2"), (b"/contract/w/b", b"3")])
        await s.delete(b"/contract/w/before")
        seen = []
        async with asyncio.timeout(5):
            async for change in changes:
                seen.append((change.key, change.value))
                if len(seen) == 4:
                    break
        assert seen == [
            (b"/contract/w/a", b"1"),
            (b"/contract/w/a", b"2"),
            (b"/contract/w/b", b"3"),
            (b"/contract/w/before", None),
        ]
        await changes.aclose()

    run(backend, scenario)


def test_a_watch_closed_before_it_is_read_ends_cleanly_and_others_go_on(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        unused = await s.watch_prefix(b"/contract/c/")
        kept = await s.watch_prefix(b"/contract/c/")
        await unused.aclose()
        await unused.aclose()  # idempotent
        await s.put(b"/contract/c/k", b"v")
        async with asyncio.timeout(5):
            change = await anext(kept)
        assert (change.key, change.value) == (b"/contract/c/k", b"v")
        await kept.aclose()

    run(backend, scenario)


def test_guarded_write_commits_only_while_its_guards_hold(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        owner = Guard(b"/contract/owner", b"me")
        # The owner key is absent: a guard that wants it absent holds, one on a value fails.
        assert not await s.write_if([owner], puts=[(b"/contract/x", b"1")])
        assert await s.get(b"/contract/x") is None
        assert await s.write_if(
            [Guard(b"/contract/owner", None)], puts=[(b"/contract/owner", b"me")]
        )
        await s.put_many([(b"/contract/d/1", b"a"), (b"/contract/d/2", b"b")])
        assert await s.write_if(
            [owner],
            puts=[(b"/contract/x", b"2")],
            deletes=[b"/contract/gone"],
            delete_prefixes=[b"/contract/d/"],
        )
        assert await s.get(b"/contract/x") == b"2"
        assert await s.get_prefix(b"/contract/d/") == []
        await s.put(b"/contract/owner", b"someone else")
        assert not await s.write_if([owner], deletes=[b"/contract/x"])
        assert await s.get(b"/contract/x") == b"2"

    run(backend, scenario)


def test_guarded_write_binds_its_puts_to_the_lease(backend: Backend) -> None:
    async def scenario(s: MetadataStore) -> None:
        lease = await s.grant_lease(30)
        assert await s.write_if(
            [Guard(b"/contract/leader", None)], puts=[(b"/contract/leader", b"me")], lease=lease
        )
        # Taken: a second campaign for the same key loses and writes nothing.
        assert not await s.write_if(
            [Guard(b"/contract/leader", None)], puts=[(b"/contract/leader", b"other")]
        )
        assert await s.get(b"/contract/leader") == b"me"
        await s.revoke_lease(lease)
        assert await s.get(b"/contract/leader") is None

    run(backend, scenario)


# ---- several endpoints: the members of one etcd cluster ---------------------------------


def test_etcd_store_goes_on_with_its_data_when_the_member_it_talks_to_is_killed(
    etcd_cluster_server: EtcdServer,
) -> None:
    cluster = etcd_cluster_server.cluster
    first = cluster.etcd_names()[0]  # the URL's first endpoint: where every call starts

    async def main() -> None:
        store = open_metadata_store(etcd_cluster_server.url, timeout_s=5)
        try:
            await store.put_many([(f"/contract/m/{i}".encode(), b"v") for i in range(10)])
            lease = await store.grant_lease(30)
            await store.put(b"/contract/leased", b"x", lease)
            cluster.kill(first)
            assert len(await store.get_prefix(b"/contract/m/")) == 10
            await store.put(b"/contract/m/after", b"w")
            assert await store.get(b"/contract/m/after") == b"w"
            await store.refresh_lease(lease)  # a lease is the cluster's, not one member's
            assert await store.get(b"/contract/leased") == b"x"
            await store.delete_prefix(b"/contract/")
        finally:
            await store.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        cluster.restart(first)


def test_etcd_store_call_waits_out_an_etcd_restart_within_its_deadline(tmp_path: Path) -> None:
    from .etcd_servers import start_etcd

    server = start_etcd(tmp_path, None)

    async def main() -> None:
        store = open_metadata_store(server.url, timeout_s=20)
        try:
            await store.put(b"/contract/r", b"1")
            server.cluster.stop("etcd")
            # Refused at first, again and again, until etcd is back: one call.
            call = asyncio.ensure_future(store.get(b"/contract/r"))
            await asyncio.to_thread(server.cluster.restart_etcd)
            assert await call == b"1"
        finally:
            await store.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        server.cluster.down()


def test_etcd_store_with_no_endpoint_reachable_tries_each_then_raises_unavailable() -> None:
    from reservoir.common.errors import Unavailable
    from reservoir.local.cluster import free_port

    dead = [free_port(), free_port()]

    async def main() -> None:
        store = open_metadata_store(f"etcd://127.0.0.1:{dead[0]},127.0.0.1:{dead[1]}", 1)
        try:
            with pytest.raises(Unavailable, match="cannot reach 127.0.0.1:"):
                await store.put(b"/x", b"y")
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


# ---- out of space --------------------------------------------------------------------


def test_an_etcd_out_of_space_refuses_writes_in_words_and_still_reads(tmp_path: Path) -> None:
    from reservoir.common.errors import ResourceExhausted

    from .etcd_servers import start_etcd

    server = start_etcd(tmp_path, None, "--quota-backend-bytes", str(1024 * 1024))

    async def main() -> None:
        store = open_metadata_store(server.url, timeout_s=5)
        try:
            await store.health()
            await store.put(b"/contract/kept", b"k")
            with pytest.raises(ResourceExhausted, match="^etcd is out of space: ") as refused:
                for n in range(64):  # 16 MiB under a 1 MiB quota
                    await store.put(f"/contract/fill/{n}".encode(), b"x" * (256 * 1024))
                    await asyncio.sleep(0.15)  # etcd weighs its file as it commits
            assert "--quota-backend-bytes" in str(refused.value)
            with pytest.raises(ResourceExhausted, match="NOSPACE alarm"):
                await store.health()
            assert await store.get(b"/contract/kept") == b"k"
            await store.delete_prefix(b"/contract/")  # deletes free space: allowed
        finally:
            await store.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        server.cluster.down()


def test_a_store_in_memory_is_always_healthy() -> None:
    asyncio.run(open_metadata_store("memory://").health())
