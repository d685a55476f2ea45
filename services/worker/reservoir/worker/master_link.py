"""The worker's calls to the leading master, each with its deadline. With several masters
(`RESERVOIR_MASTER` a comma-separated list) the calls follow the leader: after a takeover
the worker's next report reaches the new leader, whose new epoch makes it a full one; a
leader that stops answering (paused) is left for the new one within the probe budget."""

from __future__ import annotations

from reservoir.common import observability
from reservoir.common.master_calls import MasterCalls
from reservoir.common.models import Mount
from reservoir.common.rpc import ChannelOpener
from reservoir.common.understore.budget_gate import BudgetShare
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc

BlockId = tuple[str, int]


class MasterLink:
    def __init__(
        self, masters: str, timeout_s: float, probe_timeout_s: float, opener: ChannelOpener
    ) -> None:
        """`probe_timeout_s`: how long a call waits for a silent master before following
        the leader the others name (common/master_calls.py)."""
        self._masters = MasterCalls(
            masters, opener, master_pb2_grpc.MasterServiceStub, probe_timeout_s=probe_timeout_s
        )
        self._timeout = timeout_s

    async def mounts(self) -> list[Mount]:
        response = await self._masters.unary(
            "ListMounts",
            master_pb2.ListMountsRequest(),
            deadline_s=self._timeout,
            what="list mounts from the master",
            metadata=observability.inject_metadata(),
        )
        return [Mount.from_proto(m) for m in response.mounts]

    async def report(
        self,
        worker_id: str,
        full: bool,
        added: list[BlockId],
        removed: list[BlockId],
        demands: list[tuple[str, float]],
    ) -> tuple[str, list[tuple[str, BudgetShare]]]:
        """Sends one block report, with this worker's demand of each budgeted mount;
        returns the epoch of the master that took it and this worker's budget shares."""
        request = master_pb2.ReportBlocksRequest(
            worker_id=worker_id,
            full=full,
            added=[common_pb2.BlockRef(file_id=f, index=i) for f, i in added],
            removed=[common_pb2.BlockRef(file_id=f, index=i) for f, i in removed],
            budget_demands=[
                master_pb2.BudgetDemand(mount_path=path, requests_per_s=rate)
                for path, rate in demands
            ],
        )
        response = await self._masters.unary(
            "ReportBlocks", request, deadline_s=self._timeout, what="report blocks to the master"
        )
        shares = [
            (s.mount_path, BudgetShare(s.requests_per_s, s.bytes_per_s, s.in_flight))
            for s in response.budget_shares
        ]
        return str(response.master_epoch), shares

    async def drain(self, worker_id: str) -> str:
        """Asks the master to drain this worker; returns the drain job's id."""
        job = await self._masters.unary(
            "Drain",
            master_pb2.DrainRequest(worker_id=worker_id),
            deadline_s=self._timeout,
            what=f"drain worker {worker_id}",
        )
        return str(job.id)

    async def job_state(self, job_id: str) -> str:
        job = await self._masters.unary(
            "GetJob",
            master_pb2.GetJobRequest(id=job_id),
            deadline_s=self._timeout,
            what=f"job {job_id}",
        )
        return str(job.state)

    async def close(self) -> None:
        await self._masters.close()
