"""The master's gRPC calls on declared datasets (`datasets.py`): apply a spec, list, get,
delete, each answered with the dataset's status. Translation only."""

from __future__ import annotations

import json

import grpc.aio

from reservoir.common.errors import InvalidArgument
from reservoir.common.rpc import translate_errors
from reservoir.v1 import master_pb2

from .datasets import DatasetRecord
from .service import MasterService


class DatasetRpcs:
    """Part of `MasterServicer`."""

    _service: MasterService

    @translate_errors
    async def ApplyDataset(
        self, request: master_pb2.ApplyDatasetRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Dataset:
        try:
            document = json.loads(request.document_json)
        except ValueError as exc:
            raise InvalidArgument(f"the Dataset document is not JSON: {exc}") from exc
        record = await self._service.apply_dataset(document)
        return await self._dataset(record)

    @translate_errors
    async def ListDatasets(
        self, request: master_pb2.ListDatasetsRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.ListDatasetsResponse:
        records = await self._service.datasets.all()
        return master_pb2.ListDatasetsResponse(datasets=[await self._dataset(r) for r in records])

    @translate_errors
    async def GetDataset(
        self, request: master_pb2.DatasetRef, context: grpc.aio.ServicerContext
    ) -> master_pb2.Dataset:
        record = await self._service.datasets.get(request.name)
        assert record is not None
        return await self._dataset(record)

    @translate_errors
    async def DeleteDataset(
        self, request: master_pb2.DeleteDatasetRequest, context: grpc.aio.ServicerContext
    ) -> master_pb2.Dataset:
        record = await self._service.delete_dataset(request.name, request.keep_cache)
        return await self._dataset(record)

    async def _dataset(self, record: DatasetRecord) -> master_pb2.Dataset:
        status = await self._service.datasets.status(record.spec.name)
        return master_pb2.Dataset(
            name=record.spec.name,
            document_json=json.dumps(record.spec.to_document()),
            status_json=json.dumps(status.to_dict()),
            generation=record.generation,
            created_ms=record.created_ms,
            updated_ms=record.updated_ms,
            deleting=record.deleting,
        )
