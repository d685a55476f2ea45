"""MasterService over gRPC: protobuf in, domain call, protobuf out. Nothing else. The
writes and namespace edits are `write_rpcs.py`'s, the datasets `dataset_rpcs.py`'s."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import asdict

import grpc.aio

from reservoir.common.errors import ReservoirError, code_value
from reservoir.common.models import Inode, Mount, MountOptions
from reservoir.common.rpc import translate_errors, translate_stream_errors
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc

from .dataset_rpcs import DatasetRpcs
from .job_records import Job
from .leadership import Leadership
from .service import MasterService
from .write_rpcs import WriteRpcs


class MasterServicer(WriteRpcs, DatasetRpcs, master_pb2_grpc.MasterServiceServicer):
    def __init__(self, service: MasterService, leadership: Leadership | None = None) -> None:
        """`leadership`: this master's place among several (ListMasters); without it, a
        master used on its own (tests) answers that it alone leads."""
        self._service = service
        self._leadership = leadership

    @translate_errors
    async def Mount(
        self, request: master_pb2.MountRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.MountResponse:
        mount = await self._service.mount(
            request.path,
            request.uri,
            MountOptions.from_proto(request.options),
            replace=request.replace,
        )
        return master_pb2.MountResponse(mount=mount.to_proto())

    @translate_errors
    async def Unmount(
        self, request: master_pb2.UnmountRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.UnmountResponse:
        await self._service.unmount(request.path)
        return master_pb2.UnmountResponse()

    @translate_errors
    async def ListMounts(
        self, request: master_pb2.ListMountsRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListMountsResponse:
        mounts: list[Mount] = self._service.mounts()
        return master_pb2.ListMountsResponse(mounts=[m.to_proto() for m in mounts])

    @translate_errors
    async def GetFileInfo(
        self, request: master_pb2.GetFileInfoRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.FileInfo:
        inode = await self._service.reads.file_info(
            request.path, request.with_locations, refresh=request.refresh
        )
        return inode.to_proto()

    @translate_errors
    async def GetFileInfos(
        self, request: master_pb2.GetFileInfosRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.GetFileInfosResponse:
        results = await self._service.reads.file_infos(list(request.paths), request.with_locations)
        out = []
        for item in results:
            if isinstance(item, Inode):
                out.append(master_pb2.FileInfoResult(info=item.to_proto()))
            else:
                out.append(_error_result(item))
        return master_pb2.GetFileInfosResponse(results=out)

    @translate_errors
    async def ListDirectory(
        self, request: master_pb2.ListDirectoryRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListDirectoryResponse:
        page = await self._service.reads.directories.page(
            request.path, request.page_size, request.page_token, request.with_locations
        )
        return master_pb2.ListDirectoryResponse(
            entries=[e.to_proto() for e in page.entries], next_page_token=page.next_token
        )

    @translate_errors
    async def ListWorkers(
        self, request: master_pb2.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListWorkersResponse:
        workers = await self._service.workers()
        return master_pb2.ListWorkersResponse(workers=[w.to_proto() for w in workers])

    @translate_errors
    async def ListMasters(
        self, request: master_pb2.ListMastersRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListMastersResponse:
        masters = await self._leadership.masters() if self._leadership is not None else []
        return master_pb2.ListMastersResponse(masters=[m.to_proto() for m in masters])

    @translate_errors
    async def ReportBlocks(
        self, request: master_pb2.ReportBlocksRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ReportBlocksResponse:
        epoch = self._service.report_blocks(
            request.worker_id,
            request.full,
            ((b.file_id, b.index) for b in request.added),
            ((b.file_id, b.index) for b in request.removed),
        )
        shares = self._service.budgets.report(
            request.worker_id, {d.mount_path: d.requests_per_s for d in request.budget_demands}
        )
        return master_pb2.ReportBlocksResponse(
            master_epoch=epoch,
            budget_shares=[
                master_pb2.BudgetShare(
                    mount_path=path,
                    requests_per_s=share.requests_per_s,
                    bytes_per_s=share.bytes_per_s,
                    in_flight=share.in_flight,
                )
                for path, share in shares.items()
            ],
        )

    @translate_stream_errors
    async def LoadMetadata(
        self, request: master_pb2.LoadMetadataRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[master_pb2.LoadMetadataProgress]:
        start = time.monotonic()
        async for listed, written, removed, done in self._service.reads.load_metadata(
            request.path, request.recursive
        ):
            yield master_pb2.LoadMetadataProgress(
                listed=listed,
                written=written,
                removed=removed,
                elapsed_ms=int((time.monotonic() - start) * 1000),
                done=done,
            )

    @translate_errors
    async def Report(
        self, request: master_pb2.ReportRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ReportResponse:
        return master_pb2.ReportResponse(**await self._service.reads.report(request.path))

    @translate_errors
    async def Locality(
        self, request: master_pb2.LocalityRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.LocalityResponse:
        found = await self._service.locality(request.path, request.dataset)
        return master_pb2.LocalityResponse(
            path=found.path,
            files=found.files,
            bytes=found.bytes,
            cached_bytes=found.cached_bytes,
            hosts=[
                master_pb2.HostBytes(host=h.host, zone=h.zone, region=h.region, bytes=h.bytes)
                for h in found.hosts
            ],
            zones=[master_pb2.PlaceBytes(name=z, bytes=b) for z, b in found.zones.items()],
            regions=[master_pb2.PlaceBytes(name=r, bytes=b) for r, b in found.regions.items()],
        )

    @translate_errors
    async def SubmitLoad(
        self, request: master_pb2.SubmitLoadRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Job:
        job = await self._service.jobs.submit(
            request.path,
            request.replicas,
            list(request.priority_paths),
            request.metadata_only,
            list(request.files),
            request_id=request.request_id,
        )
        return _job(job)

    @translate_errors
    async def GetJob(
        self, request: master_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Job:
        return _job(await self._service.jobs.get(request.id))

    @translate_stream_errors
    async def WatchJob(
        self, request: master_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[master_pb2.Job]:
        async for job in self._service.jobs.watch(request.id):
            yield _job(job)

    @translate_errors
    async def CancelJob(
        self, request: master_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Job:
        return _job(await self._service.jobs.cancel(request.id))

    @translate_errors
    async def Drain(
        self, request: master_pb2.DrainRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Job:
        return _job(await self._service.jobs.drain(request.worker_id))

    @translate_errors
    async def Undrain(
        self, request: master_pb2.DrainRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Job:
        return _job(await self._service.jobs.undrain(request.worker_id))

    @translate_errors
    async def ListJobs(
        self, request: master_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListJobsResponse:
        return master_pb2.ListJobsResponse(jobs=[_job(j) for j in await self._service.jobs.all()])

    @translate_errors
    async def Pin(
        self, request: master_pb2.PathRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.PinResponse:
        rule, job_id = await self._service.cache_rules.pin(request.path)
        return master_pb2.PinResponse(rule=rule.to_proto(), load_job_id=job_id)

    @translate_errors
    async def Unpin(
        self, request: master_pb2.PathRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.CacheRule:
        return (await self._service.cache_rules.unpin(request.path)).to_proto()

    @translate_errors
    async def SetTtl(
        self, request: master_pb2.SetTtlRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.CacheRule:
        return (await self._service.cache_rules.set_ttl(request.path, request.ttl_ms)).to_proto()

    @translate_errors
    async def ClearTtl(
        self, request: master_pb2.PathRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.CacheRule:
        return (await self._service.cache_rules.clear_ttl(request.path)).to_proto()

    @translate_errors
    async def ListCacheRules(
        self, request: master_pb2.ListCacheRulesRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListCacheRulesResponse:
        rules = await self._service.cache_rules.rules()
        return master_pb2.ListCacheRulesResponse(rules=[r.to_proto() for r in rules])

    @translate_errors
    async def Free(
        self, request: master_pb2.PathRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.FreeResponse:
        return master_pb2.FreeResponse(**asdict(await self._service.cache_rules.free(request.path)))


def _job(job: Job) -> master_pb2.Job:
    fields = asdict(job)
    # A reader's list of thousands of paths is not sent back with every job listing.
    fields["named_files"] = bool(fields.pop("files"))
    return master_pb2.Job(**fields)


def _error_result(error: ReservoirError) -> master_pb2.FileInfoResult:
    return master_pb2.FileInfoResult(code=code_value(error), message=str(error))
