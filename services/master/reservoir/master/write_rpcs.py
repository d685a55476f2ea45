"""The master's gRPC calls that write: a file's write session on a writable mount
(`write_sessions.py`: begin, keep, publish, abort) and namespace edits that reach the
under-store (`namespace_edits.py`: remove, rename, make directories). Translation only."""

from __future__ import annotations

import grpc.aio

from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.rpc import translate_errors
from reservoir.common.understore.under_store import Part
from reservoir.common.write_terms import WriteTerms
from reservoir.v1 import common_pb2, master_pb2

from .service import MasterService
from .write_sessions import WriteAsk


class WriteRpcs:
    """Part of `MasterServicer`."""

    _service: MasterService

    @translate_errors
    async def BeginWrite(
        self, request: master_pb2.BeginWriteRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.BeginWriteResponse:
        terms = WriteTerms(
            metadata=ObjectMetadata.from_proto(request.metadata),
            if_absent=request.if_absent,
            if_match=request.if_match,
        )
        ask = WriteAsk(path=request.path, terms=terms, whole=request.whole)
        record, mount = await self._service.writes.begin(ask)
        return master_pb2.BeginWriteResponse(
            write_id=record.id,
            upload_id=record.upload_id,
            ufs_uri=mount.uri + record.key,
            mount_path=mount.path,
            block_size=self._service.mount_table.block_size(mount),
            keepalive_ms=self._service.writes.timeout_ms // 3,
            mount=mount.to_proto(),
        )

    @translate_errors
    async def KeepWrite(
        self, request: master_pb2.WriteRef, context: grpc.aio.ServicerContext
    ) -> master_pb2.KeepWriteResponse:
        await self._service.writes.keep(request.write_id)
        return master_pb2.KeepWriteResponse()

    @translate_errors
    async def PublishWrite(
        self, request: master_pb2.PublishWriteRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.FileInfo:
        parts = [Part(p.number, p.etag) for p in request.parts]
        inode = await self._service.writes.publish(
            request.write_id, parts, request.size, request.etag
        )
        return inode.to_proto()

    @translate_errors
    async def AbortWrite(
        self, request: master_pb2.WriteRef, context: grpc.aio.ServicerContext
    ) -> master_pb2.AbortWriteResponse:
        await self._service.writes.abort(request.write_id)
        return master_pb2.AbortWriteResponse()

    @translate_errors
    async def Remove(
        self, request: master_pb2.RemoveRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.RemoveResponse:
        removed = await self._service.edits.remove(request.path, request.recursive)
        return master_pb2.RemoveResponse(removed=removed)

    @translate_errors
    async def Rename(
        self, request: master_pb2.RenameRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.FileInfo:
        inode = await self._service.edits.rename(request.source, request.destination)
        return inode.to_proto()

    @translate_errors
    async def MakeDirs(
        self, request: master_pb2.PathRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.FileInfo:
        return (await self._service.edits.make_dirs(request.path)).to_proto()
