"""Callers follow the leading master (common/master_calls.py), against in-process gRPC
servers that answer the way a leader and a standby do (the standby's refusal goes out
through the servers' own `abort_with`)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import grpc.aio
import pytest

from reservoir.common.errors import DeadlineExceeded, NotLeader, Unavailable
from reservoir.common.master_calls import MasterCalls, master_addresses
from reservoir.common.rpc import PlaintextChannels, abort_with
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc


class Master(master_pb2_grpc.MasterServiceServicer):
    """Answers ListMounts with one mount named after itself while it leads; refuses with
    NotLeader naming `leader` while it stands by."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.leader: str | None = None  # None: this one leads; "": no leader known
        self.calls = 0
        self.leads_after: int | None = None  # calls refused before it takes over
        self.silent_s = 0.0  # how long it takes to answer (paused: longer than any call)
        self.silent_s_after_first = 0.0  # a stream's pause after its first message
        self.listing: list[master_pb2.MasterInfo] = []  # what it answers ListMasters with
        self.changes = 0  # Mount calls it carried out

    def _took_over(self) -> None:
        if self.leads_after is not None and self.calls > self.leads_after:
            self.leader = None

    async def ListMasters(
        self, request: master_pb2.ListMastersRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListMastersResponse:
        await asyncio.sleep(self.silent_s)
        return master_pb2.ListMastersResponse(masters=self.listing)

    async def Mount(
        self, request: master_pb2.MountRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.MountResponse:
        self.calls += 1
        await asyncio.sleep(self.silent_s)
        if self.leader is not None:
            await abort_with(context, NotLeader(f"{self.name} stands by", self.leader))
        self.changes += 1
        return master_pb2.MountResponse(mount=common_pb2.MountInfo(path=f"/{self.name}"))

    async def ListMounts(
        self, request: master_pb2.ListMountsRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListMountsResponse:
        self.calls += 1
        self._took_over()
        await asyncio.sleep(self.silent_s)
        if self.leader is not None:
            await abort_with(context, NotLeader(f"{self.name} stands by", self.leader))
        return master_pb2.ListMountsResponse(mounts=[common_pb2.MountInfo(path=f"/{self.name}")])

    async def WatchJob(
        self, request: master_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[master_pb2.Job]:
        self.calls += 1
        await asyncio.sleep(self.silent_s)
        if self.leader is not None:
            await abort_with(context, NotLeader(f"{self.name} stands by", self.leader))
        yield master_pb2.Job(id=self.name, state="running")
        await asyncio.sleep(self.silent_s_after_first)
        yield master_pb2.Job(id=self.name, state="completed")


def unused_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def serve(master: Master) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    master_pb2_grpc.add_MasterServiceServicer_to_server(master, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


Scenario = Callable[[dict[str, str], dict[str, Master]], Awaitable[None]]


def run(scenario: Scenario, names: tuple[str, ...] = ("a", "b")) -> None:
    async def main() -> None:
        masters = {n: Master(n) for n in names}
        served = {n: await serve(m) for n, m in masters.items()}
        addresses = {n: address for n, (_, address) in served.items()}
        try:
            await scenario(addresses, masters)
        finally:
            for server, _ in served.values():
                await server.stop(None)

    asyncio.run(main())


def calls_to(*addresses: str) -> MasterCalls:
    return MasterCalls(
        list(addresses), PlaintextChannels(), master_pb2_grpc.MasterServiceStub, probe_timeout_s=0.1
    )


async def mounts(calls: MasterCalls, deadline_s: float = 5.0) -> str:
    reply = await calls.unary(
        "ListMounts", master_pb2.ListMountsRequest(), deadline_s=deadline_s, what="list mounts"
    )
    return str(reply.mounts[0].path)


def test_a_standby_sends_the_caller_to_the_leader_it_names_in_one_extra_call() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].leader = at["b"]
        calls = calls_to(at["a"])  # the caller knows only the standby
        assert await mounts(calls) == "/b"
        assert masters["a"].calls == 1 and masters["b"].calls == 1
        # The next call goes straight to the leader.
        assert await mounts(calls) == "/b"
        assert masters["a"].calls == 1 and calls.leader == at["b"]
        await calls.close()

    run(scenario)


def test_a_caller_whose_first_master_is_dead_tries_the_next_in_its_list() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        calls = calls_to(unused_address(), at["a"])
        assert await mounts(calls) == "/a"
        await calls.close()

    run(scenario, names=("a",))


def test_a_caller_whose_leader_died_follows_a_standby_to_the_new_leader() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        dead = unused_address()
        masters["a"].leader = at["b"]  # b took over from the dead one; a stands by
        calls = calls_to(dead, at["a"], at["b"])
        assert await mounts(calls) == "/b"
        assert masters["a"].calls == 1
        await calls.close()

    run(scenario)


def test_calls_wait_while_no_master_leads_and_go_on_once_one_does() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].leader = ""  # a takeover under way: nobody leads yet
        masters["b"].leader = ""
        masters["b"].leads_after = 2
        calls = calls_to(at["a"], at["b"])
        assert await mounts(calls) == "/b"
        assert masters["b"].calls == 3
        await calls.close()

    run(scenario)


def test_without_a_leader_before_the_deadline_the_call_fails_not_leader() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].leader = ""
        masters["b"].leader = ""
        calls = calls_to(at["a"], at["b"])
        with pytest.raises(NotLeader):
            await mounts(calls, deadline_s=0.5)
        await calls.close()

    run(scenario)


def test_one_unreachable_master_fails_the_call_at_once_as_before() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        dead = unused_address()
        calls = calls_to(dead)
        with pytest.raises(Unavailable, match=f"master at {dead} is unreachable"):
            await mounts(calls, deadline_s=30)
        await calls.close()

    run(scenario, names=())


def test_a_stream_refused_before_its_first_message_is_sent_to_the_leader() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].leader = at["b"]
        calls = calls_to(at["a"])
        states = [
            (job.id, job.state)
            async for job in calls.stream(
                "WatchJob", master_pb2.GetJobRequest(id="j"), deadline_s=5, what="watch"
            )
        ]
        assert states == [("b", "running"), ("b", "completed")]
        await calls.close()

    run(scenario)


PAUSED_S = 3600.0  # a master that never answers within a test


def listing(*masters: tuple[str, str, int]) -> list[master_pb2.MasterInfo]:
    """Master records as etcd holds them: (address, role, term) each."""
    return [master_pb2.MasterInfo(address=a, role=r, term=t) for a, r, t in masters]


async def mount(calls: MasterCalls, deadline_s: float = 5.0) -> str:
    reply = await calls.unary(
        "Mount", master_pb2.MountRequest(path="/x"), deadline_s=deadline_s, what="mount"
    )
    return str(reply.mount.path)


def test_a_read_left_unanswered_by_a_paused_leader_goes_to_the_leader_the_others_name() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s = PAUSED_S
        masters["b"].listing = listing((at["b"], "leader", 2), (at["c"], "standby", 2))
        masters["c"].listing = masters["b"].listing
        calls = calls_to(at["a"], at["b"], at["c"])
        assert await mounts(calls, deadline_s=30) == "/b"
        assert calls.leader == at["b"]
        assert await mounts(calls) == "/b"  # the next call goes straight there
        assert masters["a"].calls == 1
        await calls.close()

    run(scenario, names=("a", "b", "c"))


def test_a_change_goes_to_the_new_leader_once_the_paused_one_is_superseded() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s = PAUSED_S
        # The paused one's records went with its lease; b leads at a newer term.
        masters["b"].listing = listing((at["b"], "leader", 2))
        calls = calls_to(at["a"], at["b"])
        assert await mount(calls, deadline_s=30) == "/b"
        assert (masters["a"].changes, masters["b"].changes) == (0, 1)
        await calls.close()

    run(scenario)


def test_a_change_waits_for_a_slow_master_that_still_leads_and_is_sent_once() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s = 0.5  # five probe budgets
        masters["b"].leader = at["a"]
        masters["b"].listing = listing((at["a"], "leader", 1), (at["b"], "standby", 1))
        calls = calls_to(at["a"], at["b"])
        assert await mount(calls, deadline_s=30) == "/a"
        assert (masters["a"].calls, masters["b"].calls) == (1, 0)
        assert calls.leader == at["a"]
        await calls.close()

    run(scenario)


def test_a_change_stays_with_a_silent_master_whose_term_is_still_the_newest() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s = 0.5
        # A stale record of b's claims the lead at an older term than a's.
        masters["b"].listing = listing((at["a"], "leader", 3), (at["b"], "leader", 2))
        calls = calls_to(at["a"], at["b"])
        assert await mount(calls, deadline_s=30) == "/a"
        assert (masters["a"].changes, masters["b"].calls) == (1, 0)
        await calls.close()

    run(scenario)


def test_a_silent_master_is_waited_for_while_no_other_names_a_leader() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s = 0.5
        masters["b"].listing = listing((at["b"], "standby", 1))  # a takeover under way
        calls = calls_to(at["a"], at["b"])
        assert await mounts(calls, deadline_s=30) == "/a"
        assert masters["b"].calls == 0
        await calls.close()

    run(scenario)


def test_a_stream_unanswered_before_its_first_message_goes_to_the_new_leader() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s = PAUSED_S
        masters["b"].listing = listing((at["b"], "leader", 2))
        calls = calls_to(at["a"], at["b"])
        states = [
            (job.id, job.state)
            async for job in calls.stream(
                "WatchJob", master_pb2.GetJobRequest(id="j"), deadline_s=30, what="watch"
            )
        ]
        assert states == [("b", "running"), ("b", "completed")]
        await calls.close()

    run(scenario)


def test_a_stream_that_went_silent_after_its_first_message_is_not_sent_again() -> None:
    async def scenario(at: dict[str, str], masters: dict[str, Master]) -> None:
        masters["a"].silent_s_after_first = PAUSED_S
        masters["b"].listing = listing((at["b"], "leader", 2))
        calls = calls_to(at["a"], at["b"])
        states = []
        with pytest.raises(DeadlineExceeded):
            async for job in calls.stream(
                "WatchJob", master_pb2.GetJobRequest(id="j"), deadline_s=1, what="watch"
            ):
                states.append((job.id, job.state))
        assert states == [("a", "running")]
        assert masters["b"].calls == 0
        await calls.close()

    run(scenario)


def test_a_master_list_is_comma_separated_each_address_once_in_order() -> None:
    assert master_addresses(" m1:1, m2:2 ,m1:1,") == ["m1:1", "m2:2"]
    with pytest.raises(ValueError):
        master_addresses(" , ")
